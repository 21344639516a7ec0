"""The console's MySQL reads on a real MariaDB/MySQL: each statement reads through the index it is
written for (EXPLAIN of what the console sends), keyset pages follow one another without gaps or
repeats, and counts stop at their cap."""
from __future__ import annotations

import random

import pytest
from sqlalchemy import event, text

from delayq import config, tables
from delayq.lifecycle import Status
from delayq.nodes.console.reads import ConsoleReads, Search, console_engine
from delayq.testing.cluster import fresh_database

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

NOW = 1_900_000_000_000
TOPICS = [f"t{i}" for i in range(40)]


@pytest.fixture(scope="module")
def reads():
    with fresh_database(4) as db:
        engine = console_engine(config.load({"DELAYQ_MYSQL_URL": db.url}).mysql)
        rnd = random.Random(7)
        live = [{"task_id": f"live-{i:06d}", "topic": rnd.choice(TOPICS), "shard_id": i % 4,
                 "due_ms": NOW + rnd.randrange(-60_000, 7 * 86_400_000), "status": rnd.choice([0, 0, 0, 1]),
                 "attempt": 0, "payload": b"", "spec_hash": b"0" * 16, "max_retries": 3, "ttr_ms": 0,
                 "deadline_ms": None, "node_id": None, "created_ms": NOW, "updated_ms": NOW} for i in range(6000)]
        done = [{"task_id": f"done-{i:06d}", "topic": rnd.choice(TOPICS), "shard_id": i % 4, "due_ms": NOW - 1000,
                 "status": rnd.choice([3, 4, 5]), "attempt": 1, "payload": b"", "spec_hash": b"0" * 16,
                 "max_retries": 3, "ttr_ms": 0, "created_ms": NOW, "finished_ms": NOW - rnd.randrange(0, 86_400_000),
                 "message": f"order {i} not found"} for i in range(6000)]
        with engine.begin() as conn:
            conn.execute(tables.task.insert(), live)
            conn.execute(tables.backlog.insert(), done)
            conn.execute(text("ANALYZE TABLE job_delay_task, job_delay_task_backlog"))
        sent: list[tuple[str, dict]] = []

        @event.listens_for(engine, "before_cursor_execute")
        def _seen(conn, cursor, statement, parameters, context, executemany):
            if statement.lstrip().upper().startswith("SELECT"):
                sent.append((statement, parameters))
        yield ConsoleReads(engine), engine, sent, live
        engine.dispose()


def explain(engine, statement, parameters) -> list[dict]:
    with engine.connect() as conn:
        raw = conn.connection.dbapi_connection
        with raw.cursor() as cur:
            cur.execute("EXPLAIN " + statement, parameters)
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row)) for row in cur.fetchall()]


def keys_used(reads_call, reads_fixture) -> dict[str, str | None]:
    _, engine, sent, _ = reads_fixture
    sent.clear()
    reads_call()
    assert sent
    out: dict[str, str | None] = {}
    for statement, parameters in sent:
        for row in explain(engine, statement, parameters):
            if row["table"] in ("job_delay_task", "job_delay_task_backlog"):
                assert row["type"] != "ALL", (row, statement)
                out[row["table"]] = row["key"]
    return out


def test_each_read_uses_its_index(reads):
    r = reads[0]
    assert keys_used(lambda: r.search(Search("t3", Status.DELAY, NOW, NOW + 86_400_000)), reads) == \
        {"job_delay_task": "idx_topic_status_due"}
    assert keys_used(lambda: r.search(Search("t3", Status.DELAY), (NOW + 3_600_000, "live-000100")), reads) == \
        {"job_delay_task": "idx_topic_status_due"}
    assert keys_used(lambda: r.search(Search("t3", Status.FAILED)), reads) == {"job_delay_task_backlog": "idx_finished"}
    assert keys_used(lambda: r.topic_counts("t3", NOW), reads) == {"job_delay_task": "idx_topic_status_due"}
    assert keys_used(lambda: r.load("t3", NOW, 86_400_000, 3_600_000), reads) == {"job_delay_task": "idx_topic_status_due"}
    assert keys_used(lambda: r.dead(NOW - 86_400_000), reads) == {"job_delay_task_backlog": "idx_finished"}
    assert keys_used(lambda: r.task("live-000001"), reads) == {"job_delay_task": "PRIMARY"}


def test_keyset_pages_follow_one_another(reads):
    r, _, _, live = reads
    expected = sorted((t["due_ms"], t["task_id"]) for t in live if t["topic"] == "t5" and t["status"] == 0)
    seen, after = [], None
    while True:
        page = r.search(Search("t5", Status.DELAY), after, limit=17)
        seen += [(x.due_ms, x.task_id) for x in page.rows]
        if page.next_key is None:
            break
        ms, _, last = page.next_key.partition(":")
        after = (int(ms), last)
    assert seen == expected


def test_counts_stop_at_their_cap(reads):
    r, _, _, live = reads
    pending = sum(1 for t in live if t["topic"] == "t7" and t["status"] == 0)
    exact = r.topic_counts("t7", NOW)
    due = [t["due_ms"] for t in live if t["topic"] == "t7" and t["status"] == 0]
    assert exact.pending == pending and exact.overdue == sum(1 for d in due if d < NOW)
    assert exact.next_hour == sum(1 for d in due if NOW <= d < NOW + 3_600_000)
    assert exact.next_day == sum(1 for d in due if NOW <= d < NOW + 86_400_000) > 1
    assert exact.in_flight == sum(1 for t in live if t["topic"] == "t7" and t["status"] == 1)
    capped = r.topic_counts("t7", NOW, cap=10)
    assert capped.pending == 11                  # shown as "10+"
