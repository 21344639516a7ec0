"""RetentionStore: the SQL of retention (what to do is decided in delayq.retention, pure).

A pass, run by one node at a time (a MySQL named lock, `delayq.retention.<database>`, taken
without waiting: the others skip the pass), does in this order:

1. splits tomorrow's partitions (and the days ahead) out of the empty `pmax` tail of the execlog and
   the backlog: REORGANIZE of an empty partition, metadata only;
2. drops the partitions whose day is older than the longest retention: DROP PARTITION, O(1) in
   the rows it removes. A backlog partition still holding a FAILED task owed its dead letter is
   kept (and said so) until the letter is out;
3. deletes, by primary key in batches of `batch` rows, one transaction each, the archived tasks of
   topics kept for less than the longest retention, and their attempts.

The audit log (job_audit, partitioned by day of `at_ms` likewise) has its days ahead split out
and its days older than `audit_days` dropped in the same pass, after the two history tables, by
the procedure `delayq_prune_audit` (sql/018), which runs as the admin account that created it:
the nodes' account has no ALTER, DROP, DELETE or UPDATE on the table, only EXECUTE on that
procedure, which checks the days it is given and reads the time from the server's clock, not the
pass's `now_ms`. An account not yet granted EXECUTE on it (`delayq db init --node-account` not
run again since the upgrade) leaves it as it is, says so (`PassReport.audit_denied`), and prunes
the rest.

What a claim waits for: nothing here. Claims, window scans and hint reads lock or read rows of
job_shard and job_delay_task only; retention never touches those. The DDL of steps 1-2 takes the
metadata lock of the execlog or the backlog for a moment, so the statements on those tables (the
recorder's execlog rows, a task moving to the backlog, a result, a submit with its own task id,
which looks for it in the backlog) wait that moment. While the DDL itself waits for a transaction
that holds the table, they queue behind it: it gives up after `lock_wait_s` (until the next
pass) rather than hold them longer.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Iterator

import sqlalchemy.exc
from sqlalchemy import Connection, Engine, delete, select, text

from delayq import tables
from delayq.db import mysql_code, unavailable_on_failure
from delayq.errors import PRIVILEGE_MISSING, UnknownTopic
from delayq.retention import DAY_MS, TAIL, Partition, PartitionPlan, Retention, plan
from delayq.store.sqltext import literal_ids

log = logging.getLogger(__name__)
EXECLOG, BACKLOG, OVERRIDES, SERVICE = tables.execlog, tables.backlog, tables.topic_retention, tables.callback_service
AUDIT = tables.audit
# Each history table and the column it is partitioned by.
PARTITIONED = {EXECLOG.name: "due_ms", BACKLOG.name: "finished_ms"}
DAY_PARTITIONED = (*PARTITIONED, AUDIT.name)      # and the audit log, by at_ms, kept a retention of its own
# The audit log's procedure refused: no EXECUTE yet, or its definer (an admin account) dropped (1449).
_AUDIT_REFUSED = PRIVILEGE_MISSING | {1449}


@dataclass
class PassReport:
    """What one pass did (or `skipped`: another node held the lock)."""
    skipped: bool = False
    added: dict[str, list[str]] = field(default_factory=dict)
    dropped: dict[str, list[str]] = field(default_factory=dict)
    kept_for_dead_letters: list[str] = field(default_factory=list)
    deleted_tasks: int = 0
    deleted_attempts: int = 0
    drop_ms: dict[str, float] = field(default_factory=dict)    # time of each table's DROP PARTITION
    audit_denied: bool = False      # delayq_prune_audit refused: job_audit's days were left as they are


class RetentionStore:
    """Thread-safe: holds only its engine; each call checks a connection out of the pool."""

    def __init__(self, engine: Engine, lock_wait_s: int = 1):
        self._engine = engine
        self._lock_wait_s = lock_wait_s

    # ---- per-topic overrides (`delayq retention set|clear`) ------------------------------------

    def overrides(self) -> dict[str, int]:
        with unavailable_on_failure(), self._engine.connect() as conn:
            return {r.topic: r.days for r in conn.execute(select(OVERRIDES.c.topic, OVERRIDES.c.days))}

    def set_override(self, topic: str, days: int, now_ms: int) -> None:
        """UnknownTopic when no service was ever registered for the topic: a mistyped name would
        otherwise be kept silently and change nothing."""
        with unavailable_on_failure(), self._engine.begin() as conn:
            if conn.execute(select(SERVICE.c.topic).where(SERVICE.c.topic == topic)).first() is None:
                raise UnknownTopic(topic)
            conn.execute(text("INSERT INTO job_topic_retention (topic, days, updated_ms) VALUES (:t, :d, :n) "
                              "ON DUPLICATE KEY UPDATE days = VALUES(days), updated_ms = VALUES(updated_ms)"),
                         {"t": topic, "d": days, "n": now_ms})

    def clear_override(self, topic: str) -> bool:
        with unavailable_on_failure(), self._engine.begin() as conn:
            return conn.execute(delete(OVERRIDES).where(OVERRIDES.c.topic == topic)).rowcount > 0

    def retention(self, default_days: int) -> Retention:
        return Retention(default_days, self.overrides())

    def topics(self) -> list[str]:
        """The topics of archived tasks: a loose scan of the (topic, finished) index, one dive per
        topic and partition, however many rows each has."""
        with unavailable_on_failure(), self._engine.connect() as conn:
            return [t for (t,) in conn.exec_driver_sql(
                f"SELECT DISTINCT topic FROM {BACKLOG.name} FORCE INDEX (idx_topic_finished)")]

    # ---- partitions -----------------------------------------------------------------------------

    def partitions(self, table: str) -> list[Partition]:
        with unavailable_on_failure(), self._engine.connect() as conn:
            return _partitions(conn, table)

    def prune(self, default_days: int, now_ms: int, ahead_days: int, batch: int,
              max_batches: int = 100, *, audit_days: int = 0) -> PassReport:
        """One pass (see the module's docstring), at most max_batches batches of deletes (the rest
        waits for the next pass); skipped when another node runs one. The audit log's days are
        kept `audit_days` (0: for ever), counted from the MySQL server's clock, not now_ms."""
        with unavailable_on_failure(), self._engine.connect() as conn:
            name = f"delayq.retention.{conn.exec_driver_sql('SELECT DATABASE()').scalar()}"[:64]
            if not conn.exec_driver_sql("SELECT GET_LOCK(%s, 0)", (name,)).scalar():
                return PassReport(skipped=True)
            try:
                conn.exec_driver_sql(f"SET SESSION lock_wait_timeout = {int(self._lock_wait_s)}")
                report = PassReport()
                retention = Retention(default_days, _overrides(conn))
                for table in PARTITIONED:
                    self._partition(conn, table, plan(_partitions(conn, table), now_ms, retention.longest,
                                                      ahead_days), report)
                self._audit(conn, audit_days, ahead_days, report)
                conn.commit()
                # Still under the lock (held by this connection): the deletes run on others.
                left = max_batches
                for topic, days in retention.shorter(self.topics()):
                    for tasks, attempts in self.delete_expired(topic, now_ms - days * DAY_MS, batch, left):
                        report.deleted_tasks += tasks
                        report.deleted_attempts += attempts
                        left -= 1
                    if left <= 0:
                        break
                return report
            finally:
                conn.exec_driver_sql("SELECT RELEASE_LOCK(%s)", (name,))
                conn.commit()

    def _audit(self, conn: Connection, keep_days: int, ahead_days: int, report: PassReport) -> None:
        before = [p.name for p in _partitions(conn, AUDIT.name)]
        started = time.perf_counter()
        try:
            conn.exec_driver_sql(f"CALL {tables.PRUNE_AUDIT}(%s, %s)", (keep_days, ahead_days))
        except (sqlalchemy.exc.OperationalError, sqlalchemy.exc.ProgrammingError) as e:
            if mysql_code(e) not in _AUDIT_REFUSED:
                raise
            log.warning("%s: its day partitions are not kept: %s refused (`delayq db init --node-account` grants "
                        "it; docs/security.md#mysql): %s", AUDIT.name, tables.PRUNE_AUDIT, e.orig)
            report.audit_denied = True
            return
        elapsed_ms = round((time.perf_counter() - started) * 1000, 1)
        after = [p.name for p in _partitions(conn, AUDIT.name)]
        added, dropped = [p for p in after if p not in before], [p for p in before if p not in after]
        if added:
            report.added[AUDIT.name] = added
            log.info("%s: added partitions %s", AUDIT.name, ", ".join(added))
        if dropped:
            report.dropped[AUDIT.name], report.drop_ms[AUDIT.name] = dropped, elapsed_ms
            log.info("%s: dropped partitions %s (past retention)", AUDIT.name, ", ".join(dropped))

    def _partition(self, conn: Connection, table: str, todo: PartitionPlan, report: PassReport) -> None:
        if todo.add:
            parts = ", ".join(f"PARTITION {p.name} VALUES LESS THAN ({p.below_ms:d})" for p in todo.add)
            conn.exec_driver_sql(f"ALTER TABLE {table} REORGANIZE PARTITION {TAIL} INTO "
                                 f"({parts}, PARTITION {TAIL} VALUES LESS THAN MAXVALUE)")
            report.added[table] = [p.name for p in todo.add]
            log.info("%s: added partitions %s", table, ", ".join(p.name for p in todo.add))
        drop = list(todo.drop)
        if table == BACKLOG.name:
            owed = [p for p in drop if conn.exec_driver_sql(
                f"SELECT 1 FROM {table} PARTITION ({p}) WHERE dead_letter = 1 LIMIT 1").first()]
            if owed:
                log.warning("%s: keeping partitions %s past retention: they hold FAILED tasks whose dead letter "
                            "is not published yet", table, ", ".join(owed))
                report.kept_for_dead_letters += owed
                drop = [p for p in drop if p not in owed]
        if drop:
            started = time.perf_counter()
            conn.exec_driver_sql(f"ALTER TABLE {table} DROP PARTITION {', '.join(drop)}")
            report.drop_ms[table] = round((time.perf_counter() - started) * 1000, 1)
            report.dropped[table] = drop
            log.info("%s: dropped partitions %s (past retention)", table, ", ".join(drop))

    # ---- row by row, for topics kept for less than the longest ---------------------------------

    def delete_expired(self, topic: str, before_ms: int, batch: int, max_batches: int) -> Iterator[tuple[int, int]]:
        """Delete archived tasks of `topic` finished before before_ms, and their attempts, `batch`
        tasks per transaction; yields (tasks, attempts) per batch. FAILED tasks still owed their
        dead letter stay."""
        for _ in range(max_batches):
            with unavailable_on_failure(), self._engine.begin() as conn:
                rows = conn.exec_driver_sql(
                    f"SELECT task_id, finished_ms FROM {BACKLOG.name} FORCE INDEX (idx_topic_finished) "
                    "WHERE topic = %s AND finished_ms < %s AND dead_letter = 0 ORDER BY finished_ms LIMIT %s",
                    (topic, before_ms, batch)).all()
                if not rows:
                    return
                ids = literal_ids(r[0] for r in rows)
                last = max(r[1] for r in rows)
                # An attempt is due before its task finishes (a day's margin for nodes' clocks):
                # the bound keeps the delete to the partitions that can hold the rows.
                attempts = conn.exec_driver_sql(
                    f"DELETE FROM {EXECLOG.name} WHERE task_id IN ({ids}) AND due_ms < %s", (last + DAY_MS,)).rowcount
                tasks = conn.exec_driver_sql(
                    f"DELETE FROM {BACKLOG.name} WHERE task_id IN ({ids}) AND finished_ms <= %s AND dead_letter = 0",
                    (last,)).rowcount
            yield tasks, attempts
            if len(rows) < batch:
                return


def _overrides(conn: Connection) -> dict[str, int]:
    return {r.topic: r.days for r in conn.execute(select(OVERRIDES.c.topic, OVERRIDES.c.days))}


def _partitions(conn: Connection, table: str) -> list[Partition]:
    rows = conn.exec_driver_sql(
        "SELECT PARTITION_NAME, PARTITION_DESCRIPTION, TABLE_ROWS FROM information_schema.PARTITIONS "
        "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s ORDER BY PARTITION_ORDINAL_POSITION", (table,)).all()
    if not rows or rows[0][0] is None:
        raise LookupError(f"{table} is not partitioned: run `delayq db migrate`")
    return [Partition(name, None if bound == "MAXVALUE" else int(bound), int(n or 0)) for name, bound, n in rows]
