"""A bulk job's lanes run to the end from a test or a bench, with no node: each lane on a thread of
its own, batch after batch (delayq.store.bulkbatch.run_batch), as a node's runner runs them."""
from __future__ import annotations

import threading
from typing import Callable

from sqlalchemy import Engine

from delayq.bulk import State, lane_done
from delayq.store.bulkbatch import Batch, run_batch
from delayq.store.bulkjobs import Job

HORIZON_MS = 30 * 24 * 3600 * 1000      # DELAYQ_MAX_HORIZON_MS's default


def run_lanes(engine: Engine, job: Job, node: str, size: int, now: Callable[[], int], lease_ms: int,
              max_batches: int = 1_000_000, timeout_s: float = 600, max_horizon_ms: int = HORIZON_MS) -> None:
    """Runs every lane of job (taken by `node`) until the job is DONE, the lane is past the job's
    last task, or the job is no longer the node's; at most max_batches per lane. Raises what a
    lane raised, or TimeoutError when a lane is still running after timeout_s."""
    failures: list[BaseException] = []

    def lane(k: int) -> None:
        cursor = job.progress.cursors[k]
        try:
            for _ in range(max_batches):
                if lane_done(cursor, job.progress.upto):
                    return
                r = run_batch(engine, Batch(job, k, cursor, size), node, now(), lease_ms,
                              max_horizon_ms=max_horizon_ms)
                if not r.ours or r.state is State.DONE:
                    return
                cursor = r.cursor
        except BaseException as e:      # noqa: BLE001 — handed to the caller's thread below
            failures.append(e)
    threads = [threading.Thread(target=lane, args=(k,), name=f"lane-{k}", daemon=True)
               for k in range(len(job.progress.cursors))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s)
    if any(t.is_alive() for t in threads):
        raise TimeoutError(f"a lane of job {job.job_id} still runs after {timeout_s:g} s")
    if failures:
        raise failures[0]
