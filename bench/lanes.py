"""What a bulk job's lanes buy MySQL: `python -m bench.lanes --tasks 100000 --lanes 1 2 --rounds 2`.

In a database of its own (dropped after), with no node and no other load, it fills `tasks` DELAY
tasks of one topic, keyed and tagged `cancel-me` (bench.fill.pending, as the bulk scenario fills
them), then cancels them by that tag with a bulk job of each lane count in turn, the lanes'
batches (500 tasks; delayq.testing.lanes) on threads of their own, as a node's runner runs them:
the database's side of a bulk cancel alone. Rounds alternate the lane counts, so that the host's
drift falls on each alike. Prints one JSON line: tasks/s per lane count and round, and each
count's best as a ratio to one lane's.
"""
from __future__ import annotations

import argparse
import json
import time
from typing import Callable

from sqlalchemy import Engine

from bench import fill
from delayq import config, db as dbm
from delayq.bulk import Action, Spec
from delayq.lifecycle import Status
from delayq.store.bulkjobs import BulkJobs
from delayq.store.maintenance import TaskFilter
from delayq.testing.cluster import now_ms
from delayq.testing.lanes import run_lanes

HOUR = 3_600_000


def run_job(engine: Engine, spec: Spec, lanes: int, tasks: int, made: Callable[[str], None] | None = None) -> float:
    """Tasks/s of a bulk job of spec, which changes `tasks` tasks, run to its end in `lanes` lanes
    by the store itself (delayq.testing.lanes); made(job id), if given, runs between the job's
    creation and its start."""
    now = now_ms()
    jobs = BulkJobs(engine, lanes=lanes)
    created = jobs.create(spec, "bench", now)
    if made is not None:
        made(created.job_id)
    job = jobs.take("bench", now, HOUR)
    assert job is not None and job.progress.total == tasks, job
    began = time.monotonic()
    run_lanes(engine, job, "bench", 500, now_ms, HOUR)
    elapsed = time.monotonic() - began
    done = jobs.get(job.job_id)
    assert done is not None and done.progress.changed == tasks, done
    return tasks / elapsed


def cancel(url: str, tasks: int, lanes: int) -> float:
    """Tasks/s of a bulk cancel of `tasks` fresh tasks in `lanes` lanes."""
    engine = dbm.make_engine(config.load({"DELAYQ_MYSQL_URL": url}).mysql)
    try:
        with engine.begin() as conn:
            conn.exec_driver_sql("DELETE FROM job_delay_task")
        now = now_ms()
        filler = fill.long_engine(url)
        try:
            fill.pending(filler, "bench", tasks, 64, now + HOUR, tasks, prefix=f"c{now:x}", tags="cancel-me",
                         now_ms=now)
        finally:
            filler.dispose()
        spec = Spec(Action.CANCEL, TaskFilter(topic="bench", status=Status.DELAY, tag="cancel-me"), "bench", 100_000)
        return run_job(engine, spec, lanes, tasks)
    finally:
        engine.dispose()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=100_000)
    p.add_argument("--lanes", type=int, nargs="+", default=[1, 2])
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args()
    with fill.scratch_database("delayq_bench_lanes_") as url:
        rates: dict[int, list[float]] = {n: [] for n in a.lanes}
        for _ in range(a.rounds):
            for n in a.lanes:
                rates[n].append(round(cancel(url, a.tasks, n)))
        best = {n: max(r) for n, r in rates.items()}
        print(json.dumps({"tasks": a.tasks, "tasks_per_s": rates,
                          "ratio_to_one_lane": {n: round(b / best[min(best)], 2) for n, b in best.items()}}))


if __name__ == "__main__":
    main()
