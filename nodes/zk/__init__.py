"""The ZooKeeper side of a node, all on one session (`parts.ZkParts`): its membership znode, the
follower of the master's assignment, the master role, and the cluster view the Thrift `cluster()`
call answers with. The session itself is delayq.coordination; every path is delayq.zkpaths."""
