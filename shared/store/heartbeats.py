"""Heartbeats: a running attempt's touch in MySQL (Thrift `touch`, docs/consumers.md "Long tasks").

A touch moves the attempt's deadline (job_delay_task.deadline_ms, set by the claim to the claim's
time plus the time-to-run) to at least now + extend, and stores the attempt's progress on its
execlog row. The deadline lives in MySQL rather than in the dispatching node's memory so that an
extension outlives that node: its in-memory deadlines re-read MySQL before timing an attempt out
(delayq.nodes.outcomes.deadlines), and so does every other node's window scan. A time-out checks
the deadline again under the row lock (TaskStore.apply_result), so a touch and a time-out of the
same attempt never both win: the touch commits first and the time-out sees the later deadline, or
the time-out commits first and the touch is refused as stale.

Called through TaskRequests.touch, on a connection of the engine's pool.
"""
from __future__ import annotations

from sqlalchemy import Engine, insert, select, update

from delayq import tables
from delayq.db import unavailable_on_failure
from delayq.errors import NotFound, StaleAttempt
from delayq.lifecycle import IN_FLIGHT, Status
from delayq.store.values import Touched

TASK, EXECLOG, BACKLOG = tables.task, tables.execlog, tables.backlog


def touch(engine: Engine, task_id: str, attempt: int, extend_ms: int, progress: bytes | None,
          now_ms: int) -> Touched:
    """Extend the running attempt `attempt` of the task and store its progress (None: keep it).
    NotFound for no such task; StaleAttempt when that attempt is not the running one."""
    with unavailable_on_failure(), engine.begin() as conn:
        row = conn.execute(select(TASK.c.status, TASK.c.attempt, TASK.c.due_ms, TASK.c.deadline_ms, TASK.c.cancel_ms,
                                  TASK.c.node_id)
                           .where(TASK.c.task_id == task_id).with_for_update()).first()
        if row is None:
            final = conn.execute(select(BACKLOG.c.status).where(BACKLOG.c.task_id == task_id)).first()
            if final is None:
                raise NotFound(task_id)
            raise StaleAttempt(task_id, attempt, f"the task has ended: {Status(final.status).name}")
        if row.attempt != attempt or Status(row.status) not in IN_FLIGHT:
            raise StaleAttempt(task_id, attempt, _why_stale(Status(row.status), row.attempt, attempt))
        deadline = max(row.deadline_ms or 0, now_ms + extend_ms)     # never earlier than it was
        if deadline != row.deadline_ms:
            conn.execute(update(TASK).where(TASK.c.task_id == task_id).values(deadline_ms=deadline))
        if progress is not None:
            # The execlog row is written after the broker's confirm, and a consumer may touch first:
            # made here like a fast result's (delayq.store.tasks), keyed by the attempt's due time
            # (its day partition), with the claiming node's id; the recorder sets the dispatch time.
            found = EXECLOG.c.task_id == task_id, EXECLOG.c.attempt == attempt
            if conn.execute(select(EXECLOG.c.due_ms).where(*found)).first() is None:
                conn.execute(insert(EXECLOG).prefix_with("IGNORE").values(
                    task_id=task_id, attempt=attempt, due_ms=row.due_ms, node_id=(row.node_id or "?").split("@")[0],
                    dispatched_ms=now_ms))
            conn.execute(update(EXECLOG).where(*found).values(progress=progress))
        return Touched(row.cancel_ms is not None, deadline)


def _why_stale(status: Status, current: int, attempt: int) -> str:
    if current > attempt:
        return f"attempt {current} is the task's current one (this one timed out and the task went again)"
    if current < attempt:
        return f"no such attempt: the task's current one is {current}"
    return "it is no longer running: it timed out, and the task waits to be dispatched again"
