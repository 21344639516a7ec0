"""Master-side logic: election, shard assignment and rebalancing."""
