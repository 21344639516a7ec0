"""The two tables a conformance expectation sets up and looks at — job_delay_task (with its
execlog and backlog) and job_shard — in memory (`FakeTasks`, on delayq.testing.fakes.ClaimTable)
or in MySQL (`RealTasks`, on a database of delayq.testing.database and the production
delayq.store.tasks.TaskStore, delayq.store.overdue.OverdueRows and delayq.store.submits.TaskWriter;
in memory, new tasks go to delayq.testing.fakes.TaskInserts).

An expectation writes rows and shard grants through `TaskTable`, calls the port under test
(`claims`, `overdue`, `scans`, `inserts`) as the dispatch core does, and reads back what a user would find: a row's
status, attempt and due time, whether an attempt's dispatch is recorded.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Protocol, Sequence

from sqlalchemy import Engine

from delayq import config, db as dbm
from delayq.lifecycle import Status
from delayq.nodes.dispatch.ports import ClaimStore, RecordStore
from delayq.store.overdue import Attempt, AttemptDeadline, OverdueRows
from delayq.store.sqltext import insert_tasks
from delayq.store.tasks import TaskStore
from delayq.store.submits import TaskWriter
from delayq.store.values import Entry, NewTask, Submitted
from delayq.testing.database import Database
from delayq.testing.fakes import ClaimTable, TaskInserts


@dataclass(frozen=True)
class RowState:
    """What a user finds of a task: live (DELAY, READY, RUNNING) or in the backlog (final)."""
    status: Status
    attempt: int
    due_ms: int


@dataclass(frozen=True)
class NewRow:
    """A task as a conformance expectation writes it."""
    task_id: str
    shard_id: int
    due_ms: int
    topic: str = "t"
    ttr_ms: int = 3000
    key: bytes | None = None
    keep_one: bool = False           # submitted under KEEP_IF_ACTIVE


class Overdue(Protocol):
    """delayq.store.overdue.OverdueRows as delayq.nodes.outcomes reads it."""

    def expired(self, shards: Sequence[int] | set[int], now_ms: int, limit: int, owner: str) -> list[Attempt]: ...

    def deadlines(self, task_ids: Sequence[str]) -> list[AttemptDeadline]: ...


class ClaimsAndRecords(ClaimStore, RecordStore, Protocol):
    """The store the dispatcher claims in and the recorder records in."""


class Inserts(Protocol):
    """delayq.store.submits.TaskWriter as the submit path writes through it."""

    def insert_groups(self, groups: Sequence[Sequence[NewTask]]) -> list[list[Submitted] | Exception]: ...


class WindowScans(Protocol):
    """TaskStore as delayq.nodes.memory.loader.Loader reads it."""

    def scan_due(self, shards: Iterable[int], before_ms: int, limit: int, from_ms: int = 0,
                 skip: Iterable[str] = ()) -> list[Entry]: ...

    def scan_topic(self, shards: Iterable[int], topic: str, before_ms: int, limit: int) -> list[Entry]: ...


class TaskTable(Protocol):
    @property
    def claims(self) -> ClaimsAndRecords: ...

    @property
    def overdue(self) -> Overdue: ...

    @property
    def scans(self) -> WindowScans: ...

    @property
    def inserts(self) -> Inserts: ...

    def written(self, task_id: str) -> tuple[int, int] | None:
        """(shard, due time) of a task the submit path wrote (None: none)."""

    def add(self, row: NewRow) -> Entry:
        """A DELAY task at attempt 0; its entry as memory would hold it."""

    def grant(self, shard_id: int, owner: str, epoch: int) -> None:
        """job_shard: `owner` holds the shard at `epoch`."""

    def cap(self, topic: str, max_in_flight: int) -> None:
        """The topic's maxInFlight, as its callback service row holds it."""

    def row(self, task_id: str) -> RowState | None:
        """The task as it is now (None: no such task)."""

    def dispatched(self, task_id: str, attempt: int) -> bool:
        """The attempt's dispatch is recorded (its execlog row has a dispatch time)."""


class FakeTasks:
    """The in-memory ClaimTable; its caps are the ones `claim` is given."""

    def __init__(self) -> None:
        self.table = ClaimTable({})
        self.new = TaskInserts()

    @property
    def claims(self) -> ClaimTable:
        return self.table

    @property
    def overdue(self) -> ClaimTable:
        return self.table

    @property
    def scans(self) -> ClaimTable:
        return self.table

    @property
    def inserts(self) -> TaskInserts:
        return self.new

    def written(self, task_id: str) -> tuple[int, int] | None:
        t = self.new.rows.get(task_id)
        return None if t is None else (t.shard_id, t.due_ms)

    def add(self, row: NewRow) -> Entry:
        return self.table.add(row.task_id, row.shard_id, row.due_ms, row.topic, row.ttr_ms, row.key, row.keep_one)

    def grant(self, shard_id: int, owner: str, epoch: int) -> None:
        self.table.shards[shard_id] = (owner, epoch)

    def cap(self, topic: str, max_in_flight: int) -> None:
        """Nothing to write: the fake takes a claim's caps as they are given."""

    def row(self, task_id: str) -> RowState | None:
        r = self.table.rows.get(task_id)
        return None if r is None else RowState(r.status, r.attempt, r.due_ms)

    def dispatched(self, task_id: str, attempt: int) -> bool:
        r = self.table.rows.get(task_id)
        return r is not None and attempt in r.dispatched


class RealTasks:
    """TaskStore and OverdueRows on the nodes' MySQL account, as a node runs them; the rows
    written and read with the database's admin account. `clear()` empties the tables, so that
    the expectations of one module share one database."""

    def __init__(self, database: Database):
        self._admin = _engine(database.url)
        self._node = _engine(database.node_url)
        self._claims = TaskStore(self._node)
        self._autocommit = dbm.make_engine(config.load({"DELAYQ_MYSQL_URL": database.node_url}).mysql, autocommit=True)
        self._inserts = TaskWriter(self._autocommit)
        self._overdue = OverdueRows(self._node)

    @property
    def claims(self) -> TaskStore:
        return self._claims

    @property
    def overdue(self) -> OverdueRows:
        return self._overdue

    @property
    def scans(self) -> TaskStore:
        return self._claims

    @property
    def inserts(self) -> TaskWriter:
        return self._inserts

    def written(self, task_id: str) -> tuple[int, int] | None:
        with self._admin.connect() as conn:
            found = conn.exec_driver_sql("SELECT shard_id, due_ms FROM job_delay_task WHERE task_id = %s",
                                         (task_id,)).first()
        return None if found is None else (found[0], found[1])

    def clear(self) -> None:
        with self._admin.begin() as conn:
            for table in ("job_delay_task", "job_delay_task_execlog", "job_delay_task_backlog", "job_callback_service"):
                conn.exec_driver_sql(f"DELETE FROM {table}")
            conn.exec_driver_sql("UPDATE job_shard SET owner = NULL, epoch = 0")

    def close(self) -> None:
        for engine in (self._admin, self._node, self._autocommit):
            engine.dispose()

    def add(self, row: NewRow) -> Entry:
        task = NewTask(row.task_id, row.topic, row.shard_id, row.due_ms, b"", bytes(16), 3, row.ttr_ms,
                       row.due_ms, key=row.key)
        with self._admin.begin() as conn:
            conn.exec_driver_sql(insert_tasks([task]))
            if row.keep_one:
                # As a KEEP_IF_ACTIVE task waiting behind its key's holder is stored (sql/012).
                conn.exec_driver_sql("UPDATE job_delay_task SET key_mode = 4 WHERE task_id = %s", (row.task_id,))
        return Entry(row.task_id, row.shard_id, row.due_ms, topic=row.topic)

    def grant(self, shard_id: int, owner: str, epoch: int) -> None:
        with self._admin.begin() as conn:
            conn.exec_driver_sql("UPDATE job_shard SET owner = %s, epoch = %s WHERE shard_id = %s",
                                 (owner, epoch, shard_id))

    def cap(self, topic: str, max_in_flight: int) -> None:
        with self._admin.begin() as conn:
            conn.exec_driver_sql(
                "INSERT INTO job_callback_service (topic, exchange, routing_key, max_retries, backoff, "
                "retry_backoff_ms, retry_backoff_max_ms, ttr_ms, enabled, misfire_policy, created_ms, updated_ms, "
                "max_in_flight) VALUES (%s, 'delayq', %s, 3, 'fixed', 1000, 1000, 3000, 1, 'fire', 0, 0, %s)",
                (topic, topic, max_in_flight))

    def row(self, task_id: str) -> RowState | None:
        with self._admin.connect() as conn:
            for table in ("job_delay_task", "job_delay_task_backlog"):
                found = conn.exec_driver_sql(f"SELECT status, attempt, due_ms FROM {table} WHERE task_id = %s",
                                             (task_id,)).first()
                if found is not None:
                    return RowState(Status(found[0]), found[1], found[2])
        return None

    def dispatched(self, task_id: str, attempt: int) -> bool:
        with self._admin.connect() as conn:
            return conn.exec_driver_sql(
                "SELECT 1 FROM job_delay_task_execlog WHERE task_id = %s AND attempt = %s "
                "AND dispatched_ms IS NOT NULL", (task_id, attempt)).first() is not None


def _engine(url: str) -> Engine:
    return dbm.make_engine(config.load({"DELAYQ_MYSQL_URL": url}).mysql)

