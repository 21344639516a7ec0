"""One node end to end on the real services: submit over Thrift, fire from RabbitMQ."""
from __future__ import annotations

import collections
import os
import signal
import subprocess
import threading
import uuid

import pytest

from delayq.client import CallbackService, CancelResult, DelayqClient, TaskSpec, TaskStatus
from delayq.client.consumer import TaskConsumer
from delayq.testing.process import process_state
from conftest import AMQP_URL, Collector, now_ms, wait_until

pytestmark = pytest.mark.integration


def test_task_arrives_on_time_with_the_contract_headers(node, topic, collector):
    with node.client() as c:
        ref = c.submit(TaskSpec(topic=topic, taskId="order-42", delayMs=1500, payload=b"cancel order 42"))
    assert ref.created and ref.taskId == "order-42"

    [msg] = collector.wait_for(1, timeout=10)
    h = msg.headers
    assert msg.body == b"cancel order 42"
    assert msg.properties.message_id == "order-42:1"
    assert msg.properties.delivery_mode == 2
    assert h["x-delayq-task-id"] == "order-42" and h["x-delayq-topic"] == topic
    assert h["x-delayq-attempt"] == 1 and h["x-delayq-due-at"] == ref.dueAtMs
    assert ref.dueAtMs <= h["x-delayq-dispatched-at"] <= msg.at_ms
    lateness = msg.at_ms - ref.dueAtMs
    assert 0 <= lateness < 100, f"arrived {lateness} ms after its due time"


def test_a_batch_of_1000_arrives_exactly_once(node, topic, collector):
    due = now_ms() + 1000
    specs = [TaskSpec(topic=topic, dueAtMs=due + i, payload=str(i).encode()) for i in range(1000)]
    with node.client() as c:
        refs = c.submitBatch(specs)
    assert len({r.taskId for r in refs}) == 1000 and all(r.created for r in refs)

    collector.wait_for(1000, timeout=30)
    counts = collections.Counter(collector.task_ids())
    assert set(counts) == {r.taskId for r in refs}
    assert max(counts.values()) == 1


def test_a_cancelled_task_never_fires(node, topic, collector):
    with node.client() as c:
        doomed = c.submit(TaskSpec(topic=topic, delayMs=800, payload=b"doomed"))
        sentinel = c.submit(TaskSpec(topic=topic, delayMs=1600, payload=b"sentinel"))
        assert c.cancel(doomed.taskId) == CancelResult.CANCELLED
        assert c.cancel(doomed.taskId) == CancelResult.CANCELLED  # idempotent
        assert c.get(doomed.taskId).status == TaskStatus.CANCELLED

    collector.wait_for(1, timeout=10)
    # The sentinel was due after the cancelled task: once it is here, the other would have been too.
    assert collector.task_ids() == [sentinel.taskId]
    with node.client() as c:
        assert c.cancel(sentinel.taskId) == CancelResult.ALREADY_DISPATCHED
        assert c.cancel("no-such-task") == CancelResult.NOT_FOUND


def test_a_task_beyond_the_window_is_loaded_by_a_later_scan_and_fires_on_time(node, topic, collector):
    # The test node's window is 3 s: this task is only in MySQL when submitted.
    with node.client() as c:
        ref = c.submit(TaskSpec(topic=topic, delayMs=5000, payload=b"later"))
    [msg] = collector.wait_for(1, timeout=15)
    lateness = msg.at_ms - ref.dueAtMs
    assert 0 <= lateness < 100, f"arrived {lateness} ms after its due time"


def test_reschedule_moves_the_due_time_and_get_shows_the_attempts(node, topic, collector):
    with node.client() as c:
        ref = c.submit(TaskSpec(topic=topic, taskId=f"r-{uuid.uuid4().hex[:8]}", delayMs=60_000, payload=b"x"))
        moved = c.reschedule(ref.taskId, now_ms() + 1000)
        assert moved.dueAtMs < ref.dueAtMs
        [msg] = collector.wait_for(1, timeout=10)
        assert msg.headers["x-delayq-due-at"] == moved.dueAtMs
        info = wait_until(lambda: (i := c.get(ref.taskId)).status == TaskStatus.FINISHED and i, 10,
                          what="the task to finish")
    assert info.attempt == 1 and [a.attempt for a in info.attempts] == [1]
    assert info.attempts[0].nodeId == node.node_id and info.attempts[0].result == "CONFIRMED"


def test_a_node_killed_and_restarted_loses_no_task(node_factory):
    victim = node_factory()
    topic = f"t.{uuid.uuid4().hex[:10]}"
    with victim.client() as c:
        # Results expected (ttr 2 s): a task claimed but not confirmed when the node dies is retried.
        c.registerService(CallbackService(topic=topic, ttrMs=2000, maxRetries=5, backoff="fixed",
                                          retryBackoffMs=200))
    collector = Collector("delayq", topic)
    consumer = TaskConsumer(topic, lambda task: None, results=DelayqClient([victim.endpoint]), amqp_url=AMQP_URL)
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    try:
        assert consumer.wait_ready(10)
        start = now_ms() + 500
        with victim.client() as c:
            refs = c.submitBatch([TaskSpec(topic=topic, dueAtMs=start + i * 10, payload=b"p") for i in range(300)])
        ids = {r.taskId for r in refs}
        wait_until(lambda: len(collector.messages) >= 50, 10, what="the first tasks to fire")
        victim.kill()
        fired_before_kill = len(collector.messages)
        assert fired_before_kill < 300, "the node must die while tasks are still due"
        victim.start()
        wait_until(lambda: ids <= set(collector.task_ids()), 30,
                   what=f"every task to arrive ({len(ids - set(collector.task_ids()))} missing)")
        with victim.client() as c:
            wait_until(lambda: all(c.get(t).status == TaskStatus.FINISHED for t in ids), 30,
                       what="every task to finish")
        # No attempt twice: a task the kill caught between claim and record comes back as attempt 2
        # after its time-to-run, under a new message id.
        mids = collections.Counter(m.properties.message_id for m in collector.snapshot())
        assert max(mids.values()) == 1, [m for m, n in mids.items() if n > 1]
    finally:
        consumer.stop()
        thread.join(5)
        collector.close()
        victim.stop()


def test_a_node_told_to_stop_as_it_wakes_from_a_pause_stops(node_factory):
    """A SIGTERM right after a SIGCONT: Linux may hand it to a thread other than the main one (which
    still has the SIGCONT pending), where Python only notes it for the main thread to act on."""
    victim = node_factory()
    try:
        for _ in range(2):
            os.kill(victim.proc.pid, signal.SIGSTOP)
            wait_until(lambda: process_state(victim.proc.pid) == "T", 5, 0.01, what="the node to stop")
            os.kill(victim.proc.pid, signal.SIGCONT)
            os.kill(victim.proc.pid, signal.SIGTERM)
            try:
                victim.proc.wait(15)
            except subprocess.TimeoutExpired:
                pytest.fail("a SIGTERM sent as the node woke from a SIGSTOP did not stop it within 15 s")
            assert victim.proc.returncode == 0, victim.log_tail()
            victim.start()
    finally:
        victim.stop()


def _idle_closes(node) -> float:
    return node.metrics(labelled=True).get('delayq_thrift_connections_closed_total{reason="idle"}', 0.0)


def test_a_client_left_idle_past_the_idle_close_submits_again_without_a_task_id(node, topic):
    """The node closes a connection silent for DELAYQ_IDLE_TIMEOUT_MS (2 s here); the client's next
    call connects again instead of failing, even a submit it could not safely retry."""
    with node.client() as c:
        c.submit(TaskSpec(topic=topic, delayMs=60_000, payload=b"first"))
        before = _idle_closes(node)
        wait_until(lambda: _idle_closes(node) > before, timeout=10, what="the node to close the idle connection")
        ref = c.submit(TaskSpec(topic=topic, delayMs=60_000, payload=b"after the idle close"))
        assert ref.created
        assert c.get(ref.taskId).payload == b"after the idle close"
