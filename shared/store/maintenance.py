"""Operations on the task tables that ops run from the `delayq` command: list, redrive, purge.
Each works in bounded batches, one transaction per batch, so it never holds locks for long."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Iterator, Sequence

from sqlalchemy import Engine, delete, func, literal, select, union_all

from delayq import tables
from delayq.db import unavailable_on_failure
from delayq.errors import LOCK_CONFLICTS, StoreUnavailable
from delayq.lifecycle import FINAL, Status
from delayq.store.redrives import RUNS, KeyTaken, redrive_locked

TASK, EXECLOG, BACKLOG = tables.task, tables.execlog, tables.backlog


@dataclass(frozen=True)
class TaskFilter:
    """Which tasks an operation touches: every field set narrows it (AND). Used by listTasks, the
    operators' list and redrive; its SQL conditions come from `where`, for the live table and the
    backlog alike."""
    ids: tuple[str, ...] = ()
    topic: str | None = None
    since_ms: int | None = None      # due time from
    until_ms: int | None = None      # due time before
    status: Status | None = None
    key_prefix: bytes | None = None  # the business key starts with these bytes
    tag: str | None = None           # one of the task's tags

    def where(self, table):
        cond = []
        if self.ids:
            cond.append(table.c.task_id.in_(self.ids))
        if self.topic:
            cond.append(table.c.topic == self.topic)
        if self.since_ms is not None:
            cond.append(table.c.due_ms >= self.since_ms)
        if self.until_ms is not None:
            cond.append(table.c.due_ms < self.until_ms)
        if self.status is not None:
            cond.append(table.c.status == int(self.status))
        if self.key_prefix is not None:
            # A range of the (topic, task_key) index, where LIKE would need its wildcards escaped.
            cond.append(table.c.task_key >= self.key_prefix)
            upper = prefix_end(self.key_prefix)
            if upper is not None:
                cond.append(table.c.task_key < upper)
        if self.tag is not None:
            cond.append(func.find_in_set(self.tag.encode(), table.c.tags) > 0)
        return cond

    def tables(self) -> tuple:
        """The tables holding the tasks it may match: live (DELAY, READY, RUNNING), ended, or both."""
        if self.status is None:
            return (TASK, BACKLOG)
        return (BACKLOG,) if self.status in FINAL else (TASK,)


def prefix_end(prefix: bytes) -> bytes | None:
    """The least byte string above every string starting with prefix (None: there is none)."""
    trimmed = prefix.rstrip(b"\xff")
    return trimmed[:-1] + bytes((trimmed[-1] + 1,)) if trimmed else None


def list_tasks(engine: Engine, f: TaskFilter, limit: int, after: str | None = None) -> list[dict]:
    """Live and archived tasks matching the filter, by task id, `limit` per page after `after`."""
    cols = lambda t: [t.c.task_id, t.c.topic, t.c.shard_id, t.c.status, t.c.attempt, t.c.due_ms,  # noqa: E731
                      t.c.task_key, t.c.tags]
    parts = []
    for t in (TASK, BACKLOG):
        q = select(*cols(t)).where(*f.where(t))
        if after:
            q = q.where(t.c.task_id > after)
        parts.append(q.order_by(t.c.task_id).limit(limit))
    u = union_all(*parts).subquery()
    with unavailable_on_failure(), engine.connect() as conn:
        rows = conn.execute(select(u).order_by(u.c.task_id).limit(limit)).mappings().all()
    return [dict(r, status=Status(r["status"]).name) for r in rows]


@dataclass(frozen=True)
class RedriveBatch:
    """One batch of a redrive: the tasks back to DELAY, those left FAILED because another live
    task holds their key (delayq.store.redrives), and the last task id read (where the next
    batch goes on)."""
    redriven: tuple[str, ...]
    held: tuple[tuple[str, str], ...]   # (task id, the live task holding its key)
    read: int                           # FAILED tasks this batch read: redriven and held
    last: str


def redrive(engine: Engine, f: TaskFilter, now_ms: int, batch: int = 500, after: str | None = None
            ) -> Iterator[RedriveBatch]:
    """Move FAILED tasks (by task id, after `after`) back to DELAY, due now, with a fresh set of
    retries (max_retries grows by the original amount past the attempts made), each that held its
    key holding it again unless another live task holds it now. Yields each batch's outcome."""
    f = dataclasses.replace(f, status=Status.FAILED)
    while True:
        done = _redrive_batch(engine, f, now_ms, batch, after)
        if done is None:
            return
        yield done
        after = done.last


def _redrive_batch(engine: Engine, f: TaskFilter, now_ms: int, batch: int, after: str | None) -> RedriveBatch | None:
    for run in range(RUNS):
        try:
            with unavailable_on_failure(), engine.begin() as conn:
                # READ COMMITTED: the look-up of keys nobody holds takes no gap lock (delayq.store.redrives).
                conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
                q = select(BACKLOG).where(*f.where(BACKLOG))
                if after is not None:
                    q = q.where(BACKLOG.c.task_id > after)
                rows = conn.execute(q.order_by(BACKLOG.c.task_id).limit(batch).with_for_update()).mappings().all()
                if not rows:
                    return None
                done = redrive_locked(conn, rows, now_ms)
            return RedriveBatch(tuple(r["task_id"] for r in done.rows), done.held, len(rows), rows[-1]["task_id"])
        except KeyTaken:
            continue
        except StoreUnavailable as e:
            if e.code not in LOCK_CONFLICTS or run == RUNS - 1:
                raise
    raise StoreUnavailable("MySQL unavailable: the keys of the tasks to redrive were taken by other writers "
                           f"{RUNS} times running; try again")


def discard(engine: Engine, ids: Sequence[str]) -> int:
    """Delete the FAILED tasks among ids from the backlog, with their execlog rows, in one
    transaction (by primary key: a few rows, no lock a dispatch waits for). Answers how many."""
    if not ids:
        return 0
    with unavailable_on_failure(), engine.begin() as conn:
        failed = [r.task_id for r in conn.execute(
            select(BACKLOG.c.task_id).where(BACKLOG.c.task_id.in_(ids), BACKLOG.c.status == int(Status.FAILED))
            .with_for_update())]
        if not failed:
            return 0
        conn.execute(delete(EXECLOG).where(EXECLOG.c.task_id.in_(failed)))
        return conn.execute(delete(BACKLOG).where(BACKLOG.c.task_id.in_(failed),
                                                  BACKLOG.c.status == int(Status.FAILED))).rowcount


def purge(engine: Engine, before_ms: int, batch: int = 1000) -> Iterator[tuple[int, int]]:
    """Delete archived tasks finished before before_ms and their execlog rows, then execlog rows of
    any task no longer live dispatched before it. Yields (backlog rows, execlog rows) per batch."""
    while True:
        with unavailable_on_failure(), engine.begin() as conn:
            ids = [r.task_id for r in conn.execute(
                select(BACKLOG.c.task_id).where(BACKLOG.c.finished_ms < before_ms, BACKLOG.c.dead_letter == 0).limit(batch))]
            if not ids:
                break
            logs = conn.execute(delete(EXECLOG).where(EXECLOG.c.task_id.in_(ids))).rowcount
            gone = conn.execute(delete(BACKLOG).where(BACKLOG.c.task_id.in_(ids))).rowcount
        yield gone, logs
    while True:
        with unavailable_on_failure(), engine.begin() as conn:
            orphans = [(r.task_id, r.attempt) for r in conn.execute(
                select(EXECLOG.c.task_id, EXECLOG.c.attempt).where(
                    func.coalesce(EXECLOG.c.dispatched_ms, EXECLOG.c.result_ms) < before_ms,
                    ~select(literal(1)).where(TASK.c.task_id == EXECLOG.c.task_id).exists()).limit(batch))]
            if not orphans:
                return
            n = 0
            for tid, attempt in orphans:
                n += conn.execute(delete(EXECLOG).where(EXECLOG.c.task_id == tid, EXECLOG.c.attempt == attempt)).rowcount
        yield 0, n
