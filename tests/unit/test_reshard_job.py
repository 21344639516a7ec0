"""ReshardJob, the node's runner of an admin's reshard call: one run at a time, its progress while
it runs, an error answered once and then resumed, and stopping between batches. A fake Resharder
stands for MySQL and ZooKeeper."""
from __future__ import annotations

import threading

import pytest

from conftest import wait_until
from delayq.master.reshard import ReshardJob, Stopped

pytestmark = pytest.mark.timeout(10)


class FakeResharder:
    """Moves `batches` batches of 10 tasks, each when `step` is set; then fails with `fail`, if any."""

    def __init__(self, stop: threading.Event, step: threading.Event, batches: int, fail: Exception | None):
        self.stop, self.step, self.batches, self.fail = stop, step, batches, fail

    def run(self, target: int, progress, timeout_s: float) -> int:
        for _ in range(self.batches):
            while not self.step.wait(0.01):
                if self.stop.is_set():
                    raise Stopped("stopped before the end; run it again to resume")
            self.step.clear()
            progress(10)
        if self.fail is not None:
            raise self.fail
        return 10 * self.batches


def job(step: threading.Event, batches: int = 2, fails: list | None = None) -> ReshardJob:
    fails = fails if fails is not None else []
    return ReshardJob(lambda stop: FakeResharder(stop, step, batches, fails.pop(0) if fails else None))


def test_a_second_call_reports_the_running_run_and_starts_nothing():
    step = threading.Event()
    j = job(step)
    first, started = j.start(8, 12)
    assert started and (first.current, first.target, first.running, first.moved) == (8, 12, True, 0)
    again, started = j.start(8, 12)
    assert not started and again.running
    step.set()
    wait_until(lambda: j.progress.moved == 10, 5, what="the first batch")
    step.set()
    wait_until(lambda: not j.progress.running, 5, what="the run to end")
    assert (j.progress.moved, j.progress.error) == (20, None)


def test_an_error_is_answered_once_and_the_next_call_resumes():
    step = threading.Event()
    step.set()
    j = job(step, batches=1, fails=[TimeoutError("the master did not apply the reshard in time")])
    j.start(8, 12)
    wait_until(lambda: not j.progress.running, 5, what="the run to fail")
    told, started = j.start(8, 12)
    assert not started and told.error == "the master did not apply the reshard in time" and told.moved == 10
    step.set()
    resumed, started = j.start(8, 12)
    assert started and resumed.running and resumed.error is None and resumed.moved == 0
    wait_until(lambda: not j.progress.running, 5, what="the resumed run to end")
    assert j.progress.error is None


def test_stop_ends_a_run_between_batches_and_refuses_new_ones():
    j = job(threading.Event(), batches=3)
    j.start(8, 12)
    j.stop()
    assert not j.progress.running and "run it again to resume" in j.progress.error
    with pytest.raises(Exception, match="stopping"):
        j.start(8, 12)
