"""BulkCalls: the DelayScheduler calls of bulk jobs — bulkCount (the dry run), bulkStart, bulkGet,
bulkList, bulkStop — over delayq.store.bulkjobs.BulkJobs. The jobs run on whichever node takes
them (delayq.nodes.bulkrunner); a job started here wakes this node's runner.

Permissions (docs/security.md): `admin` may do all; a client holding `cancel` on the topic may
count, start and stop a cancel or a reschedule of that topic's tasks, as it may cancel and
reschedule them one by one; a redrive is admin's only, as the single redrive is. bulkGet and
bulkList show a job to `admin` and to a client holding `read` on its topic.

Runs on the CallPool's threads; holds no state of its own.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator

from delayq import bulk, errors
from delayq.access.grants import Client, Permission
from delayq.bulk import Action, State
from delayq.client.gen.delayq_thrift import ttypes
from delayq.clock import Clock
from delayq.nodes.front.access import Access
from delayq.nodes.front.caller import current
from delayq.nodes.front.errors import CallAnswers, declared
from delayq.nodes.front.keycalls import task_filter
from delayq.store.bulkjobs import COUNT_S, BulkJobs, Job
from delayq.store.maintenance import TaskFilter

_ACTIONS = {ttypes.BulkAction.CANCEL: Action.CANCEL, ttypes.BulkAction.RESCHEDULE: Action.RESCHEDULE,
            ttypes.BulkAction.REDRIVE: Action.REDRIVE}
_TO_IDL = {v: k for k, v in _ACTIONS.items()}
_STATES = {State.RUNNING: ttypes.BulkState.RUNNING, State.DONE: ttypes.BulkState.DONE,
           State.STOPPED: ttypes.BulkState.STOPPED, State.FAILED: ttypes.BulkState.FAILED}
MAX_JOB_ID = 32
SCAN_PAGES = 10      # pages of the newest jobs a non-admin's bulkList looks through at most


@contextlib.contextmanager
def _counted() -> Iterator[None]:
    """A count the server stopped at its limit is the filter's fault: too many tasks to count."""
    try:
        yield
    except errors.StatementStopped:
        raise errors.InvalidRequest("filter", f"matches more tasks than MySQL counts within {COUNT_S:g} s: narrow it "
                                    "with a due range (a job for each part) or a key prefix; a tag is checked on "
                                    "each task, so it does not make the count shorter") from None


class BulkCalls:
    def __init__(self, jobs: BulkJobs, access: Access, answers: CallAnswers, clock: Clock, *, default_rate: int,
                 max_horizon_ms: int, started: Callable[[], None] = lambda: None):
        self._jobs, self._access, self.answers, self._clock = jobs, access, answers, clock
        self._default_rate, self._max_horizon_ms = default_rate, max_horizon_ms
        self._started = started         # wakes this node's runner

    # Each call learns who calls first: a caller without an identity is told that, whatever it sent.

    @declared
    def bulkCount(self, request: ttypes.BulkRequest) -> int:
        spec = self._spec(self._access.client(current()), request)
        with _counted():
            return self._jobs.count(spec)[0]

    @declared
    def bulkStart(self, request: ttypes.BulkRequest) -> ttypes.BulkJob:
        client = self._access.client(current())
        spec = self._spec(client, request)
        with _counted():
            job = self._jobs.create(spec, client.name, self._clock.now_ms())
        self._started()
        return as_thrift(job)

    @declared
    def bulkGet(self, jobId: str) -> ttypes.BulkJob:
        return as_thrift(self._visible(self._access.client(current()), jobId))

    @declared
    def bulkList(self, limit: int | None) -> list[ttypes.BulkJob]:
        client = self._access.client(current())
        if limit is not None and not 1 <= limit <= bulk.MAX_JOBS_LISTED:
            raise errors.InvalidRequest("limit", f"must be between 1 and {bulk.MAX_JOBS_LISTED}, got {limit}")
        wanted = limit or bulk.MAX_JOBS_LISTED
        if client.holds(Permission.ADMIN):
            return [as_thrift(j) for j in self._jobs.list(wanted)]
        # Pages of the newest jobs, keeping those of topics the client reads, until enough: the
        # newest jobs may all be of other topics. At most SCAN_PAGES pages, so a call stays bounded.
        shown: list[Job] = []
        before = None
        for _ in range(SCAN_PAGES):
            page = self._jobs.list(bulk.MAX_JOBS_LISTED, before=before)
            shown += [j for j in page if _reads(client, j.spec.filter.topic or "")]
            if len(shown) >= wanted or len(page) < bulk.MAX_JOBS_LISTED:
                break
            before = page[-1].job_id
        return [as_thrift(j) for j in shown[:wanted]]

    @declared
    def bulkStop(self, jobId: str) -> ttypes.BulkJob:
        client = self._access.client(current())
        job = self._visible(client, jobId)
        self._may_change(client, job.spec.action, job.spec.filter.topic or "")
        stopped = self._jobs.stop(job.job_id, self._clock.now_ms())
        assert stopped is not None          # a job row is never deleted
        return as_thrift(stopped)

    def _spec(self, client: Client, r: ttypes.BulkRequest | None) -> bulk.Spec:
        if r is None:
            raise errors.InvalidRequest("request", "is required")
        action = _ACTIONS.get(r.action)
        if action is None:
            raise errors.InvalidRequest("action", f"unknown bulk action {r.action}")
        try:
            f = task_filter(r.filter)
        except errors.InvalidTask as e:
            raise errors.InvalidRequest(f"filter.{e.field}", e.reason) from None
        self._may_change(client, action, f.topic or "")
        return bulk.check(action, f, r.reason, r.opsPerSecond, self._default_rate, shift_ms=r.shiftMs,
                          due_at_ms=r.dueAtMs, max_tasks=r.maxTasks, max_horizon_ms=self._max_horizon_ms,
                          now_ms=self._clock.now_ms())

    def _may_change(self, client: Client, action: Action, topic: str) -> None:
        if client.holds(Permission.ADMIN):
            return
        if action is Action.REDRIVE:
            self._access.require(current(), Permission.ADMIN)
        self._access.topics(self._access.require(current(), Permission.CANCEL), Permission.CANCEL, [topic])

    def _visible(self, client: Client, job_id: str | None) -> Job:
        if not job_id or len(job_id) > MAX_JOB_ID:
            raise errors.InvalidRequest("jobId", f"is required (at most {MAX_JOB_ID} characters)")
        job = self._jobs.get(job_id)
        # A job of a topic the client may not read is answered as no job, like a hidden task.
        if job is None or not _reads(client, job.spec.filter.topic or ""):
            raise errors.InvalidRequest("jobId", f"no bulk job {job_id!r}")
        return job


def _reads(client: Client, topic: str) -> bool:
    return client.holds(Permission.ADMIN) or client.allows(Permission.READ, topic)


def as_thrift(job: Job) -> ttypes.BulkJob:
    f, p = job.spec.filter, job.progress
    return ttypes.BulkJob(
        jobId=job.job_id, action=_TO_IDL[job.spec.action], filter=_filter(f), reason=job.spec.reason,
        state=_STATES[job.state], total=p.total, changed=p.changed, skipped=p.skipped,
        opsPerSecond=job.spec.rate, createdBy=job.actor, createdAtMs=job.created_ms, finishedAtMs=job.finished_ms,
        runningOn=job.lease_owner if job.state is State.RUNNING else None, error=job.error,
        shiftMs=job.spec.shift_ms, dueAtMs=job.spec.due_at_ms)


def _filter(f: TaskFilter) -> ttypes.TaskFilter:
    return ttypes.TaskFilter(topic=f.topic or "", status=None if f.status is None else int(f.status),
                             keyPrefix=None if f.key_prefix is None else f.key_prefix.decode(errors="replace"),
                             tag=f.tag, dueFromMs=f.since_ms, dueBeforeMs=f.until_ms)
