"""Bulk jobs' pure parts: a request's checks (each naming its field), the batch planner, the pace on
a fake clock; the runner on fakes: it follows a job batch by batch, tells memory, drops a job it
lost, and hands its job back when it stops; and the calls' permissions on fakes."""
from __future__ import annotations

import dataclasses
import threading
import types

import pytest

from delayq import errors
from delayq.access.grants import Client, Permission
from delayq.bulk import PAST_END, WALK_BY_KEY, Action, Pacer, Progress, Spec, State, batch_size, check, first_cursor, lane_done
from delayq.client.gen.delayq_thrift import ttypes
from delayq.lifecycle import Status
from delayq.nodes import bulkrunner
from delayq.nodes.bulkrunner import BulkRunner, RunnerSettings
from delayq.nodes.front.access import Access
from delayq.nodes.front.bulkcalls import BulkCalls
from delayq.nodes.front.errors import CallAnswers
from delayq.nodes.metrics import Metrics
from delayq.store.bulkbatch import BatchResult, Moved
from delayq.store.bulkjobs import Job, cursors_of
from delayq.store.maintenance import TaskFilter
from delayq.testing.fakes import Clients, call_as

pytestmark = pytest.mark.timeout(10)

F = TaskFilter(topic="orders", tag="eu")


NOW, DAY = 1_700_000_000_000, 86_400_000


def _check(action=Action.CANCEL, f=F, reason="tenant closed", rate=None, **kw):
    return check(action, f, reason, rate, 2000, max_horizon_ms=DAY, now_ms=NOW, **kw)


def test_a_request_becomes_a_spec_acting_on_its_actions_state():
    assert _check() == Spec(Action.CANCEL, TaskFilter(topic="orders", tag="eu", status=Status.DELAY), "tenant closed",
                            2000)
    assert _check(Action.REDRIVE, rate=50).filter.status is Status.FAILED
    spec = _check(Action.RESCHEDULE, shift_ms=-3_600_000, max_tasks=10)
    assert (spec.shift_ms, spec.due_at_ms, spec.max_tasks) == (-3_600_000, None, 10)


@pytest.mark.parametrize("kw, field", [
    (dict(f=TaskFilter(tag="eu")), "filter.topic"),
    (dict(f=TaskFilter(topic="o", status=Status.FAILED)), "filter.status"),
    (dict(action=Action.REDRIVE, f=TaskFilter(topic="o", status=Status.DELAY)), "filter.status"),
    (dict(f=TaskFilter(topic="o", since_ms=5, until_ms=5)), "filter.dueBeforeMs"),
    (dict(reason=None), "reason"), (dict(reason="  "), "reason"), (dict(reason="x" * 256), "reason"),
    (dict(reason="a\nb"), "reason"), (dict(rate=0), "opsPerSecond"), (dict(rate=100_001), "opsPerSecond"),
    (dict(max_tasks=0), "maxTasks"), (dict(action=Action.RESCHEDULE), "shiftMs"),
    (dict(action=Action.RESCHEDULE, shift_ms=1, due_at_ms=5), "shiftMs"),
    (dict(action=Action.RESCHEDULE, shift_ms=0), "shiftMs"),
    (dict(action=Action.RESCHEDULE, shift_ms=86_400_001), "shiftMs"),
    (dict(action=Action.RESCHEDULE, due_at_ms=-1), "dueAtMs"),
    (dict(action=Action.RESCHEDULE, due_at_ms=NOW + DAY + 1), "dueAtMs"),        # beyond the horizon
    (dict(reason="next\x85line"), "reason"), (dict(reason="a\u2028b"), "reason"),
    (dict(shift_ms=1000), "shiftMs")])
def test_a_bad_request_names_its_field(kw, field):
    with pytest.raises(errors.InvalidRequest) as e:
        _check(**kw)
    assert e.value.field == field


def test_a_due_time_up_to_the_horizon_from_now_is_taken_and_one_past_it_refused_saying_so():
    assert _check(Action.RESCHEDULE, due_at_ms=NOW + DAY).due_at_ms == NOW + DAY
    with pytest.raises(errors.InvalidRequest) as e:
        _check(Action.RESCHEDULE, due_at_ms=NOW + DAY + 1)
    assert e.value.reason == f"is beyond the horizon of {DAY} ms from now"


def test_a_reason_too_long_is_told_so_not_that_it_is_required():
    assert _check(reason="x" * 255).reason == "x" * 255
    with pytest.raises(errors.InvalidRequest) as e:
        _check(reason="x" * 256)
    assert (e.value.field, e.value.reason) == ("reason", "is 256 characters, at most 255 allowed")
    with pytest.raises(errors.InvalidRequest) as e:
        _check(reason="a\u2029b")
    assert "U+2029" in e.value.reason


@pytest.mark.parametrize("progress, lane, rate, most, size", [
    (Progress(1000, 0, 0, ("",), "z"), 0, 2000, 500, 500),         # the batch cap
    (Progress(1000, 0, 0, ("",), "z"), 0, 40, 500, 40),            # a second of the rate
    (Progress(1000, 0, 0, ("", ""), "z"), 1, 40, 500, 20),         # a lane's share of it
    (Progress(1000, 990, 0, ("m",), "z"), 0, 2000, 500, 10),       # no more than the count shown
    (Progress(1000, 1000, 0, ("m",), "z"), 0, 2000, 500, 0),       # done: changed all it counted
    (Progress(1000, 10, 0, ("z",), "z"), 0, 2000, 500, 0),         # done: passed its snapshot's last id
    (Progress(1000, 10, 0, ("m", "z"), "z"), 0, 2000, 500, 500),   # one lane done, the other not
    (Progress(1000, 10, 0, ("m", "z"), "z"), 1, 2000, 500, 0),
    (Progress(0, 0, 0, ("",), ""), 0, 2000, 500, 0)])              # matched nothing
def test_the_batch_planner(progress, lane, rate, most, size):
    assert batch_size(progress, lane, rate, most) == size


def test_the_pace_holds_a_job_to_its_rate_on_a_fake_clock():
    pace = Pacer(100, now=0.0)
    assert pace.wait(100, 0.0) == 0.0          # a second's burst at once
    assert pace.wait(50, 0.0) == pytest.approx(0.5)
    assert pace.wait(50, 0.5) == pytest.approx(0.5)    # the debt carries over
    assert pace.wait(10, 5.0) == 0.0           # idle time refills up to one second's worth only
    assert pace.wait(100, 5.0) == pytest.approx(0.1)


def test_over_ten_simulated_seconds_the_pace_is_the_rate():
    pace, now, done = Pacer(250, now=0.0), 0.0, 0
    while now < 10.0:
        now += pace.wait(40, now)
        done += 40
    assert 250 * 10 <= done <= 250 * 11 + 40


# ---- the runner, on fakes ------------------------------------------------------------------------

def _job(action=Action.RESCHEDULE, total=25, lanes=1) -> Job:
    spec = Spec(action, TaskFilter(topic="orders", status=action.acts_on), "why", 100_000, shift_ms=1000)
    return Job("j1", spec, "admin", 0, State.RUNNING, Progress(total, 0, 0, ("",) * lanes, "t99"), "n1", 0, None,
               None)


class FakeJobs:
    def __init__(self, job: Job | None):
        self.job, self.released, self.failed = job, [], []

    def take(self, node, now_ms, lease_ms):
        job, self.job = self.job, None
        return job

    def release(self, job_id, node):
        self.released.append(job_id)

    def fail(self, job_id, node, error, now_ms):
        self.failed.append(error)


class FakeBatches:
    """Tasks t00..t24 (of shard i % lanes: lane k's are those with i % lanes = k); batches of the
    runner's size, each moving its tasks by a second; the job DONE once every lane is past t24."""
    def __init__(self, lose_after: int | None = None, block: threading.Event | None = None,
                 together: threading.Barrier | None = None):
        self.calls: list[tuple[int, str, int]] = []
        self.lose_after, self.block, self.together = lose_after, block, together
        self.passed: dict[int, bool] = {}
        self._lock = threading.Lock()

    def __call__(self, batch, node, now_ms, lease_ms):
        with self._lock:
            self.calls.append((batch.lane, batch.cursor, batch.size))
            lost = self.lose_after is not None and len(self.calls) > self.lose_after
        if self.block is not None:
            self.block.wait(5)
        if self.together is not None:
            self.together.wait()        # raises BrokenBarrierError unless every lane has a batch under way
        if lost:
            return BatchResult(ours=False)
        lanes = len(batch.job.progress.cursors)
        start = 0 if not batch.cursor else int(batch.cursor[1:]) + 1
        ids = [f"t{i:02d}" for i in range(start, 25) if i % lanes == batch.lane][:batch.size]
        with self._lock:
            self.passed[batch.lane] = len(ids) < batch.size or ids[-1] >= "t24"
            done = len(self.passed) == lanes and all(self.passed.values())
        cursor = ids[-1] if len(ids) == batch.size else "t99"      # a lane that read fewer is done: its upto
        return BatchResult(True, tuple(ids), tuple(Moved(t, 3, 1000) for t in ids), cursor,
                           State.DONE if done else State.RUNNING)


class FakePlacing:
    def __init__(self):
        self.forgot, self.offered = [], []

    def forget(self, task_id):
        self.forgot.append(task_id)

    def offer(self, entries):
        self.offered += list(entries)


class FakeClock:
    def now_ms(self):
        return 0


def _runner(jobs, batches, placing, batch=10, metrics=None):
    return BulkRunner(jobs, batches, placing, FakeClock(), metrics or Metrics(), RunnerSettings("n1", batch, 2000))


def _until(predicate, timeout=5.0):
    done = threading.Event()
    for _ in range(int(timeout / 0.01)):
        if predicate():
            return
        done.wait(0.01)
    raise AssertionError("condition not reached")


def test_the_runner_follows_a_job_from_cursor_to_cursor_and_tells_memory():
    jobs, batches, placing, metrics = FakeJobs(_job()), FakeBatches(), FakePlacing(), Metrics()
    runner = _runner(jobs, batches, placing, metrics=metrics)
    runner.start()
    try:
        _until(lambda: len(batches.calls) == 3 and runner.running is None)
    finally:
        runner.stop()
    assert batches.calls == [(0, "", 10), (0, "t09", 10), (0, "t19", 5)]     # the last one only what it may still change
    assert placing.forgot == [f"t{i:02d}" for i in range(25)]
    assert [(e.task_id, e.shard_id, e.due_ms, e.topic) for e in placing.offered] == [
        (f"t{i:02d}", 3, 1000, "orders") for i in range(25)]
    assert jobs.released == []          # done: nothing to hand back
    assert metrics.registry.get_sample_value("delayq_bulk_tasks_total", {"action": "reschedule"}) == 25


def test_a_job_of_two_lanes_runs_their_batches_side_by_side_each_task_once():
    jobs, batches, placing = FakeJobs(_job(lanes=2)), FakeBatches(together=threading.Barrier(2, timeout=5)), FakePlacing()
    runner = _runner(jobs, batches, placing, batch=5)
    runner.start()
    try:
        _until(lambda: runner.running is None and len(placing.forgot) == 25)
    finally:
        runner.stop()
    # Each lane its own share: lane 0 the even tasks, lane 1 the odd ones, each from its own cursor.
    assert [c for c in batches.calls if c[0] == 0] == [(0, "", 5), (0, "t08", 5), (0, "t18", 5)]
    assert [c for c in batches.calls if c[0] == 1] == [(1, "", 5), (1, "t09", 5), (1, "t19", 5)]
    assert sorted(placing.forgot) == [f"t{i:02d}" for i in range(25)]
    assert jobs.released == [] and jobs.failed == []


def test_a_redrive_offers_memory_its_tasks_and_forgets_none():
    jobs, batches, placing = FakeJobs(_job(Action.REDRIVE)), FakeBatches(), FakePlacing()
    runner = _runner(jobs, batches, placing)
    runner.start()
    try:
        _until(lambda: len(batches.calls) == 3)
    finally:
        runner.stop()
    assert placing.forgot == [] and len(placing.offered) == 25


def test_a_job_lost_to_a_stop_or_another_node_is_dropped_at_its_next_batch():
    jobs, batches, placing = FakeJobs(_job()), FakeBatches(lose_after=1), FakePlacing()
    runner = _runner(jobs, batches, placing)
    runner.start()
    try:
        _until(lambda: len(batches.calls) == 2 and runner.running is None)
    finally:
        runner.stop()
    assert len(placing.forgot) == 10 and jobs.released == []


def test_a_stopping_runner_hands_its_job_back():
    block = threading.Event()
    jobs, batches, placing = FakeJobs(_job()), FakeBatches(block=block), FakePlacing()
    runner = _runner(jobs, batches, placing)
    runner.start()
    _until(lambda: len(batches.calls) == 1)
    stopper = threading.Thread(target=runner.stop)
    stopper.start()
    _until(runner._stop.is_set)
    block.set()             # the batch under way ends; the runner stops before the next one
    stopper.join(5)
    assert len(batches.calls) == 1 and jobs.released == ["j1"]


def _failed_with(batches) -> list[str]:
    """Runs a job on these batches until it is marked FAILED; what it was marked with."""
    jobs = FakeJobs(_job())
    runner = _runner(jobs, batches, FakePlacing())
    runner.start()
    try:
        _until(lambda: jobs.failed)
    finally:
        runner.stop()
    return jobs.failed


def test_a_fault_ends_the_job_failed():
    def broken(*args):
        raise ValueError("bad row")
    assert _failed_with(broken) == ["ValueError: bad row"]


def _stopped_reads(times: int):
    """Batches whose read is stopped at its limit `times` times in a row, then FakeBatches'."""
    calls, batches = [], FakeBatches()

    def run(batch, *args):
        calls.append(batch.cursor)
        if len(calls) <= times:
            raise errors.StatementStopped("a statement was stopped after 3 s", 1969)
        return batches(batch, *args)
    return run, calls


def test_a_read_stopped_twice_at_the_same_place_ends_the_job_failed_saying_why(monkeypatch):
    monkeypatch.setattr(bulkrunner, "RETRY_WAIT_S", 0.01)
    stopped, calls = _stopped_reads(2)
    assert _failed_with(stopped) == [
        "its next tasks could not be read within 3 s: so few of the table's tasks match the filter (a rare tag "
        "among millions) that a walk by task id finds too few at a time"]
    assert calls == ["", ""]


def test_a_read_stopped_once_is_tried_again_and_the_job_goes_on(monkeypatch):
    monkeypatch.setattr(bulkrunner, "RETRY_WAIT_S", 0.01)
    stopped, calls = _stopped_reads(1)
    jobs, placing = FakeJobs(_job()), FakePlacing()
    runner = _runner(jobs, stopped, placing)
    runner.start()
    try:
        _until(lambda: runner.running is None and len(placing.forgot) == 25)
    finally:
        runner.stop()
    assert calls == ["", "", "t09", "t19"] and jobs.failed == []


def test_a_fault_in_one_lane_ends_the_job_failed_once_and_stops_the_other():
    calls, runner = FakeBatches(), None

    def lane_1_breaks(batch, node, now_ms, lease_ms):
        if batch.lane == 1:
            raise ValueError("bad row")
        _until(lambda: runner._now is None or runner._now.ended.is_set())   # lane 0: under way as lane 1 fails
        return calls(batch, node, now_ms, lease_ms)
    jobs = FakeJobs(_job(lanes=2))
    runner = _runner(jobs, lane_1_breaks, FakePlacing(), batch=2)
    runner.start()
    try:
        _until(lambda: jobs.failed and runner.running is None)
    finally:
        runner.stop()
    assert jobs.failed == ["ValueError: bad row"] and jobs.released == []
    assert len(calls.calls) == 1        # lane 0 left after the batch it was in, not after its 7


def test_a_job_that_cannot_be_marked_failed_leaves_the_runner_running():
    class Unreachable(FakeJobs):
        def fail(self, job_id, node, error, now_ms):
            raise errors.StoreUnavailable("MySQL unavailable: gone", None)

    def broken(*args):
        raise ValueError("bad row")
    jobs = Unreachable(_job())
    runner = _runner(jobs, broken, FakePlacing())
    runner.start()
    try:
        _until(lambda: runner.running is None and jobs.job is None)
        assert runner.alive         # its lease lapses and another node (or this one) takes the job again
    finally:
        runner.stop()


@pytest.mark.parametrize("cursor_id, lanes, cursors", [
    ("m", None, ("m",)),                        # a job of an earlier version: one lane
    ("m", '["k", "m"]', ("k", "m")),            # as this version leaves it: cursor_id the highest lane
    ("p", '["k", "m"]', ("p", "p")),            # an earlier version's node moved it on: every lane from there
    ("a", '["k", "m"]', ("k", "m"))])           # below the lanes (no version writes it): no lane goes back
def test_a_job_rows_lane_cursors(cursor_id, lanes, cursors):
    row = types.SimpleNamespace(cursor_id=cursor_id, lane_cursors=lanes)
    assert cursors_of(row) == cursors


def test_progress_is_a_value():
    p = Progress(10, 1, 0, ("a",), "z")
    assert dataclasses.replace(p, changed=10).remaining == 0


# ---- BulkCalls: who may do what ------------------------------------------------------------------

class FakeStore:
    """BulkJobs in memory: jobs by id, each created RUNNING with the count asked for."""
    def __init__(self):
        self.jobs: dict[str, Job] = {}
        self.too_many = False       # the server stops the count at its limit

    def count(self, spec):
        if self.too_many:
            raise errors.StatementStopped("a statement was stopped after 3 s", 1969)
        return 7, "t7"

    def create(self, spec, actor, now_ms):
        self.count(spec)
        job = Job(f"j{len(self.jobs):04d}", spec, actor, now_ms, State.RUNNING, Progress(7, 0, 0, "", "t7"), None, 0,
                  None, None)
        self.jobs[job.job_id] = job
        return job

    def get(self, job_id):
        return self.jobs.get(job_id)

    def list(self, limit, topics=None, before=None):
        newest = sorted(self.jobs.values(), key=lambda j: j.job_id, reverse=True)
        return [j for j in newest if before is None or j.job_id < before][:limit]

    def stop(self, job_id, now_ms):
        self.jobs[job_id] = dataclasses.replace(self.jobs[job_id], state=State.STOPPED)
        return self.jobs[job_id]


def _bulk_calls(*clients: Client, store: FakeStore | None = None):
    access = Access(Clients(*clients), Metrics(), enabled=True)  # type: ignore[arg-type]
    access.load()
    started: list[int] = []
    calls = BulkCalls(store or FakeStore(), access, CallAnswers(Metrics()), FakeClock(), default_rate=2000,  # type: ignore[arg-type]
                      max_horizon_ms=86_400_000, started=lambda: started.append(1))
    return calls, started


def _req(action=ttypes.BulkAction.CANCEL, topic="a.t") -> ttypes.BulkRequest:
    return ttypes.BulkRequest(action=action, filter=ttypes.TaskFilter(topic=topic), reason="why", shiftMs=None)


def test_bulk_jobs_take_the_single_calls_grants_and_redrive_is_admins():
    ops = Client("ops", "digest", grants=frozenset({(Permission.CANCEL, "a.*"), (Permission.READ, "a.*")}))
    reader = Client("reader", "digest", grants=frozenset({(Permission.READ, "a.*")}))
    admin = Client("root", "digest", grants=frozenset({(Permission.ADMIN, "*")}))
    store = FakeStore()
    calls, started = _bulk_calls(ops, reader, admin, store=store)
    call_as("ops")
    assert calls.bulkCount(_req()) == 7
    job = calls.bulkStart(_req())
    assert (job.createdBy, job.total, started) == ("ops", 7, [1])
    for request, refused in ((_req(topic="b.t"), ("cancel", "b.t")), (_req(ttypes.BulkAction.REDRIVE), ("admin", ""))):
        with pytest.raises(ttypes.Forbidden) as e:
            calls.bulkStart(request)
        assert (e.value.permission, e.value.topic) == refused
    call_as("reader")
    assert calls.bulkGet(job.jobId).jobId == job.jobId and [j.jobId for j in calls.bulkList(None)] == [job.jobId]
    with pytest.raises(ttypes.Forbidden):
        calls.bulkStop(job.jobId)
    call_as("root")
    hidden = calls.bulkStart(_req(ttypes.BulkAction.REDRIVE, "b.t"))
    assert calls.bulkStop(job.jobId).state == ttypes.BulkState.STOPPED
    store.too_many = True                          # a count the server stopped: the filter's fault, said so
    for call in (calls.bulkCount, calls.bulkStart):
        with pytest.raises(ttypes.InvalidRequest) as e:
            call(_req())
        assert e.value.field == "filter" and "within 3 s: narrow it" in e.value.reason
    store.too_many = False
    call_as("reader")
    with pytest.raises(ttypes.InvalidRequest) as e:      # a job of a topic it may not read: no such job
        calls.bulkGet(hidden.jobId)
    assert e.value.field == "jobId" and [j.jobId for j in calls.bulkList(None)] == [job.jobId]
    call_as(None)                                            # no identity: told so, whatever it sent
    for call in (lambda: calls.bulkCount(None), lambda: calls.bulkGet(""), lambda: calls.bulkList(0),
                 lambda: calls.bulkStop("x")):
        with pytest.raises(ttypes.Unauthenticated):
            call()


@pytest.mark.parametrize("filter_, field", [
    (ttypes.TaskFilter(topic="a.t", keyPrefix="k\x85"), "filter.keyPrefix"),
    (ttypes.TaskFilter(topic="a.t", tag="t\u2028"), "filter.tag"), (ttypes.TaskFilter(topic="a.t", tag="a,b"), "filter.tag")])
def test_a_jobs_filter_refuses_control_characters_in_its_key_prefix_and_tag(filter_, field):
    admin = Client("root", "digest", grants=frozenset({(Permission.ADMIN, "*")}))
    calls, started = _bulk_calls(admin)
    call_as("root")
    for call in (calls.bulkCount, calls.bulkStart):
        with pytest.raises(ttypes.InvalidRequest) as e:
            call(ttypes.BulkRequest(action=ttypes.BulkAction.CANCEL, filter=filter_, reason="why"))
        assert e.value.field == field
    assert started == []


def test_a_reader_lists_its_topics_jobs_even_under_a_hundred_newer_jobs_of_other_topics():
    reader = Client("reader", "digest", grants=frozenset({(Permission.READ, "a.*")}))
    admin = Client("root", "digest", grants=frozenset({(Permission.ADMIN, "*")}))
    calls, _ = _bulk_calls(reader, admin)
    call_as("root")
    mine = [calls.bulkStart(_req(topic="a.t")).jobId for _ in range(3)]
    others = [calls.bulkStart(_req(topic="b.t")).jobId for _ in range(150)]
    assert len(calls.bulkList(None)) == 100 and calls.bulkList(None)[0].jobId == others[-1]
    call_as("reader")
    assert [j.jobId for j in calls.bulkList(None)] == mine[::-1]
    assert [j.jobId for j in calls.bulkList(2)] == mine[:0:-1]


@pytest.mark.parametrize("action", list(Action))
def test_a_job_with_a_key_prefix_walks_by_key_and_any_other_by_task_id(action):
    keyed = TaskFilter(topic="t", status=action.acts_on, key_prefix=b"acct-7/")
    assert first_cursor(Spec(action, keyed, "r", 10)) == WALK_BY_KEY
    assert first_cursor(Spec(action, TaskFilter(topic="t", status=action.acts_on, tag="x"), "r", 10)) == ""


def test_a_lane_is_done_past_its_walks_end_and_by_task_id_at_the_snapshots_last_id():
    upto = "19abc0000000000000000000005"
    assert not lane_done("", upto) and not lane_done("19abc0000000000000000000004", upto)
    assert lane_done(upto, upto) and lane_done(PAST_END, upto)
    # A walk by key is under way wherever it stands, though its cursor sorts above every task id.
    assert not lane_done(WALK_BY_KEY, upto) and not lane_done(WALK_BY_KEY + '["6b",1,"zz"]', upto)
    assert lane_done(WALK_BY_KEY, "")       # a job that matched nothing
