"""The task lifecycle as a user sees it through `get(taskId)`: every state, every retry rule, the
time-to-run, a consumer that dies mid-task, and reports that must change nothing.

Each test registers its own topic (service) on the module's standalone node and reports results
over Thrift (`reportResult`) or through `TaskConsumer`.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import uuid
from pathlib import Path

import pika
import pytest

from delayq import topology
from conftest import AMQP_URL, Collector, now_ms, wait_until
from delayq.client import (CallbackService, CancelResult, DelayqClient, ReportOutcome, ResultStatus, TaskSpec,
                           TaskStatus)
from delayq.client.consumer import RetryLater, TaskConsumer
from delayq.client.gen.delayq_thrift import ttypes

pytestmark = pytest.mark.integration

# This process's clock against the node's, which keeps MySQL's (read to the microsecond): they may
# stand a millisecond apart, so times taken on both sides compare within this.
CLOCKS_MS = 5

REPO = Path(__file__).resolve().parents[2]


# ---- helpers -------------------------------------------------------------------------------------

def register(node, **service) -> str:
    """A fresh topic with its own callback service on the node."""
    topic = f"lc.{uuid.uuid4().hex[:10]}"
    with node.client() as c:
        c.registerService(CallbackService(topic=topic, **service))
    return topic


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@contextlib.contextmanager
def collecting(topic: str):
    col = Collector("delayq", topic)
    try:
        yield col
    finally:
        col.close()


def info_when(c: DelayqClient, task_id: str, pred, timeout: float, what: str) -> ttypes.TaskInfo:
    """Poll get(task_id) until pred(info) holds; return that info."""
    def probe():
        i = c.get(task_id)
        return i if pred(i) else None
    return wait_until(probe, timeout, 0.02, what=f"{task_id}: {what}")


def all_finished(c: DelayqClient, ids) -> dict[str, ttypes.TaskInfo] | None:
    infos = {t: c.get(t) for t in ids}
    return infos if all(i.status == TaskStatus.FINISHED for i in infos.values()) else None


def results(info: ttypes.TaskInfo) -> list[str | None]:
    return [a.result for a in info.attempts]


def mids(col: Collector) -> list[str]:
    return [m.properties.message_id for m in col.snapshot()]


@contextlib.contextmanager
def consumer_thread(topic: str, handler, endpoint: str):
    """A TaskConsumer on its own thread, reporting to the node; its durable queue is deleted after."""
    consumer = TaskConsumer(topic, handler, results=DelayqClient([endpoint], timeout_s=10), amqp_url=AMQP_URL)
    thread = threading.Thread(target=consumer.run, name=f"consumer-{topic}", daemon=True)
    thread.start()
    try:
        assert consumer.wait_ready(10), "the consumer did not start"
        yield consumer
    finally:
        consumer.stop()
        thread.join(10)
        delete_queue(topology.queue_name(topic))


def delete_queue(name: str) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    try:
        conn.channel().queue_delete(name)
    finally:
        conn.close()


# ---- every visible transition --------------------------------------------------------------------

def test_delay_ready_running_finished(node):
    topic = register(node, ttrMs=30_000, maxRetries=3)
    tid = new_id("happy")
    with collecting(topic) as col, node.client() as c:
        ref = c.submit(TaskSpec(topic=topic, taskId=tid, delayMs=1000, payload=b"p"))
        i = c.get(tid)
        assert (i.status, i.attempt, i.attempts) == (TaskStatus.DELAY, 0, [])
        assert i.dueAtMs == ref.dueAtMs and i.ttrMs == 30_000 and i.maxRetries == 3 and i.topic == topic

        [msg] = col.wait_for(1, timeout=10)
        assert msg.properties.message_id == f"{tid}:1" and msg.headers["x-delayq-attempt"] == 1
        # dispatched: READY, attempt 1, its execlog row (written after the broker's confirm) pending
        i = info_when(c, tid, lambda i: len(i.attempts) == 1, 10, "the attempt to be recorded")
        assert (i.status, i.attempt) == (TaskStatus.READY, 1)
        a = i.attempts[0]
        assert a.attempt == 1 and a.nodeId == node.node_id and a.result is None and a.resultAtMs is None
        assert a.dispatchedAtMs == msg.headers["x-delayq-dispatched-at"]

        assert c.reportResult(tid, 1, ResultStatus.STARTED, "begun") == ReportOutcome.APPLIED
        i = c.get(tid)
        assert (i.status, i.attempt, results(i)) == (TaskStatus.RUNNING, 1, [None])
        # a second STARTED changes nothing
        assert c.reportResult(tid, 1, ResultStatus.STARTED, "again") == ReportOutcome.STALE

        before = now_ms()
        assert c.reportResult(tid, 1, ResultStatus.SUCCESS, "done") == ReportOutcome.APPLIED
        i = c.get(tid)
        assert (i.status, i.attempt, results(i)) == (TaskStatus.FINISHED, 1, ["SUCCESS"])
        # The node keeps MySQL's clock, which may stand a millisecond off this process's.
        assert i.attempts[0].message == "done" and before - CLOCKS_MS <= i.attempts[0].resultAtMs <= now_ms() + CLOCKS_MS
        assert i.payload == b"p"
    assert mids(col) == [f"{tid}:1"]


def test_retry_goes_back_to_delay_and_fires_again_after_the_fixed_backoff(node):
    topic = register(node, ttrMs=30_000, maxRetries=3, backoff="fixed", retryBackoffMs=500)
    tid = new_id("retry")
    with collecting(topic) as col, node.client() as c:
        c.submit(TaskSpec(topic=topic, taskId=tid, delayMs=200, payload=b"p"))
        [m1] = col.wait_for(1, timeout=10)
        assert c.get(tid).status == TaskStatus.READY

        reported = now_ms()
        assert c.reportResult(tid, 1, ResultStatus.RETRY, "busy") == ReportOutcome.APPLIED
        i = c.get(tid)
        # back to DELAY, the attempt kept, due again after the backoff from the report
        assert (i.status, i.attempt) == (TaskStatus.DELAY, 1), "500 ms backoff: must still be waiting"
        assert results(i) == ["RETRY"] and i.attempts[0].message == "busy"
        assert i.dueAtMs == i.attempts[0].resultAtMs + 500
        assert i.dueAtMs >= reported + 500 - CLOCKS_MS

        m2 = col.wait_for(2, timeout=10)[1]
        assert m2.properties.message_id == f"{tid}:2"
        h = m2.headers
        assert h["x-delayq-attempt"] == 2 and h["x-delayq-due-at"] == i.dueAtMs
        assert h["x-delayq-due-at"] >= reported + 500 - CLOCKS_MS
        assert h["x-delayq-dispatched-at"] >= h["x-delayq-due-at"] and m2.at_ms >= h["x-delayq-due-at"]
        assert h["x-delayq-due-at"] > m1.headers["x-delayq-due-at"]

        i = c.get(tid)
        assert (i.status, i.attempt) == (TaskStatus.READY, 2)
        assert c.reportResult(tid, 2, ResultStatus.SUCCESS, "") == ReportOutcome.APPLIED
        i = c.get(tid)
        assert (i.status, i.attempt, results(i)) == (TaskStatus.FINISHED, 2, ["RETRY", "SUCCESS"])
    assert mids(col) == [f"{tid}:1", f"{tid}:2"]


def test_failed_after_the_last_retry(node):
    topic = register(node, ttrMs=30_000, maxRetries=1, backoff="fixed", retryBackoffMs=200)
    tid = new_id("last")
    with collecting(topic) as col, node.client() as c:
        c.submit(TaskSpec(topic=topic, taskId=tid, delayMs=100, payload=b"p"))
        col.wait_for(1, timeout=10)
        assert c.reportResult(tid, 1, ResultStatus.RETRY, "first") == ReportOutcome.APPLIED
        col.wait_for(2, timeout=10)
        # the last attempt, RUNNING, retried: FAILED
        assert c.reportResult(tid, 2, ResultStatus.STARTED, "") == ReportOutcome.APPLIED
        assert c.get(tid).status == TaskStatus.RUNNING
        assert c.reportResult(tid, 2, ResultStatus.RETRY, "second") == ReportOutcome.APPLIED
        i = c.get(tid)
        assert (i.status, i.attempt, results(i)) == (TaskStatus.FAILED, 2, ["RETRY", "RETRY"])
        assert [a.message for a in i.attempts] == ["first", "second"]
        # final: nothing moves it any more
        assert c.reportResult(tid, 2, ResultStatus.SUCCESS, "") == ReportOutcome.STALE
        assert c.get(tid).status == TaskStatus.FAILED
    assert mids(col) == [f"{tid}:1", f"{tid}:2"]


def test_fatal_fails_at_once(node):
    topic = register(node, ttrMs=30_000, maxRetries=3)
    tid = new_id("fatal")
    with collecting(topic) as col, node.client() as c:
        c.submit(TaskSpec(topic=topic, taskId=tid, delayMs=100, payload=b"p"))
        col.wait_for(1, timeout=10)
        assert c.reportResult(tid, 1, ResultStatus.FATAL, "bad payload") == ReportOutcome.APPLIED
        i = c.get(tid)
        assert (i.status, i.attempt, results(i)) == (TaskStatus.FAILED, 1, ["FATAL"])
        assert i.attempts[0].message == "bad payload"
    assert mids(col) == [f"{tid}:1"]


def test_cancelled(node):
    topic = register(node, ttrMs=30_000)
    tid = new_id("cancel")
    with node.client() as c:
        c.submit(TaskSpec(topic=topic, taskId=tid, delayMs=60_000, payload=b"p"))
        assert c.get(tid).status == TaskStatus.DELAY
        assert c.cancel(tid) == CancelResult.CANCELLED
        i = c.get(tid)
        assert (i.status, i.attempt, i.attempts) == (TaskStatus.CANCELLED, 0, [])
        assert c.cancel(tid) == CancelResult.CANCELLED
        with pytest.raises(ttypes.Conflict):
            c.reschedule(tid, now_ms() + 1000)


# ---- retry timing --------------------------------------------------------------------------------

@pytest.mark.timeout(60)
def test_exponential_backoff_doubles_within_the_jitter_bounds(node):
    topic = register(node, ttrMs=30_000, maxRetries=3, backoff="exponential", retryBackoffMs=300)
    tid = new_id("expo")

    def handle(task):
        raise RetryLater(f"attempt {task.attempt} busy")

    with collecting(topic) as col, consumer_thread(topic, handle, node.endpoint), node.client() as c:
        c.submit(TaskSpec(topic=topic, taskId=tid, delayMs=200, payload=b"p"))
        i = info_when(c, tid, lambda i: i.status == TaskStatus.FAILED, 20, "to fail after 4 attempts")
    assert i.attempt == 4 and results(i) == ["RETRY"] * 4
    assert [a.message for a in i.attempts] == [f"attempt {n} busy" for n in (1, 2, 3, 4)]
    msgs = col.snapshot()
    assert [m.properties.message_id for m in msgs] == [f"{tid}:{n}" for n in (1, 2, 3, 4)]
    due = [m.headers["x-delayq-due-at"] for m in msgs]
    # The wait after failed attempt n is due(n+1) - the time its RETRY was applied; RetryPolicy
    # .delay_ms: full = 300 * 2^(n-1), equal jitter -> within [full // 2, full].
    waits = [due[n] - i.attempts[n - 1].resultAtMs for n in (1, 2, 3)]
    for n, w in enumerate(waits, start=1):
        full = 300 * 2 ** (n - 1)
        assert full // 2 <= w <= full, f"wait after attempt {n} was {w} ms, expected {full // 2}..{full}: {waits}"
    gaps = [b - a for a, b in zip(due, due[1:])]
    assert gaps[2] > gaps[0], f"due-time gaps must grow: {gaps}"


# ---- time-to-run ---------------------------------------------------------------------------------

@pytest.mark.timeout(60)
def test_no_result_within_the_time_to_run_retries_then_fails(node):
    topic = register(node, ttrMs=1000, maxRetries=1, backoff="fixed", retryBackoffMs=200)
    tid = new_id("ttr")
    with collecting(topic) as col, node.client() as c:    # consumes, never reports
        c.submit(TaskSpec(topic=topic, taskId=tid, delayMs=100, payload=b"p"))
        m1, m2 = col.wait_for(2, timeout=15)[:2]
        assert m2.properties.message_id == f"{tid}:2" and m2.headers["x-delayq-attempt"] == 2
        # RUNNING does not stop the clock: attempt 2 says it started, then falls silent
        assert c.reportResult(tid, 2, ResultStatus.STARTED, "") == ReportOutcome.APPLIED
        i = c.get(tid)
        assert i.attempts[0].result == "TIMEOUT"
        assert i.attempts[0].resultAtMs >= m1.headers["x-delayq-dispatched-at"] + 1000 - 50, "timed out early"
        assert m2.headers["x-delayq-due-at"] == i.attempts[0].resultAtMs + 200
        i = info_when(c, tid, lambda i: i.status == TaskStatus.FAILED, 15, "to fail after its last ttr")
        assert i.attempt == 2 and results(i) == ["TIMEOUT", "TIMEOUT"]
        # a late result for the timed-out attempt changes nothing
        assert c.reportResult(tid, 2, ResultStatus.SUCCESS, "late") == ReportOutcome.STALE
    assert mids(col) == [f"{tid}:1", f"{tid}:2"]


# ---- a consumer that dies mid-task ---------------------------------------------------------------

DOOMED_CONSUMER = textwrap.dedent("""
    import sys, threading
    from delayq.client import DelayqClient, ResultStatus
    from delayq.client.consumer import TaskConsumer

    topic, endpoint, amqp = sys.argv[1:4]
    client = DelayqClient([endpoint], timeout_s=10)
    hold = threading.Event()

    def handle(task):
        client.reportResult(task.task_id, task.attempt, ResultStatus.STARTED, "working")
        print("GOT", task.message_id, flush=True)
        hold.wait()                       # mid-task until SIGKILL

    consumer = TaskConsumer(topic, handle, results=client, amqp_url=amqp)
    threading.Thread(target=lambda: (consumer.wait_ready(10), print("READY", flush=True)), daemon=True).start()
    consumer.run()
""")


@pytest.mark.timeout(60)
def test_a_consumer_killed_mid_task_is_replaced_and_the_task_finishes(node, tmp_path):
    # ttr far longer than the test: only the broker's redelivery can finish the task in time.
    topic = register(node, ttrMs=30_000, maxRetries=3)
    tid = new_id("orphan")
    out = tmp_path / "doomed.out"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with open(out, "wb") as f:
        doomed = subprocess.Popen([sys.executable, "-c", DOOMED_CONSUMER, topic, node.endpoint, AMQP_URL],
                                  cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT)
    seen: list[str] = []
    try:
        wait_until(lambda: b"READY" in out.read_bytes(), 15, 0.05, what=f"the doomed consumer\n{out.read_text()}")
        with node.client() as c:
            c.submit(TaskSpec(topic=topic, taskId=tid, delayMs=200, payload=b"p"))
            wait_until(lambda: f"GOT {tid}:1".encode() in out.read_bytes(), 10, 0.05, what="the first delivery")
            i = info_when(c, tid, lambda i: i.status == TaskStatus.RUNNING, 10, "RUNNING (STARTED reported)")
            assert i.attempt == 1

            doomed.send_signal(signal.SIGKILL)
            doomed.wait(10)
            assert c.get(tid).status == TaskStatus.RUNNING

            with consumer_thread(topic, lambda task: seen.append(task.message_id), node.endpoint):
                i = info_when(c, tid, lambda i: i.status == TaskStatus.FINISHED, 15, "to finish on redelivery")
    finally:
        if doomed.poll() is None:
            doomed.kill()
            doomed.wait(10)
    assert seen == [f"{tid}:1"], "the unacked message is redelivered to the next consumer, same attempt"
    assert i.attempt == 1 and results(i) == ["SUCCESS"]


# ---- reports that change nothing -----------------------------------------------------------------

def test_duplicate_and_stale_reports_change_nothing(node):
    topic = register(node, ttrMs=30_000, maxRetries=3, backoff="fixed", retryBackoffMs=200)
    dup, stale, gone = new_id("dup"), new_id("stale"), new_id("gone")
    with collecting(topic) as col, node.client() as c:
        c.submitBatch([TaskSpec(topic=topic, taskId=dup, delayMs=100, payload=b"d"),
                       TaskSpec(topic=topic, taskId=stale, delayMs=100, payload=b"s"),
                       TaskSpec(topic=topic, taskId=gone, delayMs=60_000, payload=b"g")])
        wait_until(lambda: {f"{dup}:1", f"{stale}:1"} <= set(mids(col)), 10, what="both tasks to fire")

        # the same SUCCESS twice: the second is STALE, the first one's record stays
        assert c.reportResult(dup, 1, ResultStatus.SUCCESS, "first") == ReportOutcome.APPLIED
        assert c.reportResult(dup, 1, ResultStatus.SUCCESS, "second") == ReportOutcome.STALE
        assert c.reportResult(dup, 1, ResultStatus.RETRY, "third") == ReportOutcome.STALE
        i = c.get(dup)
        assert (i.status, i.attempt, results(i)) == (TaskStatus.FINISHED, 1, ["SUCCESS"])
        assert i.attempts[0].message == "first"

        # a report for attempt 1 after attempt 2 was dispatched
        assert c.reportResult(stale, 1, ResultStatus.RETRY, "retry") == ReportOutcome.APPLIED
        wait_until(lambda: f"{stale}:2" in mids(col), 10, what="attempt 2 to fire")
        before = info_when(c, stale, lambda i: len(i.attempts) == 2, 10, "attempt 2 to be recorded")
        assert (before.status, before.attempt) == (TaskStatus.READY, 2)
        for status in (ResultStatus.SUCCESS, ResultStatus.FATAL, ResultStatus.RETRY, ResultStatus.STARTED):
            assert c.reportResult(stale, 1, status, "late") == ReportOutcome.STALE
        assert c.reportResult(stale, 3, ResultStatus.SUCCESS, "future") == ReportOutcome.STALE
        after = c.get(stale)
        assert after == before, "a stale report must not touch the task or its execlog"

        # a cancelled task
        assert c.cancel(gone) == CancelResult.CANCELLED
        assert c.reportResult(gone, 1, ResultStatus.SUCCESS, "") == ReportOutcome.STALE
        assert c.reportResult(gone, 1, ResultStatus.STARTED, "") == ReportOutcome.STALE
        i = c.get(gone)
        assert (i.status, i.attempt, i.attempts) == (TaskStatus.CANCELLED, 0, [])

        # an unknown task
        with pytest.raises(ttypes.NotFound) as e:
            c.reportResult(new_id("nobody"), 1, ResultStatus.SUCCESS, "")
        assert e.value.taskId.startswith("nobody-")

        assert c.reportResult(stale, 2, ResultStatus.SUCCESS, "") == ReportOutcome.APPLIED
        assert c.get(stale).status == TaskStatus.FINISHED


# ---- per-task overrides --------------------------------------------------------------------------

@pytest.mark.timeout(60)
def test_per_task_max_retries_and_ttr_override_the_service(node):
    # The service: no retry, a 60 s time-to-run.
    topic = register(node, ttrMs=60_000, maxRetries=0, backoff="fixed", retryBackoffMs=200)
    own, default = new_id("own"), new_id("default")
    with collecting(topic) as col, node.client() as c:
        c.submitBatch([TaskSpec(topic=topic, taskId=own, delayMs=100, payload=b"o", maxRetries=1, ttrMs=800),
                       TaskSpec(topic=topic, taskId=default, delayMs=100, payload=b"d")])
        o, d = c.get(own), c.get(default)
        assert (o.maxRetries, o.ttrMs) == (1, 800)
        assert (d.maxRetries, d.ttrMs) == (0, 60_000)

        wait_until(lambda: f"{default}:1" in mids(col), 10, what="the default task to fire")
        # the service's maxRetries 0: a RETRY fails it at once
        assert c.reportResult(default, 1, ResultStatus.RETRY, "") == ReportOutcome.APPLIED
        d = c.get(default)
        assert (d.status, d.attempt, results(d)) == (TaskStatus.FAILED, 1, ["RETRY"])

        # the task's own ttr (0.8 s, not 60 s) and maxRetries (1, not 0): two attempts time out
        o = info_when(c, own, lambda i: i.status == TaskStatus.FAILED, 15, "to fail after two time-outs")
        assert o.attempt == 2 and results(o) == ["TIMEOUT", "TIMEOUT"]
    assert sorted(m for m in mids(col) if m.startswith(own)) == [f"{own}:1", f"{own}:2"]


# ---- the execlog keeps what really happened ------------------------------------------------------

@pytest.mark.timeout(60)
def test_an_attempt_reported_before_it_was_recorded_keeps_its_real_dispatch_time(node):
    busy = register(node, ttrMs=0)            # 1000 finishes ahead of ours keep the recorder busy
    topic = register(node, ttrMs=30_000)
    with collecting(busy), collecting(topic) as col, \
            consumer_thread(topic, lambda task: None, node.endpoint), node.client() as c:
        due = now_ms() + 1500
        c.submitBatch([TaskSpec(topic=busy, dueAtMs=due, payload=b"b") for _ in range(1000)])
        ids = [r.taskId for r in c.submitBatch([TaskSpec(topic=topic, dueAtMs=due + 1, payload=b"t")
                                                for _ in range(20)])]
        wait_until(lambda: all_finished(c, ids), 30, 0.2, what="our tasks to finish")
        sent = {m.headers["x-delayq-task-id"]: m.headers["x-delayq-dispatched-at"] for m in col.snapshot()}

        def wrong() -> dict:
            infos = all_finished(c, ids)
            return {t: (sent[t], i.attempts[0].dispatchedAtMs, i.attempts[0].resultAtMs) for t, i in infos.items()
                    if i.attempts[0].dispatchedAtMs != sent[t] or i.attempts[0].nodeId != node.node_id}
        # The recorder writes the dispatch after the broker's confirm, possibly after the report:
        # once it has, every attempt shows its real dispatch time and node.
        wait_until(lambda: not wrong(), 15, 0.2,
                   what="the execlog to show the real dispatch (header dispatched-at, execlog dispatchedAtMs, "
                        "resultAtMs)")
