"""Service policies and ops paths on the real services: misfires, dead letters, results over AMQP,
rate-limited catch-up, redrive and retention."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import uuid

import pika
import pytest
from sqlalchemy import create_engine, text

from delayq import topology
from delayq.client import CallbackService, TaskSpec, TaskStatus
from delayq.client.consumer import TaskConsumer
from conftest import AMQP_URL, Collector, now_ms, wait_until

pytestmark = pytest.mark.integration


def _topic() -> str:
    return f"t.{uuid.uuid4().hex[:10]}"


def _sql(node, query: str, **params):
    engine = create_engine(node.env["DELAYQ_MYSQL_URL"])
    try:
        with engine.begin() as conn:
            return conn.execute(text(query), params)
    finally:
        engine.dispose()


def _delayq(node, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "delayq.ops.cli", *args], env=node.env, capture_output=True,
                          text=True, timeout=60)


def test_a_task_past_its_misfire_threshold_fails_to_the_dead_letter_exchange(node):
    topic, dlx = _topic(), f"dlx.{uuid.uuid4().hex[:8]}"
    with node.client() as c:
        c.registerService(CallbackService(topic=topic, ttrMs=0, misfireThresholdMs=1000, misfirePolicy="fail",
                                          deadLetterExchange=dlx))
        fired, dead = Collector("delayq", topic), Collector(dlx, topic)
        try:
            on_time = c.submit(TaskSpec(topic=topic, delayMs=200, payload=b"on time"))
            # Written straight into MySQL as overdue by a minute, as after an outage.
            late = c.submit(TaskSpec(topic=topic, delayMs=120_000, payload=b"too late"))
            _sql(node, "UPDATE job_delay_task SET due_ms = :d WHERE task_id = :t", d=now_ms() - 60_000,
                 t=late.taskId)
            [gone] = dead.wait_for(1, 15)
            assert gone.body == b"too late" and gone.headers["x-delayq-status"] == "FAILED"
            assert gone.headers["x-delayq-task-id"] == late.taskId and "misfire" in gone.headers["x-delayq-reason"]
            assert gone.properties.message_id == f"{late.taskId}:1:dead"
            assert fired.task_ids() == [on_time.taskId]
            info = c.get(late.taskId)
            assert info.status == TaskStatus.FAILED and info.attempts[0].result == "MISFIRED"
            # Published once: the backlog row is no longer waiting for the dead-letter exchange.
            wait_until(lambda: _sql(node, "SELECT dead_letter FROM job_delay_task_backlog WHERE task_id = :t",
                                    t=late.taskId).scalar() == 0, 10, what="the dead letter to be recorded")
        finally:
            fired.close()
            dead.close()


def test_results_reported_over_amqp_finish_and_retry_tasks(node):
    topic = _topic()
    attempts: list[int] = []

    def handle(task):
        attempts.append(task.attempt)
        if task.attempt == 1:
            from delayq.client.consumer import RetryLater
            raise RetryLater("once more")

    with node.client() as c:
        c.registerService(CallbackService(topic=topic, ttrMs=10_000, backoff="fixed", retryBackoffMs=200))
        consumer = TaskConsumer(topic, handle, results="amqp", amqp_url=AMQP_URL, cluster=node.env["DELAYQ_CLUSTER"])
        thread = threading.Thread(target=consumer.run, daemon=True)
        thread.start()
        try:
            assert consumer.wait_ready(10)
            ref = c.submit(TaskSpec(topic=topic, delayMs=100, payload=b"x"))
            info = wait_until(lambda: (i := c.get(ref.taskId)).status == TaskStatus.FINISHED and i, 15,
                              what="the task to finish through the results queue")
        finally:
            consumer.stop()
            thread.join(5)
    assert attempts == [1, 2]
    assert [(a.attempt, a.result) for a in info.attempts] == [(1, "RETRY"), (2, "SUCCESS")]
    assert info.attempts[0].message == "once more"


def test_a_result_that_cannot_be_applied_is_parked_with_its_reason_and_a_string_attempt_is_accepted(node):
    topic = _topic()
    with node.client() as c:
        c.registerService(CallbackService(topic=topic, ttrMs=60_000))
        task = c.submit(TaskSpec(topic=topic, delayMs=100, payload=b"p"))
        wait_until(lambda: c.get(task.taskId).attempt == 1, 10, what="the first dispatch")
    cluster = node.env["DELAYQ_CLUSTER"]
    queue, parked = f"delayq.results.{cluster}", f"delayq.results.{cluster}.parked"
    bad = [b"not json", json.dumps({"taskId": 5}).encode(),
           json.dumps({"taskId": "nope", "attempt": 1, "status": "SUCCESS"}).encode()]
    conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    try:
        ch = conn.channel()
        ch.queue_declare(queue, durable=True, arguments=topology.QUEUE_ARGUMENTS)
        ch.queue_declare(parked, durable=True, arguments=topology.QUEUE_ARGUMENTS)
        ch.queue_purge(parked)
        node_user = pika.BasicProperties(user_id=pika.URLParameters(AMQP_URL).credentials.username)
        for body in bad + [json.dumps({"taskId": task.taskId, "attempt": "1", "status": "SUCCESS"}).encode()]:
            ch.basic_publish("", queue, body, properties=node_user)
        wait_until(lambda: ch.queue_declare(parked, passive=True).method.message_count == len(bad), 10,
                   what="the unusable results to be parked")
        reasons = {}
        for _ in bad:
            method, props, body = ch.basic_get(parked, auto_ack=True)
            reasons[body] = props.headers["x-delayq-reason"]
        assert set(reasons) == set(bad)
        assert reasons[b"not json"].startswith("malformed: ")
        assert reasons[bad[2]].startswith("unknown_task: ")
    finally:
        conn.close()
    with node.client() as c:
        wait_until(lambda: c.get(task.taskId).status == TaskStatus.FINISHED, 10,
                   what='the result with "attempt": "1" to be applied')
    parked_by = node.metrics(labelled=True)
    assert parked_by['delayq_results_parked_total{reason="malformed"}'] >= 2
    assert parked_by['delayq_results_parked_total{reason="unknown_task"}'] >= 1


def test_late_tasks_are_caught_up_at_a_bounded_rate_without_delaying_tasks_due_now(node_factory):
    n = node_factory(DELAYQ_CATCHUP_RATE="100", DELAYQ_CATCHUP_GRACE_MS="1000")
    topic = _topic()
    with n.client() as c:
        c.registerService(CallbackService(topic=topic, ttrMs=0))
    collector = Collector("delayq", topic)
    try:
        n.stop()
        # 300 tasks an hour late (as after downtime), written while the node is down.
        backlog = [f"late-{uuid.uuid4().hex[:8]}-{i}" for i in range(300)]
        late_due = now_ms() - 3_600_000
        _sql(n, "INSERT INTO job_delay_task (task_id, topic, shard_id, due_ms, status, attempt, payload, spec_hash, "
                "max_retries, ttr_ms, created_ms, updated_ms) VALUES " + ",".join(
                    f"('{t}', '{topic}', {i % 8}, {late_due + i}, 0, 0, '', REPEAT('x', 16), 3, 0, 0, 0)"
                    for i, t in enumerate(backlog)))
        n.start()
        with n.client() as c:
            punctual = c.submit(TaskSpec(topic=topic, delayMs=800, payload=b"now"))
        collector.wait_for(301, 30)
        messages = collector.snapshot()
        arrived = {m.headers["x-delayq-task-id"]: m.at_ms for m in messages}
        lateness = arrived[punctual.taskId] - punctual.dueAtMs
        assert lateness < 100, f"the punctual task was {lateness} ms late behind the catch-up"
        # When the node published each late one (arrivals at the collector add the broker's and this
        # process's own stalls, which bunch them): 100 at once (a second's burst), then 200 more at
        # 100/s, so about two seconds from the first to the last; without the limit, within a few
        # ms. The stamp is taken at the publish, after the paced claim: publishes that wait, as the
        # first ones of a node just started do on a busy host, move their stamps later and shorten
        # the spread (918 ms seen in a full run). A quarter of the pacing still tells the two apart.
        fired = {m.headers["x-delayq-task-id"]: m.headers["x-delayq-dispatched-at"] for m in messages}
        spread = max(fired[t] for t in backlog) - min(fired[t] for t in backlog)
        assert spread >= 500, f"300 late tasks at 100/s went out in {spread} ms: the rate limit is not applied"
    finally:
        collector.close()


def test_redrive_sends_failed_tasks_again_and_purge_removes_old_history(node):
    topic = _topic()
    with node.client() as c:
        c.registerService(CallbackService(topic=topic, ttrMs=5000, maxRetries=0))
        collector = Collector("delayq", topic)      # bound before the task fires 50 ms after its submit
        try:
            ref = c.submit(TaskSpec(topic=topic, delayMs=50, payload=b"r"))
            collector.wait_for(1, 10)
            wait_until(lambda: c.get(ref.taskId).status == TaskStatus.READY, 10, what="dispatch")
            c.reportResult(ref.taskId, 1, 3, "broken")           # FATAL
            assert c.get(ref.taskId).status == TaskStatus.FAILED

            listed = json.loads(_delayq(node, "tasks", "list", "--topic", topic, "--status", "failed", "--json").stdout)
            assert [r["taskId"] for r in listed] == [ref.taskId]
            dry = _delayq(node, "tasks", "redrive", "--topic", topic, "--json")
            assert json.loads(dry.stdout) == {"wouldRedrive": 1}
            done = _delayq(node, "tasks", "redrive", "--topic", topic, "--yes", "--json")
            assert json.loads(done.stdout) == {"redriven": 1, "dispatchedWithinS": 2.0, "keyHeld": {}}, done.stderr
            [first, again] = collector.wait_for(2, 15)
            assert again.properties.message_id == f"{ref.taskId}:2"
            c.reportResult(ref.taskId, 2, 1, "fixed")            # SUCCESS
            assert c.get(ref.taskId).status == TaskStatus.FINISHED
        finally:
            collector.close()

    _sql(node, "UPDATE job_delay_task_backlog SET finished_ms = 1000 WHERE task_id = :t", t=ref.taskId)
    _sql(node, "UPDATE job_delay_task_execlog SET dispatched_ms = 1000 WHERE task_id = :t", t=ref.taskId)
    out = _delayq(node, "db", "purge", "--days", "30", "--json")
    assert json.loads(out.stdout)["backlog"] >= 1, out.stderr
    with node.client() as c:
        with pytest.raises(Exception) as e:
            c.get(ref.taskId)
        assert type(e.value).__name__ == "NotFound"


def test_the_services_commands_add_update_disable_and_list(node):
    topic, ep = _topic(), node.endpoint
    added = _delayq(node, "services", "add", topic, "--endpoint", ep, "--ttr-ms", "0", "--max-retries", "5", "--json")
    assert added.returncode == 0, added.stderr
    assert json.loads(added.stdout)["maxRetries"] == 5
    assert _delayq(node, "services", "add", topic, "--endpoint", ep).returncode == 1     # exists: use update
    updated = _delayq(node, "services", "update", topic, "--endpoint", ep, "--max-retries", "7", "--json")
    assert updated.returncode == 0, updated.stderr
    svc = json.loads(updated.stdout)
    assert svc["maxRetries"] == 7 and svc["ttrMs"] == 0                                  # the rest kept
    bad = _delayq(node, "services", "update", topic, "--endpoint", ep, "--retry-backoff-ms", "-1")
    assert bad.returncode == 2 and "retryBackoffMs" in bad.stderr
    assert _delayq(node, "services", "disable", topic, "--endpoint", ep).returncode == 0
    with node.client() as c:
        with pytest.raises(Exception) as e:
            c.submit(TaskSpec(topic=topic, delayMs=10))
        assert type(e.value).__name__ == "UnknownTopic" and e.value.disabled is True
        with pytest.raises(Exception) as e:
            c.submit(TaskSpec(topic=_topic(), delayMs=10))
        assert type(e.value).__name__ == "UnknownTopic" and not e.value.disabled
    listed = json.loads(_delayq(node, "services", "list", "--endpoint", ep, "--json").stdout)
    assert {s["topic"]: s["enabled"] for s in listed}[topic] is False
    # The command says what to do: enable it (registering it again is refused: it exists).
    refused = _delayq(node, "tasks", "submit", topic, "--delay", "1s", "--endpoint", ep)
    assert refused.returncode == 2
    assert f"topic {topic!r}: its service is disabled" in refused.stderr and "services add" not in refused.stderr
    assert f"delayq services disable {topic} --enable" in refused.stderr
    assert _delayq(node, "services", "disable", topic, "--enable", "--endpoint", ep).returncode == 0
    enabled = _delayq(node, "tasks", "submit", topic, "--delay", "1s", "--endpoint", ep)
    assert enabled.returncode == 0, enabled.stderr


def test_the_cli_submits_a_task_and_answers_json_in_one_key_style_errors_included(node):
    topic = _topic()
    with node.client() as c:
        c.registerService(CallbackService(topic=topic, ttrMs=0))
    version = _delayq(node, "--version")
    assert version.returncode == 0 and version.stdout.startswith("delayq ")
    fired = Collector("delayq", topic)
    try:
        out = _delayq(node, "tasks", "submit", topic, "--delay", "1s", "--payload", "from the shell",
                      "--endpoint", node.endpoint)
        assert out.returncode == 0, out.stderr
        task_id = out.stdout.split()[0]
        [msg] = fired.wait_for(1, 15)
        assert msg.body == b"from the shell" and msg.headers["x-delayq-task-id"] == task_id
    finally:
        fired.close()
    got = json.loads(_delayq(node, "tasks", "get", task_id, "--json", "--endpoint", node.endpoint).stdout)
    assert got["taskId"] == task_id and got["status"] == "FINISHED"
    listed = json.loads(_delayq(node, "tasks", "list", "--id", task_id, "--json").stdout)
    assert set(listed[0]) == {"taskId", "topic", "shardId", "status", "attempt", "dueAtMs", "key", "tags"}

    missing = _delayq(node, "tasks", "get", "no-such-task", "--json", "--endpoint", node.endpoint)
    assert missing.returncode == 1 and json.loads(missing.stdout) == {"error": "no task 'no-such-task'"}
    unknown = _delayq(node, "tasks", "submit", "no.such.topic", "--delay", "1s", "--endpoint", node.endpoint)
    assert unknown.returncode == 2 and "unknown topic 'no.such.topic'" in unknown.stderr
    both = _delayq(node, "tasks", "submit", topic, "--delay", "1s", "--at", "2030-01-01T00:00:00")
    assert both.returncode == 2 and "exactly one of --delay and --at" in both.stderr
    bad = _delayq(node, "tasks", "submit", topic, "--delay", "soon")
    assert bad.returncode == 2 and "expected a duration" in bad.stderr


def test_a_consumer_that_cannot_reach_a_node_reports_through_the_results_queue(node):
    topic = _topic()
    with node.client() as c:
        c.registerService(CallbackService(topic=topic, ttrMs=60_000))
        task = c.submit(TaskSpec(topic=topic, delayMs=100, payload=b"p"))
    from delayq.client import DelayqClient
    nowhere = DelayqClient(["127.0.0.1:1"], timeout_s=1)       # no node answers there
    consumer = TaskConsumer(topic, lambda t: None, results=nowhere, amqp_url=AMQP_URL, report_timeout_s=0.5,
                            cluster=node.env["DELAYQ_CLUSTER"])
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    try:
        with node.client() as c:
            info = wait_until(lambda: (i := c.get(task.taskId)).status == TaskStatus.FINISHED and i, 20,
                              what="the result sent through the results queue to be applied")
        assert [(a.attempt, a.result) for a in info.attempts] == [(1, "SUCCESS")]
    finally:
        consumer.stop()
        thread.join(10)
