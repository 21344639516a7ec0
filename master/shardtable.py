"""ShardTable: the master's writes of shard ownership to MySQL (job_shard), the fence every claim
checks. A grant only ever moves a shard's epoch forward, so a late write cannot undo a newer one."""
from __future__ import annotations

from typing import Mapping

from sqlalchemy import Engine, func, or_, select, update

from shared import tables
from shared.clock import Clock
from shared.db import unavailable_on_failure

S = tables.shard


class ShardTable:
    def __init__(self, engine: Engine, clock: Clock):
        self._engine, self._clock = engine, clock

    def read(self) -> dict[int, tuple[str | None, int]]:
        with unavailable_on_failure(), self._engine.connect() as conn:
            return {r.shard_id: (r.owner, r.epoch) for r in conn.execute(select(S.c.shard_id, S.c.owner, S.c.epoch))}

    def max_epoch(self) -> int:
        with unavailable_on_failure(), self._engine.connect() as conn:
            return conn.execute(select(func.coalesce(func.max(S.c.epoch), 0))).scalar_one()

    def grant(self, grants: Mapping[int, tuple[str, int]]) -> int:
        """Set (owner, epoch) per shard where the stored epoch is not newer; returns rows changed."""
        now = self._clock.now_ms()
        changed = 0
        with unavailable_on_failure(), self._engine.begin() as conn:
            for shard, (owner, epoch) in sorted(grants.items()):
                changed += conn.execute(
                    update(S).where(S.c.shard_id == shard, S.c.epoch <= epoch,
                                    or_(S.c.epoch < epoch, S.c.owner.is_(None), S.c.owner != owner))
                    .values(owner=owner, epoch=epoch, updated_ms=now)).rowcount
        return changed
