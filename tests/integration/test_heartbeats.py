"""Heartbeats of long tasks (`touch`) and the consumer helper around them, on the real services:
a handler that runs three times its time-to-run is dispatched once while it heartbeats and again
without; a cancel reaches a running attempt; a stale attempt's touch is refused; a helper that
cannot heartbeat gives its attempt up; the helper reconnects when RabbitMQ closes its connection.
"""
from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
import uuid

import pika
import pika.exceptions
import pytest

from conftest import AMQP_URL, Collector, free_port, now_ms, wait_until
from delayq import config, db as dbm, topology
from delayq.client import CallbackService, CancelResult, DelayqClient, ReportOutcome, ResultStatus, TaskSpec, TaskStatus
from delayq.client.consumer import HeartbeatsLost, TaskConsumer
from delayq.client.gen.delayq_thrift import ttypes
from delayq.lifecycle import Result, RetryPolicy
from delayq.store.tasks import TaskStore

pytestmark = pytest.mark.integration


def register(node, **service) -> str:
    topic = f"hb.{uuid.uuid4().hex[:10]}"
    with node.client() as c:
        c.registerService(CallbackService(topic=topic, **service))
    return topic


@pytest.fixture
def bound():
    """bound(topic): a queue for the topic's tasks (unroutable ones would go back to DELAY)."""
    made: list[Collector] = []
    yield lambda topic: made.append(Collector("delayq", topic))
    for col in made:
        col.close()


@contextlib.contextmanager
def consuming(consumer: TaskConsumer):
    """run() on its own thread; what it raised, if anything, in the yielded list."""
    raised: list[BaseException] = []

    def run():
        try:
            consumer.run()
        except BaseException as e:  # noqa: BLE001 - the test looks at it
            raised.append(e)
    thread = threading.Thread(target=run, name=f"consumer-{consumer.topic}", daemon=True)
    thread.start()
    try:
        assert consumer.wait_ready(10), "the consumer did not start"
        yield raised
    finally:
        consumer.stop()
        thread.join(15)
        assert not thread.is_alive(), "the consumer did not stop"
        conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
        try:
            conn.channel().queue_delete(topology.queue_name(consumer.topic))
        finally:
            conn.close()


def dispatched(node, topic: str, task_id: str) -> ttypes.TaskInfo:
    """The task once its first attempt is in flight."""
    with node.client() as c:
        return wait_until(lambda: (i := c.get(task_id)).status in (TaskStatus.READY, TaskStatus.RUNNING) and i,
                          10, what=f"{task_id} to be dispatched")


# ---- touch over Thrift ---------------------------------------------------------------------------

def test_touch_extends_the_deadline_in_mysql_and_stores_progress_shown_by_get(node, bound):
    topic = register(node, ttrMs=60_000)
    bound(topic)
    with node.client() as c:
        ref = c.submit(TaskSpec(topic=topic, delayMs=0, payload=b"p"))
        before = dispatched(node, topic, ref.taskId)
        first = before.attempts[0].deadlineMs if before.attempts else None
        t = c.touch(ref.taskId, 1, 600_000, b'{"done": 40}')
        assert not t.cancelled and t.deadlineMs >= now_ms() + 590_000
        i = c.get(ref.taskId)
        [a] = i.attempts
        assert a.progress == b'{"done": 40}' and a.deadlineMs == t.deadlineMs and a.cancelRequestedAtMs is None
        assert first is None or first < t.deadlineMs
        shown = subprocess.run([sys.executable, "-m", "delayq.ops.cli", "tasks", "get", ref.taskId, "--endpoint",
                                node.endpoint, "--json"], env=node.env, capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0, shown.stderr
        [cli] = json.loads(shown.stdout)["attempts"]
        assert (cli["progress"], cli["deadlineMs"]) == ('{"done": 40}', t.deadlineMs)
        # Never earlier: a shorter extension leaves it; no progress keeps the last one.
        assert c.touch(ref.taskId, 1, 1000, None).deadlineMs == t.deadlineMs
        assert c.get(ref.taskId).attempts[0].progress == b'{"done": 40}'
        assert c.reportResult(ref.taskId, 1, ResultStatus.SUCCESS, "") == ReportOutcome.APPLIED
        ended = c.get(ref.taskId)
        assert ended.status == TaskStatus.FINISHED and ended.attempts[0].progress == b'{"done": 40}'
        assert ended.attempts[0].deadlineMs is None


def test_a_time_out_read_before_a_touch_is_not_applied_after_it(node, bound, database):
    """The deadline checker read the old deadline, then a touch moved it: the time-out, applied
    after, checks it again under the row lock and changes nothing."""
    topic = register(node, ttrMs=60_000, maxRetries=3)
    bound(topic)
    engine = dbm.make_engine(config.load({"DELAYQ_MYSQL_URL": database.url}).mysql)
    store = TaskStore(engine)
    policy = lambda topic, retries: RetryPolicy(retries, "fixed", 1000, 1000)  # noqa: E731
    try:
        with node.client() as c:
            ref = c.submit(TaskSpec(topic=topic, delayMs=0, payload=b"p"))
            dispatched(node, topic, ref.taskId)
            t = c.touch(ref.taskId, 1, 600_000, None)
            late = store.apply_result(ref.taskId, 1, Result.TIMEOUT, "late", t.deadlineMs - 1, policy)
            assert not late.applied and c.get(ref.taskId).status == TaskStatus.READY
            due = store.apply_result(ref.taskId, 1, Result.TIMEOUT, "due", t.deadlineMs + 1, policy)
            assert due.applied and due.status == TaskStatus.DELAY
    finally:
        engine.dispose()


def test_a_touch_after_a_cancel_says_cancelled_and_the_attempt_ends_the_task_cancelled(node, bound):
    topic = register(node, ttrMs=60_000, maxRetries=3)
    bound(topic)
    with node.client() as c:
        ref = c.submit(TaskSpec(topic=topic, delayMs=0, payload=b"p"))
        dispatched(node, topic, ref.taskId)
        assert not c.touch(ref.taskId, 1, 1000, None).cancelled
        asked = now_ms()
        assert c.cancel(ref.taskId) == CancelResult.ALREADY_DISPATCHED
        assert c.touch(ref.taskId, 1, 1000, b"stopping").cancelled
        assert c.get(ref.taskId).attempts[0].cancelRequestedAtMs >= asked - 5
        # A retry would run it again: the cancel ends it instead.
        assert c.reportResult(ref.taskId, 1, ResultStatus.RETRY, "stopped") == ReportOutcome.APPLIED
        i = c.get(ref.taskId)
        assert (i.status, [a.result for a in i.attempts]) == (TaskStatus.CANCELLED, ["RETRY"])
        with pytest.raises(ttypes.StaleAttempt) as e:
            c.touch(ref.taskId, 1, 1000, None)
        assert "CANCELLED" in e.value.reason


def test_a_cancel_by_key_reaches_the_running_attempt_too(node, bound):
    topic = register(node, ttrMs=60_000, maxRetries=3)
    bound(topic)
    with node.client() as c:
        ref = c.submit(TaskSpec(topic=topic, delayMs=0, payload=b"p", key="order-7"))
        dispatched(node, topic, ref.taskId)
        [out] = c.cancelByKey(topic, "order-7").tasks
        assert (out.taskId, out.result) == (ref.taskId, ttypes.KeyedResult.ALREADY_DISPATCHED)
        assert c.touch(ref.taskId, 1, 1000, None).cancelled


def test_a_stale_attempts_touch_is_refused_and_says_so(node, bound):
    topic = register(node, ttrMs=500, maxRetries=3, backoff="fixed", retryBackoffMs=60_000)
    bound(topic)
    with node.client() as c:
        ref = c.submit(TaskSpec(topic=topic, delayMs=0, payload=b"p"))
        dispatched(node, topic, ref.taskId)
        # Its time-to-run runs out: back to DELAY (retried in a minute), attempt 1 is over.
        wait_until(lambda: c.get(ref.taskId).status == TaskStatus.DELAY, 10, what="the attempt to time out")
        with pytest.raises(ttypes.StaleAttempt) as e:
            c.touch(ref.taskId, 1, 1000, None)
        assert (e.value.taskId, e.value.attempt) == (ref.taskId, 1) and "timed out" in e.value.reason
        with pytest.raises(ttypes.StaleAttempt):
            c.touch(ref.taskId, 2, 1000, None)          # not dispatched yet
        with pytest.raises(ttypes.NotFound):
            c.touch("no-such-task", 1, 1000, None)
        for args, field in (((0, 1000, None), "attempt"), ((1, 3_600_001, None), "extendMs"),
                            ((1, 1000, b"x" * 1025), "progress")):
            with pytest.raises(ttypes.InvalidTask) as bad:
                c.touch(ref.taskId, *args)
            assert bad.value.field == field


# ---- the consumer helper -------------------------------------------------------------------------

@pytest.mark.timeout(60)
def test_a_10_s_handler_with_a_2_s_ttr_is_dispatched_once_with_heartbeats_and_again_without(node):
    beating, silent = register(node, ttrMs=2000, maxRetries=3), register(node, ttrMs=2000, maxRetries=3)
    progress: list[bytes] = []

    def handle(task):
        end = time.monotonic() + 10.0             # five times the ttr
        while time.monotonic() < end and not task.cancelled.is_set():
            task.set_progress(b"%d" % (len(progress) + 1))
            progress.append(b"")
            time.sleep(0.1)

    seen = {t: Collector("delayq", t) for t in (beating, silent)}
    with_beats = TaskConsumer(beating, handle, results=DelayqClient([node.endpoint], timeout_s=5), amqp_url=AMQP_URL)
    # results=None: nothing reported, no heartbeats (a consumer that reports some other way)
    quit_silent = threading.Event()
    without = TaskConsumer(silent, lambda task: quit_silent.wait(6.0), amqp_url=AMQP_URL)
    try:
        with consuming(with_beats) as raised, consuming(without), node.client() as c:
            a = c.submit(TaskSpec(topic=beating, delayMs=0, payload=b"long"))
            b = c.submit(TaskSpec(topic=silent, delayMs=0, payload=b"long"))
            done = wait_until(lambda: (i := c.get(a.taskId)).status == TaskStatus.FINISHED and i, 20,
                              what="the heartbeating task to finish")
            assert [(x.attempt, x.result) for x in done.attempts] == [(1, "SUCCESS")]
            assert done.attempts[0].progress                     # the handler's last progress reached MySQL
            assert [m.headers["x-delayq-attempt"] for m in seen[beating].snapshot()] == [1]
            assert seen[beating].snapshot()[0].headers["x-delayq-ttr"] == 2000
            # Without heartbeats the time-to-run ran out while the handler ran: dispatched again.
            wait_until(lambda: len(seen[silent].snapshot()) >= 2, 5, what="the silent task to go again")
            assert c.get(b.taskId).attempt >= 2
            quit_silent.set()
        assert not raised
    finally:
        for col in seen.values():
            col.close()


@pytest.mark.timeout(30)
def test_a_task_cancelled_while_its_documented_handler_runs_ends_cancelled_not_finished(node):
    """The handler of docs/consumers.md returns when told: its work abandoned, the helper reports
    RETRY rather than SUCCESS, and the cancel ends the task CANCELLED."""
    topic = register(node, ttrMs=2000, maxRetries=3)
    working, why = threading.Event(), []

    def handle(task):
        working.set()
        for _ in range(300):                       # at most 30 s of work, in chunks
            if task.cancelled.is_set():
                why.append(task.cancelled_why)
                return
            time.sleep(0.1)
    consumer = TaskConsumer(topic, handle, results=DelayqClient([node.endpoint], timeout_s=5), amqp_url=AMQP_URL)
    with consuming(consumer) as raised, node.client() as c:
        ref = c.submit(TaskSpec(topic=topic, delayMs=0, payload=b"long"))
        assert working.wait(10), "the handler did not start"
        assert c.cancel(ref.taskId) == CancelResult.ALREADY_DISPATCHED
        ended = wait_until(lambda: (i := c.get(ref.taskId)).status != TaskStatus.READY and
                           i.status != TaskStatus.RUNNING and i, 10, what="the attempt to end")
        assert why == ["cancelled"]
        assert ended.status == TaskStatus.CANCELLED
        [a] = ended.attempts
        assert (a.attempt, a.result) == (1, "RETRY") and "cancelled" in a.message
        assert not raised


@pytest.mark.timeout(30)
def test_a_helper_that_cannot_heartbeat_three_times_gives_the_attempt_up_and_stops(node):
    topic = register(node, ttrMs=1500, maxRetries=3)
    told = threading.Event()

    def handle(task):
        if task.cancelled.wait(10):
            told.set()
    nowhere = DelayqClient(["127.0.0.1:1"], timeout_s=0.5)           # no node answers there
    consumer = TaskConsumer(topic, handle, results=DelayqClient([node.endpoint], timeout_s=5), heartbeats=nowhere,
                            amqp_url=AMQP_URL)
    with consuming(consumer) as raised, node.client() as c:
        ref = c.submit(TaskSpec(topic=topic, delayMs=0, payload=b"p"))
        wait_until(lambda: raised, 10, what="run() to stop")
        assert told.is_set() and isinstance(raised[0], HeartbeatsLost)
        # Neither reported nor acked: delayq's time-to-run decides (attempt 1 times out, 2 goes).
        i = c.get(ref.taskId)
        assert [a.result for a in i.attempts if a.attempt == 1] in ([None], ["TIMEOUT"], [])


def _consumer_connections(name: str) -> list[str]:
    """The Erlang pids of the RabbitMQ connections whose client named itself `name` (connection_name)."""
    out = subprocess.run(["rabbitmqctl", "-q", "list_connections", "pid", "client_properties"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return [line.split("\t")[0] for line in out.stdout.splitlines() if f'"{name}"' in line]


@pytest.mark.timeout(60)
def test_the_consumer_reconnects_after_the_broker_closes_its_connection(node):
    topic = register(node, ttrMs=10_000)
    got: list[str] = []
    consumer = TaskConsumer(topic, lambda task: got.append(task.task_id),
                            results=DelayqClient([node.endpoint], timeout_s=5), amqp_url=AMQP_URL)
    with consuming(consumer) as raised, node.client() as c:
        [conn] = wait_until(lambda: _consumer_connections(consumer.connection_name), 10,
                            what="the consumer's connection to be listed")
        closed = subprocess.run(["rabbitmqctl", "-q", "close_connection", conn, "closed by test"],
                                capture_output=True, text=True, timeout=30)
        assert closed.returncode == 0, closed.stderr
        wait_until(lambda: consumer.connections >= 2 and consumer.wait_ready(0), 15, what="a new connection")
        ref = c.submit(TaskSpec(topic=topic, delayMs=0, payload=b"after"))
        wait_until(lambda: c.get(ref.taskId).status == TaskStatus.FINISHED, 10, what="the task to finish")
        assert got == [ref.taskId] and not raised


@pytest.mark.timeout(30)
def test_the_consumer_gives_up_reconnecting_after_its_bound():
    """No broker at the address: run() tries again with back-off, then raises once reconnect_for_s passed."""
    consumer = TaskConsumer("hb.nowhere", lambda task: None, amqp_url=f"amqp://guest:guest@127.0.0.1:{free_port()}/%2F",
                            reconnect_for_s=2.0)
    started = time.monotonic()
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        consumer.run()
    assert 1.0 <= time.monotonic() - started <= 10.0 and consumer.connections == 0
