"""The ZooKeeper side of a node: its membership znode and the follower of the master's
assignment. The session itself is delayq.coordination; every path is delayq.zkpaths."""
