"""The RabbitMQ side of a node: the confirmed publisher, the one builder of message headers (fired
tasks and dead letters), the results-queue consumer, the dead-letterer and the exchange checks."""
