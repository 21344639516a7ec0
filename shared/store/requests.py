"""TaskRequests: what a caller asks of one written task in MySQL: cancel, reschedule, get, a
running attempt's touch, and the topic its permission is checked against. A cancel of a task in flight is recorded for its
running attempt (delayq.store.heartbeats tells it; delayq.lifecycle ends the task CANCELLED).

Each change is conditional on the row's current status under a row lock, so it races a claim or a
result safely: a task that has fired can no longer be cancelled or rescheduled, and the caller is
told so (docs/ARCHITECTURE.md, invariant 1). A task that has ended is read from the backlog.

Thread-safe: it holds only its engine; each call checks a connection out of the pool.
"""
from __future__ import annotations

from typing import Mapping

from sqlalchemy import Engine, select, update

from delayq import tables
from delayq.db import unavailable_on_failure
from delayq.errors import Conflict, NotFound
from delayq.lifecycle import IN_FLIGHT, Status
from delayq.store.backlog import move_to_backlog
from delayq.store import heartbeats
from delayq.store.values import CancelOutcome, Touched

TASK, EXECLOG, BACKLOG = tables.task, tables.execlog, tables.backlog


class TaskRequests:
    def __init__(self, engine: Engine):
        self._engine = engine

    def cancel(self, task_id: str, now_ms: int) -> tuple[CancelOutcome, str | None]:
        """The outcome, and the topic when this call cancelled the task."""
        with unavailable_on_failure(), self._engine.begin() as conn:
            row = conn.execute(select(TASK.c.status, TASK.c.attempt, TASK.c.topic, TASK.c.cancel_ms)
                               .where(TASK.c.task_id == task_id).with_for_update()).first()
            if row is not None:
                if row.status != Status.DELAY:
                    if row.status in IN_FLIGHT and row.cancel_ms is None:
                        # Too late to keep it from running; its next touch says so, and its end
                        # (anything but SUCCESS) makes it CANCELLED rather than a retry.
                        conn.execute(update(TASK).where(TASK.c.task_id == task_id).values(cancel_ms=now_ms))
                    return CancelOutcome.ALREADY_DISPATCHED, None
                move_to_backlog(conn, [(task_id, row.attempt)], (Status.DELAY,), Status.CANCELLED, now_ms, "cancelled")
                return CancelOutcome.CANCELLED, row.topic
            final = conn.execute(select(BACKLOG.c.status).where(BACKLOG.c.task_id == task_id)).first()
            if final is None:
                return CancelOutcome.NOT_FOUND, None
            return (CancelOutcome.CANCELLED if final.status == Status.CANCELLED
                    else CancelOutcome.ALREADY_DISPATCHED), None

    def reschedule(self, task_id: str, due_ms: int, shard_id: int | None, now_ms: int) -> tuple[int, int, str]:
        """Move a DELAY task to due_ms (and to shard_id when given); returns (shard, due, topic)."""
        with unavailable_on_failure(), self._engine.begin() as conn:
            row = conn.execute(select(TASK.c.status, TASK.c.shard_id, TASK.c.topic).where(TASK.c.task_id == task_id).with_for_update()).first()
            if row is None:
                if conn.execute(select(BACKLOG.c.status).where(BACKLOG.c.task_id == task_id)).first() is None:
                    raise NotFound(task_id)
                raise Conflict(task_id, "has ended; only a task that has not fired can be rescheduled")
            if row.status != Status.DELAY:
                raise Conflict(task_id, f"is {Status(row.status).name}; only a task that has not fired can be rescheduled")
            shard = row.shard_id if shard_id is None else shard_id
            conn.execute(update(TASK).where(TASK.c.task_id == task_id).values(due_ms=due_ms, shard_id=shard, updated_ms=now_ms))
            return shard, due_ms, row.topic

    def touch(self, task_id: str, attempt: int, extend_ms: int, progress: bytes | None, now_ms: int) -> Touched:
        """A running attempt's heartbeat: its deadline extended, its progress stored (delayq.store.heartbeats)."""
        return heartbeats.touch(self._engine, task_id, attempt, extend_ms, progress, now_ms)

    def topic_of(self, task_id: str) -> str | None:
        """The task's topic (live or archived; a task's topic never changes), None if no such task."""
        with unavailable_on_failure(), self._engine.connect() as conn:
            return (conn.execute(select(TASK.c.topic).where(TASK.c.task_id == task_id)).scalar()
                    or conn.execute(select(BACKLOG.c.topic).where(BACKLOG.c.task_id == task_id)).scalar())

    def get(self, task_id: str) -> tuple[Mapping, list[Mapping]]:
        """The task (live or archived) as a mapping, and its attempts from the execlog."""
        with unavailable_on_failure(), self._engine.connect() as conn:
            row = conn.execute(select(TASK).where(TASK.c.task_id == task_id)).mappings().first()
            if row is None:
                row = conn.execute(select(BACKLOG).where(BACKLOG.c.task_id == task_id)).mappings().first()
            if row is None:
                raise NotFound(task_id)
            attempts = conn.execute(select(EXECLOG).where(EXECLOG.c.task_id == task_id).order_by(EXECLOG.c.attempt)).mappings().all()
            return dict(row), [dict(a) for a in attempts]
