"""bench.fill makes the large tables of the keys, bulk and console scenarios by INSERT ... SELECT:
every row once, copied a seed at a time, with the ids, keys and due times the scenarios look up."""
from __future__ import annotations

import pytest

from bench import fill
from delayq import db as dbm, config
from delayq.testing.cluster import fresh_database

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

NOW = 1_900_000_000_000


def test_rows_are_made_a_seed_at_a_time_each_once():
    with fresh_database(4) as database:
        engine = dbm.make_engine(config.load({"DELAYQ_MYSQL_URL": database.url}).mysql)
        try:
            # A seed of 256 rows copied four times, then the rest of a fifth copy.
            columns = fill.TASK_COLUMNS.split(", ")
            assert fill.fill(engine, "job_delay_task", ", ".join(columns), _values(), 1100, seed_max=256)[0] == 1100
            with engine.connect() as conn:
                rows = conn.exec_driver_sql("SELECT COUNT(*), COUNT(DISTINCT task_key), MIN(task_id), MAX(task_id) "
                                            "FROM job_delay_task").one()
            assert tuple(rows) == (1100, 1100, "t0000000000", "t0000001099")

            n, _ = fill.pending(engine, "big", 300, 4, NOW, 300_000, prefix="p", now_ms=NOW)
            a, _ = fill.archived(engine, "big", 300, 4, NOW - 300_000, 300_000, prefix="d", now_ms=NOW)
            assert (n, a) == (300, 300)
            with engine.connect() as conn:
                live = conn.exec_driver_sql("SELECT status, due_ms, task_key, tags FROM job_delay_task "
                                            "WHERE task_id = 'p0000000007'").one()
                ended = conn.exec_driver_sql("SELECT status, finished_ms, task_key FROM job_delay_task_backlog "
                                             "WHERE task_id = 'd0000000010'").one()
            assert tuple(live) == (0, NOW + 7 * 1000, fill.key_of("k", 7).encode(), b"bench")
            assert tuple(ended) == (4, NOW - 300_000 + 10 * 1000, fill.key_of("a", 10).encode())
        finally:
            engine.dispose()


def _values() -> str:
    return ("CONCAT('t', LPAD($n, 10, '0')), 'seeded', MOD($n, 4), $n, 0, 0, X'00', X'00', 3, 0, 0, 0, "
            "CONCAT('k', $n), NULL")
