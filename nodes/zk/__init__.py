"""The ZooKeeper side of a node: its membership znode, the follower of the master's assignment,
and the cluster view the Thrift `cluster()` call answers with. The session itself is delayq.coordination; every
path is delayq.zkpaths."""
