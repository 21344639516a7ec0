"""What the consumer helper reports for a handler it told to stop (delayq.client.consumer._Run,
delayq.client.heartbeats.AttemptState): a handler that returns after delayq said the task was
cancelled stopped its work: RETRY (the task then ends CANCELLED), never SUCCESS; one that returned
before the helper was told keeps its SUCCESS, as does one whose attempt timed out (its SUCCESS
settles the task rather than have it run again)."""
from __future__ import annotations

import threading

import pytest

from delayq.client.consumer import Delivery, _Run
from delayq.client.gen.delayq_thrift.ttypes import ResultStatus


def delivery() -> Delivery:
    return Delivery(task_id="t-1", topic="t", attempt=1, due_at_ms=0, dispatched_at_ms=0, payload=b"",
                    message_id="t-1:1", ttr_ms=2000)


def finished(run: _Run) -> _Run:
    assert run.done.wait(10), "the handler did not return"
    run.thread.join(10)
    return run


def documented_handler(working: threading.Event):
    """The heartbeating handler of docs/consumers.md: works until told to stop, then returns."""
    def handle(task: Delivery) -> None:
        working.set()
        while not task.cancelled.wait(0.01):
            pass
    return handle


def test_a_handler_that_returns_after_it_was_told_of_a_cancel_reports_retry_not_success():
    task, working = delivery(), threading.Event()
    run = _Run(documented_handler(working), task)
    run.thread.start()
    assert working.wait(10)
    task.state.cancel("cancelled")              # what a touch's answer does
    finished(run)
    assert (run.status, run.message) == (
        ResultStatus.RETRY, "stopped: the handler returned after it was told the task was cancelled while it ran")


def test_a_handler_that_returns_after_its_attempt_timed_out_reports_success():
    # Its task waits to be sent again: a SUCCESS settles it, where a RETRY would have it run twice.
    task, working = delivery(), threading.Event()
    run = _Run(documented_handler(working), task)
    run.thread.start()
    assert working.wait(10)
    task.state.cancel("stale")
    finished(run)
    assert (run.status, run.message) == (ResultStatus.SUCCESS, "")


def test_a_handler_that_returned_before_the_cancel_arrived_keeps_its_success():
    task = delivery()
    run = _Run(lambda t: None, task)
    run.thread.start()
    finished(run)
    task.state.cancel("cancelled")              # the touch's answer came after the return
    assert (run.status, run.message) == (ResultStatus.SUCCESS, "")
    assert not task.cancelled.is_set()          # nobody is left to tell
