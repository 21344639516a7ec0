"""OverdueRows: which attempts are in flight, and which of them are past their time-to-run.

Read by the node's two ways of timing out an attempt (delayq.nodes.outcomes: Deadlines for the
attempts it dispatched, Expiry for those of dead nodes found by the window scan) and by the
readiness probe's gauges. Each read is one statement; the time-out itself is written by
TaskStore.apply_result, conditional on the attempt, so a read that is stale by the time it is acted
on changes nothing.
"""
from __future__ import annotations

from typing import Iterable, NamedTuple, Sequence

from sqlalchemy import Engine, case, func, or_, select

from delayq import tables
from delayq.db import unavailable_on_failure
from delayq.lifecycle import Status

TASK = tables.task
_IN_FLIGHT = [int(Status.READY), int(Status.RUNNING)]


class Attempt(NamedTuple):
    task_id: str
    attempt: int


class AttemptDeadline(NamedTuple):
    task_id: str
    attempt: int
    deadline_ms: int | None


class InFlight(NamedTuple):
    attempts: int      # READY/RUNNING tasks of the shards
    overdue: int       # how many of them are past their time-to-run


class OverdueRows:
    """Thread-safe: it holds only its engine."""

    def __init__(self, engine: Engine):
        self._engine = engine

    def in_flight(self, shards: Iterable[int], now_ms: int) -> InFlight:
        shards = sorted(shards)
        if not shards:
            return InFlight(0, 0)
        with unavailable_on_failure(), self._engine.connect() as conn:
            row = conn.execute(select(func.count(), func.coalesce(func.sum(case((TASK.c.deadline_ms < now_ms, 1),
                                                                                   else_=0)), 0))
                               .where(TASK.c.shard_id.in_(shards), TASK.c.status.in_(_IN_FLIGHT))).one()
            return InFlight(int(row[0]), int(row[1]))

    def expired(self, shards: Iterable[int], now_ms: int, limit: int, owner: str) -> list[Attempt]:
        """In-flight attempts of these shards whose time-to-run has passed, except fire-and-forget
        ones `owner` claimed itself (it settles those when the broker answers)."""
        shards = sorted(shards)
        if not shards:
            return []
        with unavailable_on_failure(), self._engine.connect() as conn:
            rows = conn.execute(select(TASK.c.task_id, TASK.c.attempt).where(
                TASK.c.shard_id.in_(shards), TASK.c.status.in_(_IN_FLIGHT), TASK.c.deadline_ms < now_ms,
                or_(TASK.c.ttr_ms != 0, TASK.c.node_id.is_(None), TASK.c.node_id != owner)).limit(limit))
            return [Attempt(r.task_id, r.attempt) for r in rows]

    def deadlines(self, task_ids: Sequence[str]) -> list[AttemptDeadline]:
        """The current attempt and deadline of those of these tasks still in flight."""
        if not task_ids:
            return []
        with unavailable_on_failure(), self._engine.connect() as conn:
            return [AttemptDeadline(r.task_id, r.attempt, r.deadline_ms) for r in conn.execute(
                select(TASK.c.task_id, TASK.c.attempt, TASK.c.deadline_ms).where(
                    TASK.c.task_id.in_(list(task_ids)), TASK.c.status.in_(_IN_FLIGHT)))]
