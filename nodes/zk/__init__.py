"""The ZooKeeper side of a node: its membership znode, the follower of the master's assignment,
and the cluster view read for `getClusterInfo`. The session itself is delayq.coordination; every
path is delayq.zkpaths."""
