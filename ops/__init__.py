"""The operator's `delayq` command: run a node, set up the database, inspect and steer a cluster
(status, drain, pin, reshard), manage services and tasks. A program of its own beside the node:
it reads ZooKeeper and MySQL and calls the nodes over Thrift, and never runs scheduling code
except for `delayq node`, which starts delayq.nodes.main."""
