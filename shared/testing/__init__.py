"""Real delayq node processes on real ZooKeeper, MySQL and RabbitMQ, each cluster in a database
of its own: the harness of delayq's tests and of its benchmark (`delayq.testing.cluster`, with
its `database` and `process` parts); in-memory stand-ins for the node's core (`fakes`),
held to the real services by one suite of expectations per port (`conformance`)."""
