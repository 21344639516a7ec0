"""The scheduling runtime of a node. Its core sits here (DelayQueue, loader, dispatcher, recorder,
deadlines, results, ownership, threads); its doors are subpackages: `front` (the Thrift service),
`amqp` (RabbitMQ: publisher, message headers, results queue, dead letters, exchange checks) and
`zk` (membership, assignment follower). `main` wires one node together."""
