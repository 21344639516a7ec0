"""What a node knows of its cluster: the shards it owns (`ownership`, or all of them when
`standalone`), the reference clock (`skew`, `clockcheck`), the callback services (`services`)
and what other processes changed in MySQL (`watch`)."""
