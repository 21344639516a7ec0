"""The master role a node takes when elected: `election` (ephemeral sequential znodes, the
smallest wins), `assignment` (a pure function from members, shards and intents to an
assignment) and `rebalancer` (writes it to ZooKeeper and the epochs to MySQL)."""
