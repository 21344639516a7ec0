"""How long dropping a day of history takes: `python -m bench.retention --rows 10000000`.

In a database of its own (dropped after), it fills one day partition of the backlog (and, with
--execlog, of the execlog) with `rows` archived tasks by INSERT ... SELECT (a seed of 2^20 made by
doubling, copied as often as needed), bounded by
--max-generate-s, then runs the retention pass a node would run eight days later and reports the
time of the DROP PARTITION statements (delayq.store.retention.PassReport.drop_ms), and, for
comparison, how long deleting --delete-sample rows of another day by primary key in batches took.
Prints one JSON line. The machine is shared: figures are of a single run, not a steady load.
"""
from __future__ import annotations

import argparse
import json
import time
import uuid

from bench.fill import fill as seed_fill, long_engine
from delayq import config, db as dbm, schema
from delayq.retention import DAY_MS, day_name, day_of
from delayq.store.retention import RetentionStore
from delayq.testing.services import MYSQL_SERVER

BACKLOG, EXECLOG = "job_delay_task_backlog", "job_delay_task_execlog"


def fill(engine, table: str, rows: int, at_ms: int, deadline: float) -> int:
    """`rows` rows of one day in `table`, by bench.fill's INSERT ... SELECT from a seed of numbers.
    Returns the rows made (fewer if the deadline, a time.monotonic() instant, came first)."""
    columns, values = {
        BACKLOG: ("task_id, topic, shard_id, due_ms, status, attempt, payload, spec_hash, max_retries, ttr_ms, "
                  "created_ms, finished_ms, message, dead_letter",
                  f"CONCAT('t', $n), 'bench', MOD($n, 64), {at_ms}, 3, 1, 'payload of a task', '0123456789abcdef', 3, "
                  f"30000, {at_ms}, {at_ms}, NULL, 0"),
        EXECLOG: ("task_id, attempt, due_ms, node_id, dispatched_ms, result, result_ms, message",
                  f"CONCAT('t', $n), 1, {at_ms}, 'node-1', {at_ms}, 'SUCCESS', {at_ms}, NULL")}[table]
    made, _ = seed_fill(engine, table, columns, values, rows, max_s=max(0.0, deadline - time.monotonic()))
    return made


# delayq's statements on the two tables (delayq.store.*, delayq.nodes.console.reads), by role.
HOT = {
    "submit/get/cancel: a task by id": f"SELECT task_id, spec_hash FROM {BACKLOG} WHERE task_id IN ('tA', 'tB')",
    "get: a task's attempts": f"SELECT * FROM {EXECLOG} WHERE task_id = 'tA' ORDER BY attempt",
    "result: one attempt": f"SELECT dispatched_ms FROM {EXECLOG} WHERE task_id = 'tA' AND attempt = 1",
    "result: an attempt's row": f"UPDATE {EXECLOG} SET result = 'SUCCESS' WHERE task_id = 'tA' AND attempt = 1",
    "dead letters owed": f"SELECT task_id FROM {BACKLOG} WHERE dead_letter = 1 AND shard_id IN (1, 2) LIMIT 100",
    "console: newest archived of a topic": f"SELECT task_id FROM {BACKLOG} FORCE INDEX (idx_finished) WHERE topic = "
                                           "'bench' AND status = 4 ORDER BY finished_ms DESC, task_id DESC LIMIT 51",
    "retention: topics": f"SELECT DISTINCT topic FROM {BACKLOG} FORCE INDEX (idx_topic_finished)",
    "retention: expired of a topic": f"SELECT task_id, finished_ms FROM {BACKLOG} FORCE INDEX (idx_topic_finished) "
                                     "WHERE topic = 'short' AND finished_ms < 5 AND dead_letter = 0 "
                                     "ORDER BY finished_ms LIMIT 1000",
}


def plans(engine) -> dict[str, str]:
    """EXPLAIN of each statement in HOT: type, key, rows, partitions."""
    out = {}
    with engine.connect() as conn:
        for what, sql in HOT.items():
            rows = conn.exec_driver_sql(f"EXPLAIN PARTITIONS {sql}").mappings().all()
            out[what] = "; ".join(f"{r['type']} {r['key']} rows~{r['rows']} partitions {r['partitions']}"
                                  f"{' (' + r['Extra'] + ')' if r['Extra'] else ''}" for r in rows)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--execlog", action="store_true", help="fill the execlog's day too")
    p.add_argument("--max-generate-s", type=float, default=1200)
    p.add_argument("--delete-sample", type=int, default=20_000)
    a = p.parse_args()
    name = f"delayq_bench_{uuid.uuid4().hex[:8]}"
    settings = config.load({"DELAYQ_MYSQL_URL": f"{MYSQL_SERVER}/{name}"})
    server = dbm.make_engine(settings.mysql, database=False)
    schema.create_database(server, name)
    engine = long_engine(f"{MYSQL_SERVER}/{name}")
    out: dict = {"rows": a.rows}
    try:
        schema.migrate(engine)
        store = RetentionStore(engine)
        now = int(time.time() * 1000)
        store.prune(7, now, 2, 1000)                  # today's partition, and the next two days
        started = time.monotonic()
        deadline = started + a.max_generate_s
        out["backlog_rows"] = fill(engine, BACKLOG, a.rows, now, deadline)
        if a.execlog:
            out["execlog_rows"] = fill(engine, EXECLOG, a.rows, now, deadline)
        out["generate_s"] = round(time.monotonic() - started, 1)
        # Another day's rows, deleted by primary key in batches as a topic kept for less would be.
        tomorrow = (day_of(now) + 1) * DAY_MS + 3_600_000
        with engine.begin() as conn:
            conn.exec_driver_sql(f"INSERT INTO {BACKLOG} (task_id, topic, shard_id, due_ms, status, attempt, payload, "
                                 "spec_hash, max_retries, ttr_ms, created_ms, finished_ms, message, dead_letter) "
                                 f"SELECT CONCAT('d', task_id), 'short', shard_id, due_ms, status, attempt, payload, "
                                 f"spec_hash, max_retries, ttr_ms, created_ms, %s, message, 0 FROM {BACKLOG} LIMIT %s",
                                 (tomorrow, a.delete_sample))
        with engine.connect() as conn:
            conn.exec_driver_sql(f"ANALYZE TABLE {BACKLOG}").all()
            out["day_partition_bytes"] = int(conn.exec_driver_sql(
                "SELECT DATA_LENGTH + INDEX_LENGTH FROM information_schema.PARTITIONS WHERE TABLE_SCHEMA = DATABASE() "
                "AND TABLE_NAME = %s ORDER BY PARTITION_ORDINAL_POSITION LIMIT 1", (BACKLOG,)).scalar())
        out["plans"] = plans(engine)
        started = time.monotonic()
        deleted = sum(t for t, _ in store.delete_expired("short", tomorrow + 1, 1000, 10_000))
        out["delete_by_key"] = {"rows": deleted, "s": round(time.monotonic() - started, 2)}
        # The same DDL on an empty partition (a day ahead), right before: what the statement costs on
        # this machine at this moment whatever the rows (metadata files written and synced).
        with engine.connect() as conn:
            for table in (EXECLOG, BACKLOG):
                started = time.monotonic()
                conn.exec_driver_sql(f"ALTER TABLE {table} DROP PARTITION {day_name(day_of(now) + 2)}")
                out.setdefault("empty_drop_ms", {})[table] = round((time.monotonic() - started) * 1000, 1)
        report = store.prune(7, now + 8 * DAY_MS, 2, 1000)
        out["dropped"] = report.dropped
        out["drop_ms"] = report.drop_ms
        with engine.connect() as conn:
            out["rows_left"] = conn.exec_driver_sql(f"SELECT COUNT(*) FROM {BACKLOG}").scalar()
    finally:
        engine.dispose()
        with server.begin() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{name}`")
        server.dispose()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
