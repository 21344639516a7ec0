"""The scheduling runtime of a node, in the order a task travels it:

- `front`: the Thrift door where business systems submit, read, cancel and report;
- `memory`: what the node holds of its shards, the DelayQueue (with its fair share and flow
  gate), filled by the loader and by hints from other nodes;
- `dispatch`: due tasks claimed in MySQL, decided on and handed to the publisher;
- `amqp`: the RabbitMQ door, the confirmed publisher and the results queue;
- `outcomes`: publish outcomes recorded, results applied, deadlines timed out;
- `cluster` and `zk`: what the node knows of the cluster (its shards, the reference clock, the
  callback services, what other processes changed) and its ZooKeeper side.

`main` wires one node together and holds no logic of its own; `probes`, `http` and `metrics`
say how the node is doing; `threads` is the owner contract every part with a thread follows."""
