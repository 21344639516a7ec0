"""Standalone: a node without ZooKeeper owns every shard and is its own cluster of one."""
from __future__ import annotations

import logging
import secrets

from delayq.nodes.cluster.ownership import Ownership
from delayq.nodes.zk.view import ClusterView
from delayq.store.epochs import ShardEpochs
from delayq.zkpaths import member_name

log = logging.getLogger(__name__)


class Standalone:
    def __init__(self, epochs: ShardEpochs, ownership: Ownership, node_id: str):
        self._epochs, self._ownership = epochs, ownership
        # Like a cluster member, a process is its own owner: a restarted node does not inherit
        # (and never mistakes for its own) what its former self claimed.
        self.member = member_name(node_id, secrets.randbits(48))
        self.epoch = 0

    def take_shards(self) -> None:
        """Own every shard at a new epoch, fencing any previous owner (docs/ARCHITECTURE.md, invariant 3)."""
        shards = self._epochs.shard_ids()
        fence = self._epochs.take(self.member, shards)
        self.epoch = max(fence.values())
        self._ownership.set(fence, shards, owner=self.member)
        log.info("took shards %d-%d at epoch %d", min(shards), max(shards), self.epoch)

    def view(self, endpoint: str) -> ClusterView:
        return ClusterView(epoch=self.epoch, master=self.member,
                           assignment={s: self.member for s in sorted(self._ownership.shards())},
                           members={self.member: {"endpoint": endpoint}})
