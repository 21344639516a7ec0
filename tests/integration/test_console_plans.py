"""The statements behind the console's list, search and task page read through their indexes on a
real MariaDB/MySQL (EXPLAIN of what is sent), also from a keyset deep in a topic: what keeps them
fast with millions of tasks (measured by `python -m bench --scenario console`)."""
from __future__ import annotations

import pytest
from sqlalchemy import event, text

from delayq import config, tables
from delayq.errors import STATEMENT_TIMEOUTS, StoreUnavailable
from delayq.lifecycle import Status
from delayq.nodes.console.reads import ConsoleReads, Search, console_engine
from delayq.store.bykey import KeyRequests
from delayq.store.maintenance import TaskFilter
from delayq.store.requests import TaskRequests
from delayq.testing.cluster import fresh_database

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

NOW = 1_900_000_000_000
ROWS = 3000
TOPICS = ("big", "other")


@pytest.fixture(scope="module")
def db():
    with fresh_database(4) as database:
        engine = console_engine(config.load({"DELAYQ_MYSQL_URL": database.url}).mysql)
        live = [{"task_id": f"live-{i:06d}", "topic": TOPICS[i % 7 == 0], "shard_id": i % 4, "due_ms": NOW + i * 1000,
                 "status": 0, "attempt": 0, "payload": b"p", "spec_hash": b"0" * 16, "max_retries": 3, "ttr_ms": 0,
                 "created_ms": NOW, "updated_ms": NOW, "task_key": f"k{i}".encode()} for i in range(ROWS)]
        done = [{"task_id": f"done-{i:06d}", "topic": TOPICS[i % 7 == 0], "shard_id": i % 4, "due_ms": NOW - 10_000,
                 "status": 4 if i % 10 == 0 else 3, "attempt": 1, "payload": b"p", "spec_hash": b"0" * 16,
                 "max_retries": 3, "ttr_ms": 0, "created_ms": NOW, "finished_ms": NOW - i * 1000, "dead_letter": 0,
                 "message": None, "task_key": f"k{i}".encode()} for i in range(ROWS)]
        attempts = [{"task_id": f"done-{i:06d}", "attempt": 1, "due_ms": NOW - 10_000, "node_id": "n1",
                     "dispatched_ms": NOW - 10_000, "result": "SUCCESS", "result_ms": NOW - i * 1000}
                    for i in range(ROWS)]
        with engine.begin() as conn:
            conn.execute(tables.task.insert(), live)
            conn.execute(tables.backlog.insert(), done)
            conn.execute(tables.execlog.insert(), attempts)
            conn.execute(text("ANALYZE TABLE job_delay_task, job_delay_task_backlog, job_delay_task_execlog"))
        sent: list[tuple[str, object]] = []

        @event.listens_for(engine, "before_cursor_execute")
        def _seen(conn, cursor, statement, parameters, context, executemany):
            if statement.lstrip().upper().startswith("SELECT"):
                sent.append((statement, parameters))
        yield engine, sent
        engine.dispose()


def plans(db, call) -> dict[str, set[str | None]]:
    """Table -> the indexes EXPLAIN says the statements `call` sent read; none reads a whole table
    or sorts its matches."""
    engine, sent = db
    sent.clear()
    accesses.clear()
    call()
    assert sent
    used: dict[str, set[str | None]] = {}
    with engine.connect() as conn:
        raw = conn.connection.dbapi_connection
        assert raw is not None
        for statement, parameters in list(sent):
            with raw.cursor() as cur:
                cur.execute("EXPLAIN " + statement, parameters)
                names = [d[0] for d in cur.description]
                for row in (dict(zip(names, r)) for r in cur.fetchall()):
                    if str(row["table"]).startswith("job_delay_task"):
                        assert row["type"] != "ALL", (row, statement)
                        # A page read in index order stops at its LIMIT; a sort reads every match first.
                        assert "filesort" not in (row["Extra"] or ""), (row, statement)
                        used.setdefault(row["table"], set()).add(row["key"])
                        accesses.append(row)
    return used


accesses: list[dict] = []      # the EXPLAIN rows of the last plans() call


def read_from_the_keyset() -> bool:
    """The live table was read as a range of idx_topic_status_due that starts at the page's due
    time (key_len past topic and status), not from the topic's first task: with 10M tasks, the
    difference between a few milliseconds and seconds a page."""
    topic_and_status = 130 + 1
    rows = [r for r in accesses if r["table"] == "job_delay_task"]
    return bool(rows) and all(r["type"] == "range" and int(r["key_len"]) > topic_and_status for r in rows)


def test_list_pages_deep_in_a_topic_read_its_index(db):
    reads = ConsoleReads(db[0])
    deep = (NOW + 2500 * 1000, "live-002500")
    assert plans(db, lambda: reads.search(Search("big", Status.DELAY), deep)) == \
        {"job_delay_task": {"idx_topic_status_due"}}
    assert read_from_the_keyset(), accesses
    page = reads.search(Search("big", Status.DELAY), deep)
    assert page.rows and all(r.due_ms > deep[0] for r in page.rows)


def test_searches_read_their_indexes(db):
    reads = ConsoleReads(db[0])
    assert plans(db, lambda: reads.search(Search("big", Status.DELAY, NOW + 100_000, NOW + 200_000))) == \
        {"job_delay_task": {"idx_topic_status_due"}}
    assert read_from_the_keyset(), accesses
    for status in (Status.FINISHED, Status.FAILED):
        deep = (NOW - 2000 * 1000, "done-002000")
        assert plans(db, lambda: reads.search(Search("big", status), deep)) == \
            {"job_delay_task_backlog": {"idx_finished"}}, status
    # By business key (the findByKey call), live and ended, and from a page's position.
    keyed = KeyRequests(db[0])
    for before in (None, (NOW, "live-000007")):
        assert plans(db, lambda: keyed.find("other", b"k7", before, 100)) == \
            {"job_delay_task": {"idx_topic_key"}, "job_delay_task_backlog": {"idx_topic_key"}}


def test_list_tasks_reads_each_state_from_the_page_s_position(db):
    """listTasks (Thrift, the CLI): the live tasks of any state are one ordered range per state,
    merged, and the ended ones a range of idx_topic_due: nothing sorts a topic."""
    keyed = KeyRequests(db[0])
    deep = (NOW + 2500 * 1000, "live-002500")
    for f in (TaskFilter(topic="big"), TaskFilter(topic="big", status=Status.DELAY)):
        assert plans(db, lambda: keyed.matching(f, deep, 21)) == \
            {"job_delay_task": {"idx_topic_status_due"}, **({"job_delay_task_backlog": {"idx_topic_due"}}
                                                           if f.status is None else {})}, f
        assert read_from_the_keyset(), accesses
    assert [r.task_id for r in keyed.matching(TaskFilter(topic="big"), deep, 3)] == \
        [f"live-{i:06d}" for i in range(2501, 3000) if i % 7 != 0][:3]


def test_a_list_the_indexes_cannot_narrow_is_stopped_by_the_server_at_its_time_limit(db):
    engine = db[0]
    with engine.begin() as conn:        # a wide topic: 3,000 tasks doubled to 192,000
        conn.exec_driver_sql(
            "INSERT INTO job_delay_task (task_id, topic, shard_id, due_ms, status, attempt, payload, spec_hash, "
            "max_retries, ttr_ms, created_ms, updated_ms) SELECT CONCAT('wide-', task_id), 'wide', shard_id, due_ms, "
            "status, attempt, payload, spec_hash, max_retries, ttr_ms, created_ms, updated_ms FROM job_delay_task")
        for i in range(5):
            conn.exec_driver_sql(
                "INSERT INTO job_delay_task (task_id, topic, shard_id, due_ms, status, attempt, payload, spec_hash, "
                f"max_retries, ttr_ms, created_ms, updated_ms) SELECT CONCAT('{i}', task_id), 'wide', shard_id, "
                "due_ms, status, attempt, payload, spec_hash, max_retries, ttr_ms, created_ms, updated_ms "
                "FROM job_delay_task WHERE topic = 'wide'")
    keyed = KeyRequests(engine)
    no_match = TaskFilter(topic="wide", tag="no-such-tag")
    assert keyed.matching(no_match, None, 21) == []          # within the default limit: an empty page
    with pytest.raises(StoreUnavailable) as e:
        keyed.matching(no_match, None, 21, time_limit_s=0.005)
    assert e.value.code in STATEMENT_TIMEOUTS
    # Both of the pool's connections (it holds two) keep the console engine's own limit.
    with engine.connect() as a, engine.connect() as b:
        assert [float(c.exec_driver_sql("SELECT @@max_statement_time").scalar()) for c in (a, b)] == [3.0, 3.0]


def test_a_task_page_reads_primary_keys_only(db):
    requests = TaskRequests(db[0])
    # (A primary-key lookup that finds no row shows no table at all: "Impossible WHERE".)
    for task_id, table in (("live-000001", "job_delay_task"), ("done-000001", "job_delay_task_backlog")):
        used = plans(db, lambda: (requests.topic_of(task_id), requests.get(task_id)))
        assert set(used) >= {table, "job_delay_task_execlog"}, used
        assert all(keys == {"PRIMARY"} for keys in used.values()), (task_id, used)
