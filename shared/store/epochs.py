"""ShardEpochs: the one writer of shard owners and epochs in MySQL (job_shard), the fence every
claim checks. (`delayq db init` and `delayq reshard` create and remove the rows themselves.)

Two callers, two rules: the master grants each shard to a node at the epoch it chose (`grant`: only
ever forward, so a late write cannot undo a newer one); a standalone node, with no master, takes
all shards at once at a new epoch above every other (`take`). Either way a previous holder's
claims fail from the commit on (delayq.store.tasks.TaskStore.claim locks these rows)."""
from __future__ import annotations

from typing import Iterable, Mapping

from sqlalchemy import Engine, func, or_, select, update

from delayq import tables
from delayq.clock import Clock
from delayq.db import unavailable_on_failure

SHARD = tables.shard


class ShardEpochs:
    def __init__(self, engine: Engine, clock: Clock):
        self._engine, self._clock = engine, clock

    def read(self) -> dict[int, tuple[str | None, int]]:
        with unavailable_on_failure(), self._engine.connect() as conn:
            return {r.shard_id: (r.owner, r.epoch) for r in conn.execute(select(SHARD.c.shard_id, SHARD.c.owner, SHARD.c.epoch))}

    def max_epoch(self) -> int:
        with unavailable_on_failure(), self._engine.connect() as conn:
            return conn.execute(select(func.coalesce(func.max(SHARD.c.epoch), 0))).scalar_one()

    def grant(self, grants: Mapping[int, tuple[str, int]]) -> int:
        """Set (owner, epoch) per shard where the stored epoch is not newer; returns rows changed."""
        now = self._clock.now_ms()
        changed = 0
        with unavailable_on_failure(), self._engine.begin() as conn:
            for shard, (owner, epoch) in sorted(grants.items()):
                changed += conn.execute(
                    update(SHARD).where(SHARD.c.shard_id == shard, SHARD.c.epoch <= epoch,
                                    or_(SHARD.c.epoch < epoch, SHARD.c.owner.is_(None), SHARD.c.owner != owner))
                    .values(owner=owner, epoch=epoch, updated_ms=now)).rowcount
        return changed

    def take(self, owner: str, shards: Iterable[int]) -> dict[int, int]:
        """Make `owner` the holder of these shards at one new epoch; returns shard -> epoch."""
        shards = sorted(shards)
        with unavailable_on_failure(), self._engine.begin() as conn:
            top = conn.execute(select(func.coalesce(func.max(SHARD.c.epoch), 0)).with_for_update()).scalar_one()
            epoch = top + 1
            conn.execute(update(SHARD).where(SHARD.c.shard_id.in_(shards))
                         .values(owner=owner, epoch=epoch, updated_ms=self._clock.now_ms()))
            return {s: epoch for s in shards}

    def shard_ids(self) -> list[int]:
        with unavailable_on_failure(), self._engine.connect() as conn:
            return [r.shard_id for r in conn.execute(select(SHARD.c.shard_id).order_by(SHARD.c.shard_id))]
