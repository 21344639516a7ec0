"""Outages of what a node depends on: RabbitMQ restarted, MariaDB restarted, the node itself killed
while tasks come due. Nothing may be lost, nothing half written, and the node must recover by itself.

These tests stop SHARED services (the machine's RabbitMQ and MariaDB): each outage is kept short
and the service is always brought back in a `finally`.
"""
from __future__ import annotations

import collections
import contextlib
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pika
import pytest

from delayq import topology
from delayq.client import CallbackService, DelayqClient, TaskSpec, TaskStatus, connect
from delayq.client.consumer import TaskConsumer
from delayq.client.gen.delayq_thrift import ttypes
from conftest import AMQP_URL, Collector, now_ms, wait_until

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
MYSQL_PORT = 3306
AMQP_PORT = 5672


# ---- helpers -------------------------------------------------------------------------------------

def register(node, **service) -> str:
    topic = f"out.{uuid.uuid4().hex[:10]}"
    with node.client() as c:
        c.registerService(CallbackService(topic=topic, **service))
    return topic


def port_refuses(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return False
    except OSError:
        return True


def amqp_answers() -> bool:
    params = pika.URLParameters(AMQP_URL)
    params.connection_attempts, params.socket_timeout, params.blocked_connection_timeout = 1, 2, 2
    try:
        pika.BlockingConnection(params).close()
        return True
    except Exception:  # noqa: BLE001 - any failure means: not yet
        return False


def mysql_answers() -> bool:
    r = subprocess.run(["mysqladmin", "-h127.0.0.1", f"-P{MYSQL_PORT}", "-uroot", "--connect-timeout=2", "ping"],
                       capture_output=True, timeout=10)
    return r.returncode == 0


def rabbitmqctl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["rabbitmqctl", *args], capture_output=True, text=True, timeout=90)


def restore_rabbitmq() -> None:
    r = rabbitmqctl("start_app")
    assert r.returncode == 0, f"rabbitmqctl start_app failed: {r.stdout}{r.stderr}"
    wait_until(amqp_answers, 60, 0.2, what="RabbitMQ to accept connections on 127.0.0.1:5672")


class MariaDB:
    """Stops the machine's MariaDB and starts it again with scripts/services.sh; `close()` always
    leaves it answering."""

    def __init__(self):
        self.starter: subprocess.Popen | None = None

    def stop(self) -> None:
        r = subprocess.run(["mysqladmin", "-h127.0.0.1", f"-P{MYSQL_PORT}", "-uroot", "shutdown"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, f"mysqladmin shutdown failed: {r.stdout}{r.stderr}"
        wait_until(lambda: port_refuses(MYSQL_PORT), 30, 0.1, what="MariaDB to stop")

    def start(self) -> None:
        """Run scripts/services.sh --only mysql and wait until MariaDB answers. The script itself
        may take longer to return than the server to answer; close() waits for it."""
        if self.starter is None:
            self.starter = subprocess.Popen([str(REPO / "scripts" / "services.sh"), "--only", "mysql"],
                                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        wait_until(mysql_answers, 90, 0.1, what="MariaDB to answer on 127.0.0.1:3306")

    def close(self) -> None:
        if self.starter is None and not mysql_answers():
            self.start()
        if self.starter is not None:
            try:
                out, _ = self.starter.communicate(timeout=150)
            except subprocess.TimeoutExpired:
                self.starter.kill()
                out, _ = self.starter.communicate()
            assert self.starter.returncode == 0, f"scripts/services.sh --only mysql failed:\n{out}"
        wait_until(mysql_answers, 90, 0.2, what="MariaDB to answer on 127.0.0.1:3306")


def statuses(c: DelayqClient, ids) -> dict[str, ttypes.TaskInfo]:
    return {t: c.get(t) for t in ids}


def all_finished(c: DelayqClient, ids) -> dict[str, ttypes.TaskInfo] | None:
    infos = statuses(c, ids)
    return infos if all(i.status == TaskStatus.FINISHED for i in infos.values()) else None


@contextlib.contextmanager
def durable_queue(topic: str):
    """A durable queue bound to the topic: it keeps what was routed to it across a broker restart."""
    name = f"test.outage.{topic}"
    conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    ch = conn.channel()
    ch.exchange_declare(topology.DEFAULT_EXCHANGE, exchange_type=topology.EXCHANGE_TYPE, durable=True)
    ch.queue_declare(name, durable=True)
    ch.queue_bind(name, topology.DEFAULT_EXCHANGE, topic)
    conn.close()
    try:
        yield name
    finally:
        if amqp_answers():
            conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
            conn.channel().queue_delete(name)
            conn.close()


def drain(queue: str, want: set[str], timeout: float) -> collections.Counter:
    """Consume the queue until every task id in `want` was seen; message id -> deliveries."""
    seen: collections.Counter = collections.Counter()
    conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    try:
        ch = conn.channel()
        deadline = time.monotonic() + timeout
        for method, props, _body in ch.consume(queue, auto_ack=True, inactivity_timeout=0.5):
            if method is not None:
                seen[props.message_id] += 1
            got = {topology.parse_message_id(m)[0] for m in seen}
            if want <= got:
                break
            if time.monotonic() > deadline:
                pytest.fail(f"timed out: {len(want - got)} of {len(want)} tasks never arrived, e.g. "
                            f"{sorted(want - got)[:5]}")
        ch.cancel()
    finally:
        conn.close()
    return seen


# ---- RabbitMQ ------------------------------------------------------------------------------------

@pytest.mark.timeout(150)
def test_rabbitmq_restart_while_tasks_are_due_loses_none(node_factory):
    node = node_factory()
    topic = register(node, ttrMs=0)          # finished on the broker's confirm
    try:
        with durable_queue(topic) as queue, node.client() as c:
            start = now_ms() + 500
            refs = c.submitBatch([TaskSpec(topic=topic, dueAtMs=start + i * 30, payload=str(i).encode())
                                  for i in range(200)])
            ids = {r.taskId for r in refs}
            wait_until(lambda: c.get(refs[0].taskId).status == TaskStatus.FINISHED, 10,
                       what="the first task to finish before the outage")
            stopped_at = now_ms()
            try:
                r = rabbitmqctl("stop_app")
                assert r.returncode == 0, f"rabbitmqctl stop_app failed: {r.stdout}{r.stderr}"
                time.sleep(3)                # keep the outage going while tasks come due
            finally:
                restore_rabbitmq()
            back_at = now_ms()
            due_in_outage = [r for r in refs if stopped_at <= r.dueAtMs <= back_at]
            assert len(due_in_outage) >= 50, "the outage must overlap the due times"

            # Nobody touches the node: it reconnects and dispatches what came due meanwhile.
            arrivals = drain(queue, ids, timeout=60)
            infos = wait_until(lambda: all_finished(c, ids), 30, 0.2, what="every task to finish")
        assert node.proc.poll() is None
        for t, i in infos.items():
            assert any(a.result == "CONFIRMED" for a in i.attempts), (t, i.attempts)
        # A publish that may have reached a queue before the broker went down is sent again as a
        # new attempt (new message id): a task may arrive twice, one attempt never.
        dup = {m: n for m, n in arrivals.items() if n > 1}
        assert not dup, dup
        print(f"{len(due_in_outage)} tasks came due during the outage; "
              f"{sum(1 for i in infos.values() if len(i.attempts) > 1)} tasks took more than one attempt")
    finally:
        node.stop()


# ---- MariaDB -------------------------------------------------------------------------------------

@pytest.mark.timeout(180)
def test_mariadb_restart_refuses_cleanly_writes_nothing_half_and_loses_nothing(node_factory):
    node = node_factory(DELAYQ_MYSQL_TIMEOUT_MS="2000")
    topic = register(node, ttrMs=0)
    tag = uuid.uuid4().hex[:8]
    collector = Collector("delayq", topic)
    mariadb = MariaDB()
    try:
        with node.client() as c:
            # due while MariaDB is down (the failed claim drops them from memory; a scan after the
            # outage finds them again) and after it
            during = c.submitBatch([TaskSpec(topic=topic, taskId=f"during-{tag}-{i}", delayMs=1500 + 10 * i,
                                             payload=b"d") for i in range(20)])
            after = c.submitBatch([TaskSpec(topic=topic, taskId=f"after-{tag}-{i}", delayMs=12_000 + 10 * i,
                                            payload=b"a") for i in range(20)])
        lost_ids = [f"lost-{tag}-{i}" for i in range(5)]

        mariadb.stop()
        down_at = now_ms()
        # Straight to the node (the client would retry): it must refuse at once, not hang.
        client, transport = connect("127.0.0.1", node.port, timeout_s=10)
        took = {}
        try:
            for call, args in [("submit", (TaskSpec(topic=topic, delayMs=1000, payload=b"x"),)),
                               ("submitBatch", ([TaskSpec(topic=topic, taskId=t, delayMs=1000, payload=b"l")
                                                 for t in lost_ids],)),
                               ("get", (during[0].taskId,))]:
                t0 = time.monotonic()
                with pytest.raises(ttypes.Unavailable):
                    getattr(client, call)(*args)
                took[call] = time.monotonic() - t0
        finally:
            transport.close()
        assert max(took.values()) <= 2.0 + 0.5, f"answers took {took} s (DELAYQ_MYSQL_TIMEOUT_MS is 2000)"
        assert node.proc.poll() is None, f"the node died\n{node.log_tail()}"
        # keep MariaDB down until the first tasks are overdue
        time.sleep(max(0.0, (max(r.dueAtMs for r in during) + 1000 - now_ms()) / 1000))
        mariadb.start()
        up_at, restored = now_ms(), time.monotonic()
        assert all(down_at < r.dueAtMs < up_at for r in during), "premise: due while MariaDB was down"
        assert all(r.dueAtMs > up_at for r in after), "premise: due after MariaDB came back"

        with node.client() as c:
            def submits():
                try:
                    return c.submit(TaskSpec(topic=topic, taskId=f"back-{tag}", delayMs=500, payload=b"b"))
                except ttypes.Unavailable:
                    return None
            back = wait_until(submits, 30, 0.1, what="a submit to succeed after the restart")
            recovered_s = time.monotonic() - restored
            assert back.created
            # nothing of the refused batch was written
            for t in lost_ids:
                with pytest.raises(ttypes.NotFound):
                    c.get(t)
            want = {r.taskId for r in during + after} | {back.taskId}
            wait_until(lambda: want <= set(collector.task_ids()), 60, 0.1,
                       what=f"every task to fire ({len(want - set(collector.task_ids()))} missing)")
            infos = wait_until(lambda: all_finished(c, want), 20, 0.2, what="every task to finish")
        assert all(i.attempts and i.attempts[-1].result == "CONFIRMED" for i in infos.values())
        counts = collections.Counter(m.properties.message_id for m in collector.snapshot())
        assert max(counts.values()) == 1, {m: n for m, n in counts.items() if n > 1}
        assert node.proc.poll() is None
        arrived = {m.headers["x-delayq-task-id"]: m.at_ms for m in collector.snapshot()}
        print(f"refusals took {took}; outage {(up_at - down_at) / 1000:.1f} s; submit accepted "
              f"{recovered_s:.2f} s after MariaDB answered; overdue tasks fired "
              f"{(max(arrived[r.taskId] for r in during) - up_at) / 1000:.1f} s after it; the task submitted "
              f"then was {arrived[back.taskId] - back.dueAtMs} ms late")
    finally:
        mariadb.close()
        collector.close()
        node.stop()


@pytest.mark.timeout(180)
def test_after_a_mysql_outage_firing_resumes_within_a_second_and_no_reported_work_is_timed_out(node_factory):
    # Production scan settings: recovery must not wait for the next window scan.
    node = node_factory(DELAYQ_MYSQL_TIMEOUT_MS="2000", DELAYQ_SCAN_INTERVAL_MS="5000", DELAYQ_FULL_SCAN_MS="15000",
                        DELAYQ_WINDOW_MS="60000")
    work, plain = register(node, ttrMs=3000, maxRetries=3), register(node, ttrMs=0)
    collector = Collector("delayq", plain)
    outage = threading.Event()
    handled = collections.Counter()

    def handle(task):               # the consumer's work ends during the outage: its report waits
        handled[(task.task_id, task.attempt)] += 1
        outage.wait(30)
    consumer = TaskConsumer(work, handle, results=DelayqClient([node.endpoint]), amqp_url=AMQP_URL)
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    assert consumer.wait_ready(10)
    mariadb = MariaDB()
    try:
        with node.client() as c:
            jobs = c.submitBatch([TaskSpec(topic=work, delayMs=300, payload=b"w") for _ in range(10)])
            wait_until(lambda: handled, 10, what="the consumer to get the first job")
            during = c.submitBatch([TaskSpec(topic=plain, delayMs=1500 + 10 * i, payload=b"d") for i in range(10)])
        mariadb.stop()
        outage.set()
        # Down past the jobs' time-to-run and the plain tasks' due times.
        wait_until(lambda: now_ms() > max(r.dueAtMs for r in jobs) + 4000, 30, 0.1, what="the deadlines to pass")
        mariadb.start()
        up_at = now_ms()
        with node.client() as c:
            def submits():
                try:
                    return c.submit(TaskSpec(topic=plain, delayMs=500, payload=b"b"))
                except ttypes.Unavailable:
                    return None
            back = wait_until(submits, 30, 0.05, what="a submit to succeed after the restart")
            want = {r.taskId for r in during} | {back.taskId}
            wait_until(lambda: want <= set(collector.task_ids()), 30, 0.05, what="the plain tasks to fire")
            arrived = {m.headers["x-delayq-task-id"]: m.at_ms for m in collector.snapshot()}
            resumed = min(arrived[r.taskId] for r in during) - up_at
            assert resumed <= 1500, f"overdue tasks fired {resumed} ms after MariaDB answered"
            assert arrived[back.taskId] - back.dueAtMs <= 300, "a task submitted after the outage was late"
            ids = {r.taskId for r in jobs}
            infos = wait_until(lambda: all_finished(c, ids), 60, 0.2, what="every job to finish")
        assert all(len(i.attempts) == 1 for i in infos.values()), \
            {t: [a.result for a in i.attempts] for t, i in infos.items() if len(i.attempts) > 1}
        assert max(handled.values()) == 1 and all(a == 1 for _, a in handled), "work was dispatched again"
    finally:
        outage.set()
        mariadb.close()
        consumer.stop()
        thread.join(10)
        collector.close()
        node.stop()


# ---- the node itself -----------------------------------------------------------------------------

@pytest.mark.timeout(120)
def test_a_node_killed_as_tasks_come_due_finishes_every_task_once_per_attempt(node_factory):
    victim = node_factory()
    # A time-to-run of seconds: the one consumer below works through 400 tasks and their retries
    # after the restart, and on a slow host a shorter one times its own backlog out.
    topic = register(victim, ttrMs=5000, maxRetries=5, backoff="fixed", retryBackoffMs=200)
    collector = Collector("delayq", topic)
    consumer = TaskConsumer(topic, lambda task: None, results=DelayqClient([victim.endpoint], timeout_s=5),
                            amqp_url=AMQP_URL)
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    try:
        assert consumer.wait_ready(10)
        start = now_ms() + 1000
        with victim.client() as c:
            refs = c.submitBatch([TaskSpec(topic=topic, dueAtMs=start + i * 5, payload=b"p") for i in range(400)])
        ids = {r.taskId for r in refs}
        wait_until(lambda: len(collector.messages) >= 40, 10, 0.002, what="the first tasks to fire")
        victim.kill()                          # SIGKILL: claims, publishes and records cut anywhere
        assert len(collector.messages) < 400, "the node must die while tasks are still coming due"
        victim.start()

        wait_until(lambda: ids <= set(collector.task_ids()), 30, 0.1,
                   what=f"every task to arrive ({len(ids - set(collector.task_ids()))} missing)")
        with victim.client() as c:
            infos = wait_until(lambda: all_finished(c, ids), 30, 0.3, what="every task to finish")
        assert all(i.attempts[-1].result == "SUCCESS" for i in infos.values())
        mids = collections.Counter(m.properties.message_id for m in collector.snapshot())
        assert max(mids.values()) == 1, [m for m, n in mids.items() if n > 1]
        retried = sum(1 for i in infos.values() if i.attempt > 1)
        print(f"{retried} tasks needed a second attempt after the kill")
    finally:
        consumer.stop()
        thread.join(5)
        with contextlib.suppress(Exception):
            conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
            conn.channel().queue_delete(topology.queue_name(topic))
            conn.close()
        collector.close()
        victim.stop()


@pytest.mark.timeout(120)
def test_an_attempt_claimed_by_a_node_killed_before_it_published_is_logged_without_a_dispatch(node_factory):
    # Claims a second ahead, so the kill falls between a claim and its publish.
    victim = node_factory(DELAYQ_CLAIM_LEAD_MS="1000")
    topic = register(victim, ttrMs=1000, maxRetries=2, backoff="fixed", retryBackoffMs=100)
    collector = Collector("delayq", topic)
    from sqlalchemy import create_engine, text
    engine = create_engine(victim.env["DELAYQ_MYSQL_URL"])
    try:
        with victim.client() as c:
            ref = c.submit(TaskSpec(topic=topic, delayMs=2500, payload=b"k"))

        def status():
            with engine.connect() as conn:
                return conn.execute(text("SELECT status FROM job_delay_task WHERE task_id = :t"),
                                    {"t": ref.taskId}).scalar()
        wait_until(lambda: status() == 1, 5, 0.002, what="the claim")
        victim.kill()
        assert now_ms() < ref.dueAtMs, "killed after the due time: it may have been published"
        survivor = node_factory()
        try:
            [msg] = collector.wait_for(1, 20)
            assert msg.headers["x-delayq-attempt"] == 2
            with survivor.client() as c:
                first = c.get(ref.taskId).attempts[0]
            assert first.attempt == 1 and first.result == "UNRECORDED", first
            assert first.dispatchedAtMs is None, "a dispatch time was made up for an attempt never published"
            assert first.nodeId == victim.node_id
        finally:
            survivor.stop()
    finally:
        collector.close()
        engine.dispose()
