"""The master role a node takes when elected: `election` (ephemeral sequential znodes, the
smallest wins), `assignment` (a pure function from members, shards and intents to an
assignment) and `rebalancer` (writes it to ZooKeeper and the epochs to MySQL); and what is asked
of the master: `intents` (drain, pin, ... checked and recorded in ZooKeeper) and `reshard` (the
online change of the shard count, run by the `delayq` command or, for an admin call, by a node)."""
