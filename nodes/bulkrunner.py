"""BulkRunner: runs bulk jobs (delayq.bulk) on this node, one at a time, on its thread `bulk-jobs`.

Any node may run any job. The runner takes a RUNNING job whose lease has lapsed — a new one, or
one whose node died or stopped — and runs its lanes side by side, each on a thread of its own
(`bulk-jobs-lane-K`) that the runner starts and joins: a lane runs its batches (delayq.store.bulkbatch)
one after another, and the lanes share the job's ops/s (delayq.bulk.Pacer). Each batch renews the
lease, which is why a lane's batch is never more than its share of a second of the job's rate. A
job stopped by an operator, or taken over by another node while this one was paused, is dropped
at its next batch, which changes nothing. Stopping the node hands its job back (the lease
released), so another node goes on with it at once.

After each batch, memory follows the front's rule (delayq.nodes.front.placing): a cancelled or
moved task is forgotten here, a moved or redriven one is offered at its new time — to this
node's memory or, through a hint, to its shard's owner. Other nodes' memory needs nothing: a
claim takes only a row still DELAY at the due time its entry holds (invariant 1).

States: idle (waiting for a job, woken at once by a job created on this node) -> running one
(its lanes) -> idle. Owned by delayq.nodes.main.NodeRuntime, which starts and stops it.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable

from delayq import errors
from delayq.bulk import Action, Pacer, Progress, State, batch_size
from delayq.clock import Clock
from delayq.nodes.front.placing import Placing
from delayq.nodes.memory.delayqueue import Entry
from delayq.nodes.metrics import Metrics
from delayq.nodes.threads import NodeThread
from delayq.store.bulkbatch import READ_S, Batch, BatchResult
from delayq.store.bulkjobs import BulkJobs, Job

log = logging.getLogger(__name__)

RETRY_WAIT_S = 1.0        # seconds after MySQL failed a batch or a look for a job


@dataclass(frozen=True)
class RunnerSettings:
    node_id: str
    batch: int              # tasks per batch at most (DELAYQ_BULK_BATCH)
    lease_ms: int           # how long a job stays this node's without a batch (DELAYQ_BULK_LEASE_MS)

    @property
    def poll_s(self) -> float:
        """How often an idle node looks for a job to take: a lapsed lease is taken within this."""
        return min(1.0, self.lease_ms / 4000)


Batches = Callable[[Batch, str, int, int], BatchResult]      # (batch, node, now_ms, lease_ms)


class BulkRunner(NodeThread):
    name = "bulk-jobs"

    def __init__(self, jobs: BulkJobs, batches: Batches, placing: Placing, clock: Clock, metrics: Metrics,
                 settings: RunnerSettings, monotonic: Callable[[], float] = time.monotonic):
        super().__init__()
        self._jobs, self._batches, self._placing, self._clock = jobs, batches, placing, clock
        self._metrics = metrics
        self._s, self._monotonic = settings, monotonic
        self.running: str | None = None      # the job id this node runs now
        self._now: _JobRun | None = None     # its lanes' shared state, for a stop to end them

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                job = self._jobs.take(self._s.node_id, self._clock.now_ms(), self._s.lease_ms)
            except errors.Unavailable as e:
                log.warning("could not look for bulk jobs: %s", e)
                self._stop.wait(RETRY_WAIT_S)
                continue
            if job is None:
                self._wake.wait(self._s.poll_s)
                self._wake.clear()
                continue
            self.running = job.job_id
            try:
                self._work(job)
            finally:
                self.running = None

    def _work(self, job: Job) -> None:
        p = job.progress
        log.info("bulk job %s (%s of %s, %d of %d changed, %d lanes) runs here", job.job_id, job.spec.action.value,
                 job.spec.filter.topic, p.changed, p.total, len(p.cursors))
        run = self._now = _JobRun(job, Pacer(job.spec.rate, self._monotonic()))
        if self._stop.is_set():         # a stop that came before _now was set did not end this run
            run.end()
        lanes: list[threading.Thread] = []
        try:
            for k in range(len(p.cursors)):
                lanes.append(threading.Thread(target=self._lane, args=(run, k), name=f"bulk-jobs-lane-{k}",
                                              daemon=True))
                lanes[-1].start()
        except BaseException:       # a lane that could not start: the others end with the run
            run.end()
            raise
        finally:
            for t in lanes:
                t.join()    # each ends within a batch of the job's end or of the runner's stop
            self._now = None
        try:
            if run.error is not None:
                self._jobs.fail(job.job_id, self._s.node_id, run.error, self._clock.now_ms())
            elif not run.over and self._stop.is_set():      # another node goes on with it at once
                self._jobs.release(job.job_id, self._s.node_id)
            elif not run.over:
                # Every lane past its snapshot, yet the job not DONE: no batch commits that way, but
                # were a row left so, handing it back would have it taken again at once, in a loop.
                log.warning("bulk job %s: every lane is past its last task but the job did not end; "
                            "it is left to its lease", job.job_id)
        except errors.Unavailable as e:
            log.warning("bulk job %s: could not end or hand it back (%s); its lease lapses", job.job_id, e)

    def _interrupt(self) -> None:
        run = self._now
        if run is not None:
            run.end()

    def _lane(self, run: _JobRun, lane: int) -> None:
        try:
            self._batches_of(run, lane)
        except Exception as e:          # a fault of delayq's: the job ends FAILED and says so
            log.exception("bulk job %s failed", run.job.job_id)
            run.end(error=f"{type(e).__name__}: {e}")

    def _batches_of(self, run: _JobRun, lane: int) -> None:
        """One lane's batches, until it is done, the job ends, or the runner stops."""
        job, cursor = run.job, run.job.progress.cursors[lane]
        stopped_at: str | None = None       # the cursor where the last read was stopped at its limit
        while not run.ended.is_set():
            size = batch_size(run.progress(lane, cursor), lane, job.spec.rate, self._s.batch)
            if size == 0:
                return
            pause = run.pace(size, self._monotonic())
            if (pause and run.ended.wait(pause)) or run.ended.is_set():
                return
            try:
                result = self._batches(Batch(job, lane, cursor, size), self._s.node_id, self._clock.now_ms(),
                                       self._s.lease_ms)
            except errors.StatementStopped as e:     # the batch's read of its next ids
                if stopped_at == cursor:       # again at the same place: reading again would take as long
                    log.error("bulk job %s: %s, twice", job.job_id, e)
                    run.end(error=f"its next tasks could not be read within {READ_S:g} s: so few of the table's "
                                  "tasks match the filter (a rare tag among millions) that a walk by task id "
                                  "finds too few at a time")
                    return
                stopped_at = cursor         # once may be a stall (a lock, a busy server): once more
                log.warning("bulk job %s: %s; trying again", job.job_id, e)
                run.ended.wait(RETRY_WAIT_S)
                continue
            except errors.Unavailable as e:
                log.warning("bulk job %s: a batch failed (%s); trying again", job.job_id, e)
                run.ended.wait(RETRY_WAIT_S)
                continue
            if not result.ours:
                if not run.over:
                    log.info("bulk job %s was stopped or taken over: no longer runs here", job.job_id)
                run.end(over=True)
                return
            self._follow(job, result)
            cursor = result.cursor
            run.count(len(result.changed))
            if result.state is State.DONE:
                log.info("bulk job %s done: %d of %d changed", job.job_id, run.changed, job.progress.total)
                run.end(over=True)
                return

    def _follow(self, job: Job, result: BatchResult) -> None:
        """Memory and the metrics after a batch's commit."""
        topic, action = job.spec.filter.topic or "", job.spec.action
        if action is not Action.REDRIVE:
            for task_id in result.changed:
                self._placing.forget(task_id)
        if result.changed:
            self._metrics.bulk_tasks.labels(action.value).inc(len(result.changed))
            if action is Action.CANCEL:
                self._metrics.cancelled.labels(topic).inc(len(result.changed))
        self._placing.offer(Entry(m.task_id, m.shard_id, m.due_ms, topic=topic) for m in result.moved)


class _JobRun:
    """What the lanes of one job share while it runs here: its pace, its count, how it ended."""

    def __init__(self, job: Job, pacer: Pacer):
        self.job, self._pacer = job, pacer
        self.changed = job.progress.changed
        self.ended = threading.Event()      # every lane leaves: the job is over here, or the runner stops
        self.over = False                   # done, stopped or taken over: nothing to hand back
        self.error: str | None = None       # a lane's fault: the job ends FAILED with it
        self._lock = threading.Lock()

    def end(self, over: bool = False, error: str | None = None) -> None:
        with self._lock:
            self.over = self.over or over or error is not None
            if error is not None and self.error is None:
                self.error = error
        self.ended.set()

    def pace(self, n: int, now: float) -> float:
        with self._lock:
            return self._pacer.wait(n, now)

    def count(self, n: int) -> None:
        with self._lock:
            self.changed += n

    def progress(self, lane: int, cursor: str) -> Progress:
        """The job's progress as this lane sees it: its own cursor, the count of all lanes."""
        p = self.job.progress
        cursors = p.cursors[:lane] + (cursor,) + p.cursors[lane + 1:]
        return Progress(p.total, self.changed, p.skipped, cursors, p.upto)
