"""KeyRequests: a topic's tasks found and acted on by business key, and listed by filter.

- `find`: the tasks of a key, live and ended, newest first (created, then task id), a page at a
  time, both tables read in one snapshot so that a task ending meanwhile is seen once;
- `cancel` and `reschedule`: every live task of the key, each answered with what happened to it.
  Like TaskRequests' single-task calls, each change is conditional on the row being DELAY under
  its row lock, so it races a claim safely: a task a claim took first is ALREADY_DISPATCHED, and
  one changed first is claimed by nobody at its old time (a claim takes only DELAY rows, and
  none whose due time moved past the memory entry's);
- `matching`: a TaskFilter's tasks by due time (then task id), keyset-paged, never OFFSET.

Pages go by position (the last row's sort value and task id), so a page costs an index range
however deep it is. Thread-safe: it holds only its engine.
"""
from __future__ import annotations

import enum
import heapq
from typing import NamedTuple, Sequence

from sqlalchemy import Connection, Engine, Row, Table, and_, or_, select, update

from delayq import tables
from delayq.db import unavailable_on_failure
from delayq.statementlimits import time_limited
from delayq.errors import LOCK_CONFLICTS, StoreUnavailable
from delayq.lifecycle import IN_FLIGHT, LIVE, Status
from delayq.store.backlog import move_to_backlog
from delayq.store.maintenance import TaskFilter

TASK, BACKLOG = tables.task, tables.backlog
RUNS = 3            # a change that deadlocked with a claim runs again (it changed nothing)
LIST_STATEMENT_S = 3.0      # a listTasks read that has not filled its page by then is stopped


class Found(NamedTuple):
    task_id: str
    topic: str
    status: Status
    attempt: int
    due_ms: int
    created_ms: int
    key: bytes | None
    tags: bytes | None


class KeyResult(enum.Enum):
    CANCELLED = "CANCELLED"
    RESCHEDULED = "RESCHEDULED"
    ALREADY_DISPATCHED = "ALREADY_DISPATCHED"


class Changed(NamedTuple):
    """What cancelByKey or rescheduleByKey did to one task."""
    task_id: str
    result: KeyResult
    due_ms: int             # when it fires (RESCHEDULED) or was due
    shard_id: int


def _columns(t) -> list:
    return [t.c.task_id, t.c.topic, t.c.status, t.c.attempt, t.c.due_ms, t.c.created_ms, t.c.task_key, t.c.tags]


def _ordered_reads(f: TaskFilter) -> list[tuple[Table, Status | None, str]]:
    """The reads a page of f merges, each (table, the status it adds, the index it names), each
    a range in (due_ms, task_id) order that stops at the page's size. The live table's index
    (topic, status, due_ms) holds that order within one status only, so the live tasks of any
    state are three reads, not one that sorts the whole topic. A key prefix reads the key's
    index instead (its matches sorted: a prefix narrows them). The index is named: with 10M
    tasks in a topic MariaDB 10.11 read (topic, status) from the topic's first task, or sorted all
    of it, rather than the range from the page's position (`python -m bench --scenario console`)."""
    if f.key_prefix is not None:
        return [(t, None, "idx_topic_key") for t in f.tables()]
    reads: list[tuple[Table, Status | None, str]] = []
    for t in f.tables():
        if t is BACKLOG:
            reads.append((BACKLOG, None, "idx_topic_due"))
        else:
            reads += [(TASK, None if f.status is not None else s, "idx_topic_status_due")
                      for s in ([f.status] if f.status is not None else sorted(LIVE))]
    return reads


def _found(r) -> Found:
    return Found(r.task_id, r.topic, Status(r.status), r.attempt, r.due_ms, r.created_ms,
                 None if r.task_key is None else bytes(r.task_key), None if r.tags is None else bytes(r.tags))


class KeyRequests:
    def __init__(self, engine: Engine):
        self._engine = engine

    def find(self, topic: str, key: bytes, before: tuple[int, str] | None, limit: int) -> list[Found]:
        """Up to limit tasks of the key, newest first, after the position `before` (created_ms, task_id)."""
        parts = []
        with unavailable_on_failure(), self._engine.begin() as conn:      # one snapshot for both tables
            for t in (TASK, BACKLOG):
                q = select(*_columns(t)).where(t.c.topic == topic, t.c.task_key == key)
                if before is not None:
                    q = q.where(or_(t.c.created_ms < before[0],
                                    and_(t.c.created_ms == before[0], t.c.task_id < before[1])))
                parts.append([_found(r) for r in conn.execute(
                    q.order_by(t.c.created_ms.desc(), t.c.task_id.desc()).limit(limit))])
        merged = heapq.merge(*parts, key=lambda f: (f.created_ms, f.task_id), reverse=True)
        return list(merged)[:limit]

    def matching(self, f: TaskFilter, after: tuple[int, str] | None, limit: int,
                 time_limit_s: float = LIST_STATEMENT_S) -> list[Found]:
        """Up to limit tasks matching f, by due time then task id, after the position `after`
        (due_ms, task_id). A filter the indexes cannot narrow (a tag: no index holds tags) reads
        in due order until the page is full; each read stops after time_limit_s on the server
        (StatementStopped)."""
        parts = []
        with unavailable_on_failure(), self._engine.begin() as conn, time_limited(conn, time_limit_s):
            for t, status, index in _ordered_reads(f):
                q = select(*_columns(t)).where(*f.where(t)).with_hint(t, f"FORCE INDEX ({index})")
                if status is not None:
                    q = q.where(t.c.status == int(status))
                if after is not None:
                    q = q.where(t.c.due_ms >= after[0],
                                or_(t.c.due_ms > after[0], and_(t.c.due_ms == after[0], t.c.task_id > after[1])))
                parts.append([_found(r) for r in conn.execute(q.order_by(t.c.due_ms, t.c.task_id).limit(limit))])
        return list(heapq.merge(*parts, key=lambda x: (x.due_ms, x.task_id)))[:limit]

    def cancel(self, topic: str, key: bytes, now_ms: int, limit: int) -> tuple[list[Changed], bool]:
        """Cancel the key's live tasks that have not fired (up to limit, newest first); each one's
        outcome, and whether the key has more to cancel than `limit`."""
        def change(conn: Connection, rows: list) -> list[Changed]:
            waiting = [(r.task_id, r.attempt) for r in rows if r.status == Status.DELAY]
            moved = move_to_backlog(conn, waiting, (Status.DELAY,), Status.CANCELLED, now_ms, "cancelled by key")
            running = [r.task_id for r in rows if r.status in IN_FLIGHT]
            if running:
                # As cancel does (delayq.store.requests): too late to keep them from running, but the
                # running attempt's touch says so, and its end makes the task CANCELLED, not a retry.
                conn.execute(update(TASK).where(TASK.c.task_id.in_(running), TASK.c.cancel_ms.is_(None))
                             .values(cancel_ms=now_ms))
            return [Changed(r.task_id, KeyResult.CANCELLED if r.task_id in moved else KeyResult.ALREADY_DISPATCHED,
                            r.due_ms, r.shard_id) for r in rows]
        # An in-flight task told of the cancel has had its answer: a call again goes on with the rest.
        todo = or_(TASK.c.status == int(Status.DELAY),
                   and_(TASK.c.status.in_([int(s) for s in IN_FLIGHT]), TASK.c.cancel_ms.is_(None)))
        return self._change(topic, key, limit, change, todo)

    def reschedule(self, topic: str, key: bytes, due_ms: int, shard_id: int | None, now_ms: int,
                   limit: int) -> tuple[list[Changed], bool]:
        """Move the key's live tasks that have not fired to due_ms (and to shard_id when given)."""
        def change(conn: Connection, rows: list) -> list[Changed]:
            waiting = [r.task_id for r in rows if r.status == Status.DELAY]
            if waiting:
                values = {"due_ms": due_ms, "updated_ms": now_ms}
                if shard_id is not None:
                    values["shard_id"] = shard_id
                conn.execute(update(TASK).where(TASK.c.task_id.in_(waiting), TASK.c.status == int(Status.DELAY))
                             .values(**values))
            return [Changed(r.task_id, KeyResult.RESCHEDULED, due_ms, r.shard_id if shard_id is None else shard_id)
                    if r.status == Status.DELAY else Changed(r.task_id, KeyResult.ALREADY_DISPATCHED, r.due_ms,
                                                             r.shard_id) for r in rows]
        # A rescheduled task stays live: a call again goes on with those not yet at the new time.
        moved = TASK.c.due_ms != due_ms
        if shard_id is not None:
            moved = or_(moved, TASK.c.shard_id != shard_id)
        todo = and_(TASK.c.status == int(Status.DELAY), moved)
        return self._change(topic, key, limit, change, todo)

    def _change(self, topic: str, key: bytes, limit: int, change, todo) -> tuple[list[Changed], bool]:
        """change() the key's live tasks, newest first, up to limit; `more`: the key has more. A key
        of more live tasks than one call answers takes first those it still has to change (`todo`),
        then the others as room is left, so that each call goes on where the last left off: newest
        first alone, a reschedule answered the same thousand tasks again at every call."""
        for run in range(RUNS):
            try:
                with unavailable_on_failure(), self._engine.begin() as conn:
                    rows = _newest_locked(conn, topic, key, limit + 1)
                    if len(rows) <= limit:
                        return change(conn, rows), False
                    first = _newest_locked(conn, topic, key, limit + 1, todo)
                    if len(first) > limit:
                        return change(conn, first[:limit]), True
                    taken = {r.task_id for r in first}
                    rest = [r for r in rows if r.task_id not in taken][:limit - len(first)]
                    return change(conn, [*first, *rest]), False
            except StoreUnavailable as e:
                if e.code not in LOCK_CONFLICTS or run == RUNS - 1:
                    raise
        raise AssertionError("unreachable")


def _newest_locked(conn: Connection, topic: str, key: bytes, n: int, *where) -> Sequence[Row]:
    """The key's n newest live tasks (meeting `where`), locked through the (topic, task_key)
    index: a claim of one of them waits for this transaction, and then finds it changed."""
    return conn.execute(select(TASK.c.task_id, TASK.c.status, TASK.c.attempt, TASK.c.due_ms, TASK.c.shard_id)
                        .where(TASK.c.topic == topic, TASK.c.task_key == key, *where)
                        .order_by(TASK.c.created_ms.desc(), TASK.c.task_id.desc()).limit(n)
                        .with_for_update()).all()

