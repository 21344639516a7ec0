"""DeadLetterRows: the backlog rows of FAILED tasks still owed a dead letter.

The FAILED transition marks its backlog row (dead_letter = 1) in the transaction that ends the task
(delayq.store.backlog), so the mark outlives the node. delayq.nodes.amqp.deadletters reads the marked
rows of its shards, publishes them, and clears each mark once the broker confirmed.

Thread-safe: it holds only its engine; each call checks a connection out of the pool.
"""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from sqlalchemy import Engine, select, update

from delayq import tables
from delayq.db import unavailable_on_failure

EXECLOG, BACKLOG = tables.execlog, tables.backlog


class DeadLetterRows:
    def __init__(self, engine: Engine):
        self._engine = engine

    def pending(self, shards: Iterable[int], limit: int) -> list[Mapping]:
        """FAILED tasks of these shards still to be published to a dead-letter exchange."""
        shards = sorted(shards)
        if not shards:
            return []
        with unavailable_on_failure(), self._engine.connect() as conn:
            # The last attempt's dispatch time, for the dead letter's x-delayq-dispatched-at.
            dispatched = select(EXECLOG.c.dispatched_ms).where(
                EXECLOG.c.task_id == BACKLOG.c.task_id, EXECLOG.c.attempt == BACKLOG.c.attempt).scalar_subquery()
            return [dict(r) for r in conn.execute(
                select(BACKLOG.c.task_id, BACKLOG.c.topic, BACKLOG.c.attempt, BACKLOG.c.due_ms, BACKLOG.c.payload,
                       BACKLOG.c.message, BACKLOG.c.task_key, BACKLOG.c.tags, BACKLOG.c.traceparent,
                       dispatched.label("dispatched_ms"))
                .where(BACKLOG.c.dead_letter == 1, BACKLOG.c.shard_id.in_(shards)).limit(limit)).mappings()]

    def clear(self, task_ids: Sequence[str]) -> None:
        """These tasks' dead letters are published (or have nowhere to go): unmark them."""
        if task_ids:
            with unavailable_on_failure(), self._engine.begin() as conn:
                conn.execute(update(BACKLOG).where(BACKLOG.c.task_id.in_(list(task_ids))).values(dead_letter=0))
