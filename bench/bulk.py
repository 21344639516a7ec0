"""The bulk scenario: a bulk cancel by tag under the steady load, on one node.

`tasks` DELAY tasks of a topic of their own carry the tag `cancel-me` (made by INSERT ... SELECT,
bench.fill; due from a day on, so none is in the node's memory). The steady load runs on another
topic; `lead_s` into it, a bulk job cancels every task of the tag (bulkStart, at `ops` tasks/s, the
highest a job may ask for) and is followed with bulkGet until it is done. Figures: the tasks it
cancelled and how fast (from the job's creation to its end, as the job records them), and the
steady load's lateness p99 of the tasks due while it ran, beside the whole load's figures.
Counting tasks by a tag reads each of them (about 1.3M a second on the 2-core machine): past about
3M tasks (`--scale`, `--set bulk.tasks=`), bulkStart refuses the filter at its 3 s limit.
"""
from __future__ import annotations

import time
import uuid

from bench import fill
from bench.machine import bench_cluster
from bench.measure import Run, Topic, load_figures, pct, round1
from delayq.client import BulkAction, BulkRequest, BulkState, DelayqClient, TaskFilter, TaskStatus
from delayq.lifecycle import Status
from delayq.store.backlog import move_locked
from delayq.testing.cluster import now_ms

DAY_MS = 86_400_000
TAG = "cancel-me"


def bulk(run: Run, p: dict) -> list[dict]:
    out = []
    with bench_cluster(run.logs) as cl:
        node = cl.add_node(start=False)
        victims = f"bench.bulk.{uuid.uuid4().hex[:8]}"
        raw = f"bench.raw.{uuid.uuid4().hex[:8]}"
        with fill.filling(cl) as engine:
            n, secs = fill.pending(engine, victims, p["tasks"], cl.shards, now_ms() + DAY_MS, 7 * DAY_MS,
                                   prefix="bk", key_prefix="b", tags=f"bench,{TAG}", now_ms=now_ms())
            fill.pending(engine, raw, p["raw_rows"], cl.shards, now_ms() + DAY_MS, 7 * DAY_MS, prefix="rw",
                         key_prefix="r", now_ms=now_ms())
            moved, move_s = move_rows(engine, raw, p["raw_batch"])
        out.append(run.fig("bulk", "mysql_move_rows", moved / move_s, "rows/s",
                           note=f"the least a cancel does, in plain SQL with nothing else running: {moved:,} rows "
                                f"of a topic read by primary key, copied to the backlog and deleted, "
                                f"{p['raw_batch']} per transaction, one connection"))
        limit = moved / move_s
        node.start()
        cl.register(victims)
        out.append(run.fig("bulk", "tagged", n, "tasks",
                           note=f"tagged {TAG}, made in {secs:.0f} s by INSERT ... SELECT"))
        with Topic(run, cl, "bulk") as topic:
            def during(start_ms: int) -> dict:
                time.sleep(max(0.0, (start_ms + p["lead_s"] * 1000 - now_ms()) / 1000))   # the load settles first
                return _cancel_all(node.endpoint, victims, p)
            figs, stats = load_figures(run, "bulk", p, cl, topic, [node.endpoint], during=during, targets=False)
        out += figs
        job = stats["extra"]["job"]
        took_s = ((job.finishedAtMs or now_ms()) - job.createdAtMs) / 1000
        state = BulkState._VALUES_TO_NAMES.get(job.state, str(job.state))
        out.append(run.fig("bulk", "cancelled", job.changed, "tasks", f"== {n}",
                           note=f"job {state}, {job.skipped:,} skipped" + (f", error {job.error}" if job.error else "")))
        out.append(run.fig("bulk", "cancel_rate", job.changed / max(took_s, 0.001), "tasks/s", ">= 20000", limit=limit,
                           note=f"{job.changed:,} in {took_s:.1f} s (the job's creation to its end), asked for "
                                f"{job.opsPerSecond:,}/s"))
        d, tasks = stats["delivery"], stats["tasks"]
        lo, hi = job.createdAtMs, job.finishedAtMs or now_ms()
        during_job = sorted(d.first[t].recv_us / 1000 - due for t, due in tasks.items() if lo <= due <= hi and t in d.first)
        out.append(run.fig("bulk", "lateness_p99_during_cancel", pct(during_job, 0.99), "ms", "<= 10",
                           note=f"the steady load's {len(during_job):,} tasks due while the job ran "
                                f"({p['rate']}/s); p50 {round1(pct(during_job, 0.5))} ms; the whole load's p99 "
                                f"{round1(stats['p99'])} ms"))
    return out


def move_rows(engine, topic: str, batch: int) -> tuple[int, float]:
    """Every task of the topic moved to the backlog as CANCELLED, `batch` per transaction: the
    ids after a cursor by primary key, then the node's own two statements for them
    (delayq.store.backlog.move_locked). (rows, seconds)"""
    cursor, moved = "", 0
    started = time.monotonic()
    while True:
        with engine.begin() as conn:
            ids = [r[0] for r in conn.exec_driver_sql(
                f"SELECT task_id FROM job_delay_task WHERE topic = %s AND task_id > %s AND status = {int(Status.DELAY)} "
                "ORDER BY task_id LIMIT %s", (topic, cursor, batch))]
            if not ids:
                break
            move_locked(conn, ids, Status.CANCELLED, now_ms(), "cancelled")
        moved += len(ids)
        cursor = ids[-1]
    return moved, time.monotonic() - started


def _cancel_all(endpoint: str, topic: str, p: dict) -> dict:
    """Start the bulk cancel of the tag and follow it to its end (or p["job_timeout_s"])."""
    request = BulkRequest(action=BulkAction.CANCEL, filter=TaskFilter(topic=topic, tag=TAG, status=TaskStatus.DELAY),
                          reason="benchmark: a bulk cancel under the steady load", opsPerSecond=p["ops"])
    with DelayqClient([endpoint], timeout_s=30) as c:
        job = c.bulkStart(request)
        deadline = time.monotonic() + p["job_timeout_s"]
        while job.state == BulkState.RUNNING and time.monotonic() < deadline:
            time.sleep(0.2)       # a progress poll, as the CLI's bar does: not synchronisation
            job = c.bulkGet(job.jobId)
        if job.state == BulkState.RUNNING:
            c.bulkStop(job.jobId)
    return {"job": job}
