"""ConsoleReads: every MySQL read the console makes, on an engine of its own (two connections) so
a page never waits for, nor holds, a connection the dispatch path needs. Each statement is bounded
by MySQL itself (a statement timeout set on each connection) and reads an index range of bounded
size: no OFFSET, no unbounded COUNT.

What each costs MySQL (n: rows a page shows, at most PAGE):
    task(id)            two primary-key lookups (live table, then the backlog) + the execlog's rows of
                        that task (primary-key prefix)
    search, live        one range of idx_topic_status_due from the keyset, n + 1 rows
    search, archived    idx_finished read newest first from the keyset, filtered by topic and state:
                        n + 1 matching rows, or the statement timeout when they are rare
    topic figures       per topic, two ranges of idx_topic_status_due, each at most COUNT_CAP rows
    upcoming load       per topic, one range of idx_topic_status_due, at most LOAD_CAP rows
    dead letters        idx_finished over the last day, at most DEAD_CAP rows
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from sqlalchemy import Engine, case, event, func, literal, or_, select

from delayq import tables
from delayq.config import MySQLSettings
from delayq.db import make_engine, unavailable_on_failure
from delayq.statementlimits import set_statement_limit, statement_limit
from delayq.lifecycle import LIVE, Status

TASK, BACKLOG, EXECLOG = tables.task, tables.backlog, tables.execlog
PAGE = 50
COUNT_CAP = 10_000          # a count past this shows as "10,000+"
LOAD_CAP = 100_000
DEAD_CAP = 5_000
STATEMENT_S = 3.0
# Archived pages go newest first by (finished_ms, task_id), which idx_finished holds in order; the
# backlog's idx_topic_finished does not order by task_id (the table is partitioned), so a page of a
# topic read through it would sort all of the topic's history first. Along idx_finished a LIMIT
# stops the read early; a small table's statistics would otherwise pick a full scan and a sort.
NEWEST_FIRST = "FORCE INDEX (idx_finished)"
# The live tasks' pages: MariaDB 10.11 chose, with 10M tasks in a topic, to read
# idx_topic_status_due by (topic, status) alone, from the topic's first task, filtering the due
# times up to the page's keyset (ref access: 1.0 s p50, 2.5 s p95 a page, `python -m bench
# --scenario console`); told the index, it reads a range from the keyset's due time instead.
IN_DUE_ORDER = "FORCE INDEX (idx_topic_status_due)"


def console_engine(settings: MySQLSettings) -> Engine:
    engine = make_engine(dataclasses.replace(settings, pool_size=2, timeout_ms=max(settings.timeout_ms, 5000)))

    @event.listens_for(engine, "connect")
    def _bounded(dbapi_connection, _record) -> None:
        cur = dbapi_connection.cursor()
        try:
            set_statement_limit(cur, statement_limit(cur)[0], STATEMENT_S)
        finally:
            cur.close()
    return engine


@dataclass(frozen=True)
class TaskRow:
    task_id: str
    topic: str
    status: Status
    attempt: int
    due_ms: int
    payload: bytes
    max_retries: int
    ttr_ms: int
    created_ms: int
    updated_ms: int
    shard_id: int
    node_id: str | None = None
    deadline_ms: int | None = None
    finished_ms: int | None = None
    message: str | None = None
    archived: bool = False


@dataclass(frozen=True)
class AttemptRow:
    attempt: int
    node_id: str
    dispatched_ms: int | None
    result: str | None
    result_ms: int | None
    message: str | None


@dataclass(frozen=True)
class Listed:
    task_id: str
    topic: str
    status: Status
    attempt: int
    due_ms: int
    finished_ms: int | None


@dataclass(frozen=True)
class Search:
    topic: str
    status: Status = Status.DELAY
    since_ms: int | None = None      # live: due from; archived: finished from
    until_ms: int | None = None      # live: due before; archived: finished before

    @property
    def archived(self) -> bool:
        return self.status not in LIVE


@dataclass(frozen=True)
class Page:
    rows: list[Listed]
    next_key: str | None           # the keyset of the next page ("<ms>:<task id>"), None at the end


@dataclass(frozen=True)
class TopicCounts:
    pending: int                    # DELAY, capped at COUNT_CAP (+1 means more)
    overdue: int
    next_minute: int
    next_hour: int
    next_day: int
    in_flight: int


@dataclass(frozen=True)
class DeadRow:
    task_id: str
    topic: str
    message: str | None
    finished_ms: int


def capped(n: int, cap: int = COUNT_CAP) -> str:
    return f"{cap:,}+" if n > cap else f"{n:,}"


class ConsoleReads:
    def __init__(self, engine: Engine):
        self._engine = engine

    def _rows(self, q):
        with unavailable_on_failure(), self._engine.connect() as conn:
            return conn.execute(q).all()

    def task(self, task_id: str) -> TaskRow | None:
        t = TASK.c
        rows = self._rows(select(t.task_id, t.topic, t.status, t.attempt, t.due_ms, t.payload, t.max_retries,
                                 t.ttr_ms, t.created_ms, t.updated_ms, t.shard_id, t.node_id, t.deadline_ms)
                          .where(t.task_id == task_id))
        if rows:
            r = rows[0]
            return TaskRow(r.task_id, r.topic, Status(r.status), r.attempt, r.due_ms, r.payload, r.max_retries,
                           r.ttr_ms, r.created_ms, r.updated_ms, r.shard_id, r.node_id, r.deadline_ms)
        b = BACKLOG.c
        rows = self._rows(select(b.task_id, b.topic, b.status, b.attempt, b.due_ms, b.payload, b.max_retries,
                                 b.ttr_ms, b.created_ms, b.finished_ms, b.shard_id, b.message)
                          .where(b.task_id == task_id))
        if not rows:
            return None
        r = rows[0]
        return TaskRow(r.task_id, r.topic, Status(r.status), r.attempt, r.due_ms, r.payload, r.max_retries,
                       r.ttr_ms, r.created_ms, r.finished_ms, r.shard_id, finished_ms=r.finished_ms,
                       message=r.message, archived=True)

    def attempts(self, task_id: str, limit: int = 200) -> list[AttemptRow]:
        e = EXECLOG.c
        return [AttemptRow(r.attempt, r.node_id, r.dispatched_ms, r.result, r.result_ms, r.message)
                for r in self._rows(select(e.attempt, e.node_id, e.dispatched_ms, e.result, e.result_ms, e.message)
                                    .where(e.task_id == task_id).order_by(e.attempt).limit(limit))]

    def search(self, s: Search, after: tuple[int, str] | None = None, limit: int = PAGE) -> Page:
        """A page of tasks, in due order (live) or newest finished first (archived), from the
        keyset `after` (the last row's time and id)."""
        if s.archived:
            b = BACKLOG.c
            key = b.finished_ms
            q = select(b.task_id, b.topic, b.status, b.attempt, b.due_ms, b.finished_ms).where(
                b.topic == s.topic, b.status == int(s.status))
            if s.since_ms is not None:
                q = q.where(key >= s.since_ms)
            if s.until_ms is not None:
                q = q.where(key < s.until_ms)
            if after is not None:
                q = q.where(key <= after[0], or_(key < after[0], b.task_id < after[1]))
            q = q.order_by(key.desc(), b.task_id.desc()).limit(limit + 1).with_hint(BACKLOG, NEWEST_FIRST)
        else:
            t = TASK.c
            key = t.due_ms
            q = select(t.task_id, t.topic, t.status, t.attempt, t.due_ms, literal(None).label("finished_ms")).where(
                t.topic == s.topic, t.status == int(s.status))
            if s.since_ms is not None:
                q = q.where(key >= s.since_ms)
            if s.until_ms is not None:
                q = q.where(key < s.until_ms)
            if after is not None:
                q = q.where(key >= after[0], or_(key > after[0], t.task_id > after[1]))
            q = q.order_by(key, t.task_id).limit(limit + 1).with_hint(TASK, IN_DUE_ORDER)
        rows = [Listed(r.task_id, r.topic, Status(r.status), r.attempt, r.due_ms, r.finished_ms)
                for r in self._rows(q)]
        more = len(rows) > limit
        rows = rows[:limit]
        last = rows[-1] if rows else None
        next_key = None
        if more and last is not None:
            next_key = f"{last.finished_ms if s.archived else last.due_ms}:{last.task_id}"
        return Page(rows, next_key)

    def topic_counts(self, topic: str, now_ms: int, cap: int = COUNT_CAP) -> TopicCounts:
        t = TASK.c
        earliest = (select(t.due_ms).where(t.topic == topic, t.status == int(Status.DELAY))
                    .order_by(t.due_ms).limit(cap + 1).subquery())
        d = earliest.c.due_ms

        def before(ms: int):          # a count (a SUM of a comparison would come back as a boolean)
            return func.coalesce(func.sum(case((d < ms, 1), else_=0)), 0)
        pending = select(func.count(), before(now_ms), before(now_ms + 60_000), before(now_ms + 3_600_000),
                         before(now_ms + 86_400_000)).select_from(earliest)
        flying = select(func.count()).select_from(
            select(literal(1).label("x")).where(t.topic == topic, t.status.in_([int(Status.READY), int(Status.RUNNING)]))
            .limit(cap + 1).subquery())
        with unavailable_on_failure(), self._engine.connect() as conn:
            p = conn.execute(pending).one()
            f = conn.execute(flying).scalar_one()
        # Sums of the earliest cap+1 due times: exact for the windows they cover.
        return TopicCounts(int(p[0]), int(p[1]), int(p[2]) - int(p[1]), int(p[3]) - int(p[1]),
                           int(p[4]) - int(p[1]), int(f))

    def load(self, topic: str, now_ms: int, horizon_ms: int, bucket_ms: int, cap: int = LOAD_CAP) -> tuple[dict[int, int], bool]:
        """Pending tasks of a topic due from now to now + horizon, by bucket index; and whether the
        cap cut the count (then the last buckets are short)."""
        t = TASK.c
        due = (select(t.due_ms).where(t.topic == topic, t.status == int(Status.DELAY), t.due_ms >= now_ms,
                                      t.due_ms < now_ms + horizon_ms).order_by(t.due_ms).limit(cap + 1).subquery())
        b = func.floor((due.c.due_ms - now_ms) / bucket_ms).label("b")
        rows = self._rows(select(b, func.count()).select_from(due).group_by(b))
        counts = {int(r[0]): int(r[1]) for r in rows}
        return counts, sum(counts.values()) > cap

    def dead(self, since_ms: int, cap: int = DEAD_CAP) -> tuple[list[DeadRow], bool]:
        """FAILED tasks archived since since_ms, newest first, at most cap; and whether there are more."""
        b = BACKLOG.c
        rows = self._rows(select(b.task_id, b.topic, b.message, b.finished_ms)
                          .where(b.finished_ms >= since_ms, b.status == int(Status.FAILED))
                          .order_by(b.finished_ms.desc()).limit(cap + 1).with_hint(BACKLOG, NEWEST_FIRST))
        return [DeadRow(r.task_id, r.topic, r.message, r.finished_ms) for r in rows[:cap]], len(rows) > cap
