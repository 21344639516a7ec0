"""The RabbitMQ side of a node: the confirmed publisher (with its frame encoder, `frames`, the
ledger of what awaits its confirm, `confirms`, and the one use of pika's private API, `pikaio`), the one builder of messages (`messages`: fired tasks
and dead letters), the results-queue consumer, the dead-letterer and the exchange checks."""
