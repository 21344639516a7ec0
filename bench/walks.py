"""What a bulk job by key prefix reads: `python -m bench.walks --others 3000000 --tasks 30000 --rounds 2`.

In a database of its own (dropped after), with no node and no other load, one topic holds
`others` DELAY tasks (bench.fill.pending) and `tasks` more whose keys start `acct-7/`, each placed
by its task id among the others, evenly, as tasks submitted over the same days are. A bulk job
reschedules the prefix's tasks by a second, in two lanes (delayq.testing.lanes, as a node's runner
runs them), walking by key, as a job with a key prefix does, or by task id, as a job an earlier
version started does (its lanes' cursors set to "" on its row). Rounds alternate the two, so that
the host's drift falls on each alike. Prints one JSON line: tasks/s per walk and round, and the key
walk's best as a ratio to the task-id walk's.
"""
from __future__ import annotations

import argparse
import json

from bench import fill
from bench.lanes import run_job
from delayq import config, db as dbm
from delayq.bulk import Action, Spec
from delayq.lifecycle import Status
from delayq.store.maintenance import TaskFilter
from delayq.testing.cluster import now_ms

HOUR = 3_600_000
PREFIX = b"acct-7/"


def make(url: str, others: int, tasks: int) -> None:
    now = now_ms()
    filler = fill.long_engine(url)
    try:
        fill.pending(filler, "bench", others, 64, now + HOUR, others, prefix="pk", now_ms=now)
        step = max(1, others // tasks)
        with filler.begin() as conn:        # pk<n> then pk<n>s: each right after one of the others
            conn.exec_driver_sql(
                f"INSERT INTO job_delay_task ({fill.TASK_COLUMNS}) SELECT CONCAT('pk', LPAD(n * {step}, 10, '0'), 's'), "
                f"'bench', MOD(n, 64), {now + HOUR} + n, 0, 0, X'00', X'{fill.spec_hash('bench')}', 3, 0, {now}, {now}, "
                f"CONCAT('{PREFIX.decode()}', LPAD(n, 8, '0')), 'bench' FROM bench_seed WHERE n < {tasks}")
            conn.exec_driver_sql("ANALYZE TABLE job_delay_task").all()
    finally:
        filler.dispose()


def reschedule(url: str, tasks: int, by_key: bool) -> float:
    """Tasks/s of a bulk reschedule of the prefix's tasks, walking by key or by task id."""
    engine = dbm.make_engine(config.load({"DELAYQ_MYSQL_URL": url}).mysql)

    def by_task_id(job_id: str) -> None:      # as a job of an earlier version walks
        with engine.begin() as conn:
            conn.exec_driver_sql("UPDATE job_bulk SET lane_cursors = '[\"\", \"\"]', cursor_id = '' "
                                 "WHERE job_id = %s", (job_id,))
    try:
        spec = Spec(Action.RESCHEDULE, TaskFilter(topic="bench", status=Status.DELAY, key_prefix=PREFIX), "bench",
                    100_000, shift_ms=1000)
        return run_job(engine, spec, 2, tasks, None if by_key else by_task_id)
    finally:
        engine.dispose()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--others", type=int, default=3_000_000)
    p.add_argument("--tasks", type=int, default=30_000)
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args()
    with fill.scratch_database("delayq_bench_walks_") as url:
        make(url, a.others, a.tasks)
        rates: dict[str, list[float]] = {"by_task_id": [], "by_key": []}
        for _ in range(a.rounds):
            for walk in rates:
                rates[walk].append(round(reschedule(url, a.tasks, walk == "by_key")))
        print(json.dumps({"others": a.others, "tasks": a.tasks, "tasks_per_s": rates,
                          "by_key_vs_by_task_id": round(max(rates["by_key"]) / max(rates["by_task_id"]), 2)}))


if __name__ == "__main__":
    main()
