"""Retention on the real MariaDB: migration 10 on a database with rows, passes that add and drop
day partitions and delete the rows of topics kept for less, a claim that does not wait while a
partition is dropped, the plans of the history tables' queries, the nodes' own pass and account,
and `delayq retention`."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
import time
import uuid

import pytest
from sqlalchemy import text

from delayq import config, db as dbm, schema
from delayq.lifecycle import Status
from delayq.retention import DAY_MS, TAIL, day_name, day_of
from delayq.store.retention import RetentionStore
from delayq.store.tasks import TaskStore
from delayq.store.values import Entry
from delayq.testing.services import MYSQL_SERVER

from conftest import now_ms, wait_until

EXECLOG, BACKLOG = "job_delay_task_execlog", "job_delay_task_backlog"


def engine_of(url: str):
    return dbm.make_engine(config.load({"DELAYQ_MYSQL_URL": url}).mysql)


@pytest.fixture
def db(database):
    """The module's database, its history tables emptied and repartitioned as a migration left them."""
    engine = engine_of(database.url)
    with engine.begin() as conn:
        for t in (EXECLOG, BACKLOG, "job_topic_retention", "job_delay_task"):
            conn.exec_driver_sql(f"DELETE FROM {t}")
        for t, col in ((EXECLOG, "due_ms"), (BACKLOG, "finished_ms")):
            conn.exec_driver_sql(f"ALTER TABLE {t} PARTITION BY RANGE ({col}) (PARTITION {day_name(day_of(now_ms()))} "
                                 f"VALUES LESS THAN ({(day_of(now_ms()) + 1) * DAY_MS}), "
                                 f"PARTITION {TAIL} VALUES LESS THAN MAXVALUE)")
    yield engine
    engine.dispose()


def register(engine, *topics: str) -> None:
    """Services for the topics (a topic's own retention is set for a registered topic only)."""
    with engine.begin() as conn:
        for topic in topics:
            conn.execute(text(
                "INSERT IGNORE INTO job_callback_service (topic, exchange, routing_key, max_retries, backoff, "
                "retry_backoff_ms, retry_backoff_max_ms, ttr_ms, enabled, misfire_policy, created_ms, updated_ms) "
                "VALUES (:t, 'delayq', :t, 3, 'exponential', 1000, 300000, 0, 1, 'fire', 0, 0)"), {"t": topic})


def archive(conn, topic: str, finished_ms: int, dead_letter: int = 0, attempts: int = 1) -> str:
    task_id = f"t-{uuid.uuid4().hex[:12]}"
    conn.exec_driver_sql(
        f"INSERT INTO {BACKLOG} (task_id, topic, shard_id, due_ms, status, attempt, payload, spec_hash, max_retries, "
        "ttr_ms, created_ms, finished_ms, message, dead_letter) VALUES (%s, %s, 0, %s, %s, %s, 'x', %s, 3, 0, %s, %s, "
        "NULL, %s)", (task_id, topic, finished_ms - 1000, int(Status.FINISHED), attempts,
                      hashlib.md5(task_id.encode()).digest(), finished_ms - 2000, finished_ms, dead_letter))
    for a in range(1, attempts + 1):
        conn.exec_driver_sql(f"INSERT INTO {EXECLOG} (task_id, attempt, due_ms, node_id, dispatched_ms, result, "
                             "result_ms) VALUES (%s, %s, %s, 'n1', %s, 'SUCCESS', %s)",
                             (task_id, a, finished_ms - 1000, finished_ms - 900, finished_ms))
    return task_id


def names(engine, table: str) -> list[str]:
    return [p.name for p in RetentionStore(engine).partitions(table)]


# ---- the migration -------------------------------------------------------------------------------


def test_the_migration_partitions_a_database_that_has_rows():
    name = f"delayq_t_{uuid.uuid4().hex[:10]}"
    server = dbm.make_engine(config.load({"DELAYQ_MYSQL_URL": f"{MYSQL_SERVER}/{name}"}).mysql, database=False)
    schema.create_database(server, name)
    engine = engine_of(f"{MYSQL_SERVER}/{name}")
    try:
        before = [m for m in schema.migrations() if m.version < 10]
        with engine.begin() as conn:
            schema.current_version(conn)
            for m in before:
                for stmt in m.statements:
                    conn.execute(text(stmt))
                conn.execute(text("INSERT INTO delayq_schema_version VALUES (:v, :n, 0)"), {"v": m.version, "n": m.name})
            old = now_ms() - 40 * DAY_MS
            conn.exec_driver_sql(
                f"INSERT INTO {BACKLOG} (task_id, topic, shard_id, due_ms, status, attempt, payload, spec_hash, "
                "max_retries, ttr_ms, created_ms, finished_ms) VALUES ('a', 'x', 0, 1, 3, 1, 'p', 'h', 3, 0, 1, %s), "
                "('b', 'x', 0, 1, 5, 0, 'p', 'h', 3, 0, 1, %s)", (old, now_ms()))
            conn.exec_driver_sql(
                f"INSERT INTO {EXECLOG} (task_id, attempt, node_id, dispatched_ms, result, result_ms) VALUES "
                "('a', 1, 'n', %s, 'SUCCESS', %s), ('a', 2, 'n', NULL, 'UNRECORDED', %s), ('c', 1, 'n', NULL, NULL, NULL)",
                (old, old + 5, old + 10))
        assert schema.migrate(engine)[0] == 10          # and any later one
        with engine.connect() as conn:
            assert sorted(conn.exec_driver_sql(f"SELECT task_id FROM {BACKLOG}").scalars()) == ["a", "b"]
            assert sorted(conn.exec_driver_sql(f"SELECT task_id, attempt, due_ms FROM {EXECLOG}").all()) == [
                ("a", 1, old), ("a", 2, old + 10), ("c", 1, 0)]
        today = day_name(day_of(now_ms()))
        assert names(engine, BACKLOG) == names(engine, EXECLOG) == [today, TAIL]
        # A run cut short is repeated whole: every statement of it runs again without harm.
        with engine.begin() as conn:
            conn.exec_driver_sql("DELETE FROM delayq_schema_version WHERE version = 10")
        assert schema.migrate(engine) == [10]
        assert names(engine, BACKLOG) == [today, TAIL]
        with engine.connect() as conn:
            assert conn.exec_driver_sql(f"SELECT COUNT(*) FROM {EXECLOG}").scalar() == 3
    finally:
        engine.dispose()
        with server.begin() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{name}`")
        server.dispose()


# ---- passes --------------------------------------------------------------------------------------


def test_daily_passes_keep_each_topic_its_retention_and_at_most_a_day_more(db):
    """Ten days, a pass each day: topics kept 3 days (the default), 1 day and 5 days. Partitions go
    past 5 days; the others' rows go row by row."""
    store = RetentionStore(db)
    kept = {"orders": 3, "pings": 1, "audit": 5}
    register(db, "pings", "audit")
    store.set_override("pings", 1, now_ms())
    store.set_override("audit", 5, now_ms())
    start = now_ms()
    dropped = []
    for day in range(10):
        now = start + day * DAY_MS
        with db.begin() as conn:
            for topic in kept:
                archive(conn, topic, now - 3_600_000)
                archive(conn, topic, now)
        report = store.prune(3, now, ahead_days=2, batch=2)
        assert not report.skipped
        dropped += report.dropped.get(BACKLOG, [])
    now = start + 9 * DAY_MS
    assert dropped, "no partition was dropped"
    assert all(day_of(now) - int(day_of(p.below_ms or 0)) <= 7 for p in store.partitions(BACKLOG)[:-1])
    with db.connect() as conn:
        rows = conn.exec_driver_sql(f"SELECT topic, finished_ms FROM {BACKLOG}").all()
        written = {(t, s + d * DAY_MS + o) for t in kept for d in range(10) for s, o in ((start, -3_600_000), (start, 0))}
        for topic, days in kept.items():
            have = sorted(f for t, f in rows if t == topic)
            due = sorted(f for t, f in written if t == topic and f >= now - days * DAY_MS)
            assert set(due) <= set(have), f"{topic}: rows within retention deleted"
            assert all(f >= now - (days + 1) * DAY_MS for f in have), f"{topic}: rows kept past a day more"
        # Attempts go with their tasks (row by row) or with their day (partitions).
        orphans = conn.exec_driver_sql(
            f"SELECT COUNT(*) FROM {EXECLOG} x WHERE NOT EXISTS (SELECT 1 FROM {BACKLOG} b WHERE b.task_id = x.task_id)"
        ).scalar()
        assert orphans == 0
    assert day_name(day_of(now) + 2) in names(db, EXECLOG)


def test_a_partition_owing_a_dead_letter_is_kept_until_it_is_sent(db):
    store = RetentionStore(db)
    with db.begin() as conn:
        owed = archive(conn, "orders", now_ms(), dead_letter=1)
    later = now_ms() + 30 * DAY_MS
    report = store.prune(7, later, ahead_days=1, batch=100)
    today = day_name(day_of(now_ms()))
    assert report.kept_for_dead_letters == [today]
    assert today in names(db, BACKLOG) and today not in names(db, EXECLOG)
    with db.begin() as conn:
        conn.exec_driver_sql(f"UPDATE {BACKLOG} SET dead_letter = 0 WHERE task_id = %s", (owed,))
    assert store.prune(7, later, ahead_days=1, batch=100).dropped == {BACKLOG: [today]}


def test_one_pass_at_a_time(db):
    store = RetentionStore(db)
    with db.connect() as conn:
        name = f"delayq.retention.{conn.exec_driver_sql('SELECT DATABASE()').scalar()}"
        assert conn.exec_driver_sql("SELECT GET_LOCK(%s, 0)", (name,)).scalar() == 1
        try:
            assert store.prune(7, now_ms(), 2, 100).skipped
        finally:
            conn.exec_driver_sql("SELECT RELEASE_LOCK(%s)", (name,))
    assert not store.prune(7, now_ms(), 2, 100).skipped


def test_a_claim_does_not_wait_while_a_partition_is_dropped(db):
    """A transaction holds the backlog (a long report, say), so the DROP waits for the table's
    metadata lock, and while it waits every statement on the backlog queues behind it. A claim
    touches only job_shard and job_delay_task: it goes through."""
    store, tasks = RetentionStore(db, lock_wait_s=20), TaskStore(db)
    now = now_ms()
    with db.begin() as conn:
        conn.exec_driver_sql("UPDATE job_shard SET owner = 'n1', epoch = 7 WHERE shard_id = 0")
        conn.exec_driver_sql(
            "INSERT INTO job_delay_task (task_id, topic, shard_id, due_ms, payload, spec_hash, max_retries, ttr_ms, "
            "created_ms, updated_ms) VALUES ('claimed', 'orders', 0, %s, 'x', 'h', 3, 0, %s, %s)", (now - 10, now, now))
        archive(conn, "orders", now)
    blocker = db.connect()
    blocker.exec_driver_sql(f"SELECT COUNT(*) FROM {BACKLOG}")          # holds its metadata lock until rollback
    outcome: dict = {}
    pruning = threading.Thread(target=lambda: outcome.update(report=store.prune(7, now + 30 * DAY_MS, 1, 100)))
    try:
        pruning.start()

        def waiting() -> bool:
            with db.connect() as conn:
                return bool(conn.exec_driver_sql(
                    "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE DB = DATABASE() "
                    "AND STATE = 'Waiting for table metadata lock' AND INFO LIKE %s", (f"ALTER TABLE {BACKLOG} %",)).scalar())
        wait_until(waiting, 10, what="the backlog's DDL to wait for its metadata lock")
        started = time.monotonic()
        claim = tasks.claim([Entry("claimed", 0, now - 10)], "n1", {0: 7}, now)
        took = time.monotonic() - started
        assert [c.task_id for c in claim.claimed] == ["claimed"]
        # Blocked, it would wait for as long as the blocker holds (lock_wait_timeout is a day): the
        # bound only leaves room for a loaded machine.
        assert took < 3.0, f"the claim took {took:.2f} s"
        assert waiting(), "the DDL stopped waiting before the claim was done: the test proved nothing"
    finally:
        blocker.rollback()
        blocker.close()
        pruning.join(30)
    assert outcome["report"].dropped.get(BACKLOG), outcome


def test_the_history_queries_use_an_index(db):
    """Every statement of delayq's on the two tables, as EXPLAIN shows it: an index, never a scan,
    and pages read in the index's order rather than sorted."""
    with db.begin() as conn:
        archive(conn, "orders", now_ms())
    plans = {
        "lookup (get, cancel, submit)": f"SELECT * FROM {BACKLOG} WHERE task_id IN ('a', 'b')",
        "attempts of a task": f"SELECT * FROM {EXECLOG} WHERE task_id = 'a' ORDER BY attempt",
        "one attempt": f"SELECT dispatched_ms FROM {EXECLOG} WHERE task_id = 'a' AND attempt = 1",
        "dead letters": f"SELECT task_id FROM {BACKLOG} WHERE dead_letter = 1 AND shard_id IN (1, 2) LIMIT 100",
        "a key's tasks, newest first": f"SELECT task_id FROM {BACKLOG} WHERE topic = 'x' AND task_key = 'k' "
                                       "ORDER BY created_ms DESC, task_id DESC LIMIT 10",
        "a topic's tasks by due time": f"SELECT task_id FROM {BACKLOG} WHERE topic = 'x' AND due_ms >= 5 "
                                       "ORDER BY due_ms, task_id LIMIT 10",
        "newest finished of a topic (console)": f"SELECT task_id FROM {BACKLOG} FORCE INDEX (idx_finished) WHERE "
                                                "topic = 'x' AND status = 4 ORDER BY finished_ms DESC, task_id DESC LIMIT 51",
        "topics": f"SELECT DISTINCT topic FROM {BACKLOG} FORCE INDEX (idx_topic_finished)",
        "expired of a topic": f"SELECT task_id, finished_ms FROM {BACKLOG} FORCE INDEX (idx_topic_finished) "
                              "WHERE topic = 'x' AND finished_ms < 5 AND dead_letter = 0 ORDER BY finished_ms LIMIT 10",
    }
    with db.connect() as conn:
        for what, sql in plans.items():
            rows = conn.exec_driver_sql(f"EXPLAIN {sql}").mappings().all()
            assert all(r["key"] for r in rows), f"{what}: {[dict(r) for r in rows]}"
            assert not any("filesort" in (r["Extra"] or "") for r in rows), f"{what} sorts: {[dict(r) for r in rows]}"


# ---- nodes, their account, the command -----------------------------------------------------------


def test_a_node_makes_the_days_ahead_with_its_own_account(db, node_factory, database):
    node_factory()
    ahead = day_name(day_of(now_ms()) + 2)      # DELAYQ_RETENTION_AHEAD_DAYS
    wait_until(lambda: ahead in names(db, BACKLOG) and ahead in names(db, EXECLOG), 40,
               what="the node's first retention pass")
    # The nodes' account may drop partitions too.
    report = RetentionStore(engine_of(database.node_url)).prune(7, now_ms() + 30 * DAY_MS, 1, 100)
    assert day_name(day_of(now_ms())) in report.dropped[EXECLOG]


def delayq(database, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "delayq", *args], env={**os.environ, "DELAYQ_MYSQL_URL": database.url},
                          capture_output=True, text=True, timeout=60)


def test_the_retention_command(db, database):
    unknown = delayq(database, "retention", "set", "audit.trail", "90")
    assert unknown.returncode == 2 and "unknown topic 'audit.trail'" in unknown.stderr
    assert RetentionStore(db).overrides() == {}
    register(db, "audit.trail")
    assert delayq(database, "retention", "set", "audit.trail", "90").returncode == 0
    shown = delayq(database, "retention", "show")
    assert shown.returncode == 0, shown.stderr
    assert "audit.trail: 90 days" in shown.stdout and "default: 7 days" in shown.stdout
    refused = delayq(database, "retention", "set", "no topic!", "3")
    assert refused.returncode == 2 and "topic" in refused.stderr
    assert delayq(database, "retention", "set", "x", "-1").returncode == 2
    assert delayq(database, "retention", "clear", "audit.trail").returncode == 0
    assert RetentionStore(db).overrides() == {}
    ran = delayq(database, "retention", "prune", "--json")
    assert ran.returncode == 0 and '"skipped": false' in ran.stdout
