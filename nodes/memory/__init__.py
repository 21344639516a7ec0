"""What a node holds in memory of its shards: the DelayQueue (`delayqueue`, with `fairshare`
and the `flow` gate), filled by the `loader` from MySQL and by `hints` written by other nodes;
`offertimes` and `spread` serve them."""
