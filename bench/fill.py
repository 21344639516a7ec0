"""Large tables made fast, for the scenarios that need millions of rows (keys, bulk, console).

Rows are not sent from Python: a seed table of numbers (up to 2^20, made by INSERT ... SELECT
doubling, small enough for MySQL's in-memory temporary table when a table copies into itself) is
copied into the target a seed at a time by INSERT ... SELECT, each row's values computed by MySQL
from its number n. Ids, keys and due times grow with n, so every index fills at its end.

    with filling(cluster) as engine:     # the tables' statistics refreshed once filled
        pending(engine, topic, rows, ...)    DELAY tasks of a topic, each with a key and tags
        archived(engine, topic, rows, ...)   ended tasks of a topic in the backlog
"""
from __future__ import annotations

import contextlib
import hashlib
import time
import uuid
from typing import Iterator

from sqlalchemy import Engine

from delayq import config, db as dbm, schema
from delayq.testing.cluster import Cluster
from delayq.testing.services import MYSQL_SERVER

SEED_MAX = 1 << 20
STATEMENT_S = 600       # one INSERT ... SELECT of SEED_MAX rows, or an ANALYZE of 10M rows, at the most
TASK_COLUMNS = ("task_id, topic, shard_id, due_ms, status, attempt, payload, spec_hash, max_retries, ttr_ms, "
                "created_ms, updated_ms, task_key, tags")
BACKLOG_COLUMNS = ("task_id, topic, shard_id, due_ms, status, attempt, payload, spec_hash, max_retries, ttr_ms, "
                   "created_ms, finished_ms, message, dead_letter, task_key, tags")


def _seed(conn, rows: int, seed_max: int) -> int:
    """bench_seed holding 0 .. size-1, size the power of two at or above min(rows, seed_max)."""
    size = 1
    while size < min(rows, seed_max):
        size *= 2
    conn.exec_driver_sql("CREATE TABLE IF NOT EXISTS bench_seed (n INT NOT NULL PRIMARY KEY) ENGINE=InnoDB")
    have = conn.exec_driver_sql("SELECT COUNT(*) FROM bench_seed").scalar() or 0
    if not have:
        conn.exec_driver_sql("INSERT INTO bench_seed VALUES (0)")
        have = 1
    while have < size:
        conn.exec_driver_sql(f"INSERT INTO bench_seed SELECT n + {have} FROM bench_seed")
        have *= 2
    return have


def fill(engine, table: str, columns: str, values: str, rows: int, max_s: float = 3600,
         seed_max: int = SEED_MAX) -> tuple[int, float]:
    """`rows` rows into table; `values` are SQL expressions of $n (the row's number, from 0).
    Returns (rows made, seconds); fewer rows when max_s ran out."""
    started = time.monotonic()
    with engine.begin() as conn:
        seed = _seed(conn, rows, seed_max)
    made = 0
    while made < rows and time.monotonic() - started < max_s:
        take = min(seed, rows - made)
        with engine.begin() as conn:
            conn.exec_driver_sql(f"INSERT INTO {table} ({columns}) SELECT {values.replace('$n', f'({made} + n)')} "
                                 f"FROM bench_seed WHERE n < {take}")
        made += take
    return made, time.monotonic() - started


def spec_hash(topic: str) -> str:
    return hashlib.blake2b(topic.encode(), digest_size=16).hexdigest()


def long_engine(url: str) -> Engine:
    """An engine on the database at url whose statements may take STATEMENT_S, not a node's 5 s:
    a million rows copied, a day partition of 10M rows dropped."""
    return dbm.make_engine(config.load({"DELAYQ_MYSQL_URL": url, "DELAYQ_MYSQL_TIMEOUT_MS": str(STATEMENT_S * 1000)}).mysql)


@contextlib.contextmanager
def filling(cl: Cluster) -> Iterator[Engine]:
    """An engine on the cluster's database to fill it with; once filled, the tables' statistics are
    refreshed (ANALYZE), so that the scenario's queries are planned on the rows just made."""
    engine = long_engine(cl.url)
    try:
        yield engine
        with engine.connect() as conn:
            conn.exec_driver_sql("ANALYZE TABLE job_delay_task, job_delay_task_backlog").all()
    finally:
        engine.dispose()


@contextlib.contextmanager
def scratch_database(prefix: str, shards: int = 64) -> Iterator[str]:
    """The URL of a new, migrated database with `shards` shards on the test MySQL server, for a
    benchmark with no node; dropped on exit."""
    name = f"{prefix}{uuid.uuid4().hex[:8]}"
    server = long_engine(MYSQL_SERVER)
    schema.create_database(server, name)
    url = f"{MYSQL_SERVER}/{name}"
    try:
        engine = dbm.make_engine(config.load({"DELAYQ_MYSQL_URL": url}).mysql)
        try:
            schema.migrate(engine)
            schema.init_cluster(engine, shards)
        finally:
            engine.dispose()
        yield url
    finally:
        with server.begin() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{name}`")
        server.dispose()


def key_of(prefix: str, n: int) -> str:
    """The key pending() gives row n (keys grow with n, as ids do)."""
    return f"{prefix}{n:010d}"


def pending(engine, topic: str, rows: int, shards: int, due_from_ms: int, due_span_ms: int, *,
            prefix: str = "pk", key_prefix: str = "k", tags: str = "bench", now_ms: int,
            max_s: float = 3600) -> tuple[int, float]:
    """DELAY tasks of topic, ids `<prefix><n>`, keys key_of(key_prefix, n), the tags given
    (comma-separated SQL text), due evenly over due_span_ms from due_from_ms."""
    step = max(1, due_span_ms // max(1, rows))
    values = (f"CONCAT('{prefix}', LPAD($n, 10, '0')), '{topic}', MOD($n, {shards}), {due_from_ms} + $n * {step}, "
              f"0, 0, X'7061796c6f6164', X'{spec_hash(topic)}', 3, 0, {now_ms}, {now_ms}, "
              f"CONCAT('{key_prefix}', LPAD($n, 10, '0')), '{tags}'")
    return fill(engine, "job_delay_task", TASK_COLUMNS, values, rows, max_s)


def archived(engine, topic: str, rows: int, shards: int, finished_from_ms: int, finished_span_ms: int, *,
             prefix: str = "ak", key_prefix: str = "a", now_ms: int, max_s: float = 3600) -> tuple[int, float]:
    """Ended tasks of topic in the backlog, keys key_of(key_prefix, n): FINISHED, one in ten FAILED
    (with a message), finished
    evenly over finished_span_ms from finished_from_ms (keep it within today: the backlog's
    partitions are by day)."""
    step = max(1, finished_span_ms // max(1, rows))
    values = (f"CONCAT('{prefix}', LPAD($n, 10, '0')), '{topic}', MOD($n, {shards}), {finished_from_ms} + $n * {step}, "
              f"IF(MOD($n, 10) = 0, 4, 3), 1, X'7061796c6f6164', X'{spec_hash(topic)}', 3, 0, {now_ms}, "
              f"{finished_from_ms} + $n * {step}, IF(MOD($n, 10) = 0, CONCAT('order ', $n, ' not found'), NULL), 0, "
              f"CONCAT('{key_prefix}', LPAD($n, 10, '0')), 'bench'")
    return fill(engine, "job_delay_task_backlog", BACKLOG_COLUMNS, values, rows, max_s)
