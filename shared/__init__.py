"""delayq: a distributed delayed-task scheduler (Thrift in, MySQL as truth, RabbitMQ out,
ZooKeeper for the cluster).

The package is the map of the system (docs/ARCHITECTURE.md draws it):

    delayq            what every role shares: config, errors, clock, MySQL engine and tables,
                      schema migrations, the nodes' MySQL account, ZooKeeper paths, session and
                      identity, task lifecycle, RabbitMQ names
    delayq.client     the SDK for business systems and downstream apps: DelayqClient (needs only
                      `thrift`), the consumer helper, the IDL and its generated code, the demo
    delayq.access     who may call the nodes: tokens, permissions and grants, the node's TLS context
    delayq.store      the SQL of tasks, shards and clients, by role: tasks, submits, backlog, epochs,
                      clients, maintenance
    delayq.nodes      the scheduling runtime of a node: DelayQueue, loader, dispatcher, recorder,
                      and its doors: front (Thrift), amqp (RabbitMQ), zk (ZooKeeper)
    delayq.master     the master role a node takes when elected: election, assignment, rebalancing
    delayq.ops        the operator's `delayq` command
    delayq.testing    node and cluster processes on real services, for tests and benchmarks

Importing `delayq` or `delayq.client` loads no database, ZooKeeper or AMQP library.
"""
__version__ = "0.1.0"
