"""ZkParts: a node's ZooKeeper side, all on one session: its membership, the follower of the
master's assignment, and the master role (election and rebalancer).

Subscription order matters, and is kept here: the member name exists before the follower and the
election use it. A node without ZooKeeper has no ZkParts (delayq.nodes.cluster.standalone).

Threads: kazoo's, owned by the session; the rebalancer's, owned by it. `start()` and `stop()`
bring both up and down; the caller decides when (delayq.nodes.main).
"""
from __future__ import annotations

from typing import Callable

from delayq.clock import Clock
from delayq.config import Settings
from delayq.coordination import ZkSession
from delayq.master.election import Election
from delayq.master.rebalancer import Rebalancer
from delayq.nodes.cluster.ownership import Ownership
from delayq.nodes.metrics import Metrics
from delayq.nodes.zk.follower import AssignmentFollower
from delayq.nodes.zk.membership import Membership
from delayq.store.connections import NodeConnections
from delayq.store.epochs import ShardEpochs
from delayq.zkpaths import ZkPaths


class ZkParts:
    def __init__(self, s: Settings, ownership: Ownership, epochs: ShardEpochs, clock: Clock,
                 metrics: Metrics, stats: Callable[[], dict], connections: NodeConnections | None = None):
        self.paths = ZkPaths(s.node.cluster)
        self.session = ZkSession(s.zk)
        endpoint = f"{s.node.advertise_host}:{s.node.port}"
        self.membership = Membership(self.session, self.paths, s.node.node_id, endpoint, stats)
        member = lambda: self.membership.member     # noqa: E731 - read when used, not now
        self.follower = AssignmentFollower(self.session, self.paths, ownership, member, epochs.shard_ids)
        self.rebalancer = Rebalancer(self.session, self.paths, epochs, clock, member,
                                     end_connections=None if connections is None else connections.end)
        self.election = Election(self.session, self.paths, member, self.rebalancer.set_leader)
        self._metrics = metrics
        self.session.subscribe(self._count_trouble)

    def _count_trouble(self, state: str, _session: int | None) -> None:
        if state != "connected":
            self._metrics.errors.labels("zookeeper").inc()

    def start(self, timeout: float) -> None:
        self.rebalancer.start()
        self.session.start(timeout=timeout)

    def stop(self) -> None:
        self.rebalancer.stop()
        self.session.stop()
