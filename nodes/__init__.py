"""The scheduling runtime of a node. Its core sits here (DelayQueue, loader, dispatcher, recorder,
deadlines, results, ownership, standalone, threads); its doors are subpackages: `front` (the
Thrift service), `amqp` (RabbitMQ: publisher, message builder, frame encoder, results queue, dead
letters, exchange checks) and `zk` (membership, assignment follower, cluster view). `main` wires
one node together and holds no logic of its own."""
