"""Real delayq node processes on real ZooKeeper, MySQL and RabbitMQ, each cluster in a database
of its own: the harness of delayq's tests and of its benchmark (`delayq.testing.cluster`)."""
