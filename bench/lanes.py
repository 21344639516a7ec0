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
import uuid

from bench import fill
from delayq import config, db as dbm, schema
from delayq.bulk import Action, Spec
from delayq.lifecycle import Status
from delayq.store.bulkjobs import BulkJobs
from delayq.store.maintenance import TaskFilter
from delayq.testing.cluster import now_ms
from delayq.testing.lanes import run_lanes
from delayq.testing.services import MYSQL_SERVER

HOUR = 3_600_000


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
        jobs = BulkJobs(engine, lanes=lanes)
        jobs.create(Spec(Action.CANCEL, TaskFilter(topic="bench", status=Status.DELAY, tag="cancel-me"), "bench",
                         100_000), "bench", now)
        job = jobs.take("bench", now, HOUR)
        assert job is not None
        began = time.monotonic()
        run_lanes(engine, job, "bench", 500, now_ms, HOUR)
        elapsed = time.monotonic() - began
        done = jobs.get(job.job_id)
        assert done is not None and done.progress.changed == tasks, done
        return tasks / elapsed
    finally:
        engine.dispose()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=100_000)
    p.add_argument("--lanes", type=int, nargs="+", default=[1, 2])
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args()
    name = f"delayq_bench_lanes_{uuid.uuid4().hex[:8]}"
    server = fill.long_engine(MYSQL_SERVER)
    schema.create_database(server, name)
    url = f"{MYSQL_SERVER}/{name}"
    try:
        engine = dbm.make_engine(config.load({"DELAYQ_MYSQL_URL": url}).mysql)
        schema.migrate(engine)
        schema.init_cluster(engine, 64)
        engine.dispose()
        rates: dict[int, list[float]] = {n: [] for n in a.lanes}
        for _ in range(a.rounds):
            for n in a.lanes:
                rates[n].append(round(cancel(url, a.tasks, n)))
        best = {n: max(r) for n, r in rates.items()}
        print(json.dumps({"tasks": a.tasks, "tasks_per_s": rates,
                          "ratio_to_one_lane": {n: round(b / best[min(best)], 2) for n, b in best.items()}}))
    finally:
        with server.begin() as conn:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{name}`")
        server.dispose()


if __name__ == "__main__":
    main()
