"""Who may report a result through the results queue, on a secured node and the real RabbitMQ.

A result runs as the delayq client named by the message's `user_id`, which RabbitMQ checks against
the publishing connection's user: a downstream app with a RabbitMQ user of its own, named like its
delayq client, can report results only for the topics it holds `report` on.
"""
from __future__ import annotations

import json
import re
import subprocess
import threading
import urllib.parse
import uuid
from typing import Iterator

import pika
import pika.exceptions
import pytest

from conftest import AMQP_URL, Collector, wait_until
from delayq import topology
from delayq.client import CallbackService, TaskSpec, TaskStatus
from delayq.client.consumer import TaskConsumer

pytestmark = pytest.mark.integration


def rabbitmqctl(*args: str) -> None:
    r = subprocess.run(["rabbitmqctl", "-q", *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"rabbitmqctl {args[0]} failed: {r.stdout}{r.stderr}"


@pytest.fixture(scope="module")
def reporter(clients) -> Iterator[tuple[str, str]]:
    """A RabbitMQ user and a delayq client of the same name, with no permissions yet."""
    name, password = f"reporter-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
    rabbitmqctl("add_user", name, password)
    try:
        clients.add(name)
        yield name, password
    finally:
        rabbitmqctl("delete_user", name)


@pytest.fixture(scope="module")
def topics(node, clients, reporter) -> Iterator[tuple[str, str]]:
    """Topics A and B. The reporter is A's downstream app: in RabbitMQ it may declare the exchange,
    its queue and the results queue (configure), consume its queue (read) and publish to the results
    queue through the default exchange (write); in delayq it may report on A."""
    a, b = f"a-{uuid.uuid4().hex[:6]}", f"b-{uuid.uuid4().hex[:6]}"
    with node.client() as admin:
        for t in (a, b):
            admin.registerService(CallbackService(topic=t, ttrMs=60_000))
    queue, results = re.escape(f"delayq.{a}"), re.escape(f"delayq.results.{node.env['DELAYQ_CLUSTER']}")
    rabbitmqctl("set_permissions", "-p", pika.URLParameters(AMQP_URL).virtual_host, reporter[0],
                f"^(delayq|{queue}|{results})$", f"^({queue}|amq\\.default)$", f"^(delayq|{queue})$")
    clients.grant(reporter[0], "report", a)
    queues = [Collector(topology.DEFAULT_EXCHANGE, t) for t in (a, b)]       # so that their tasks are routed
    yield a, b
    for q in queues:
        q.close()


def dispatched(node, topic: str) -> str:
    with node.client() as c:
        task = c.submit(TaskSpec(topic=topic, delayMs=50, payload=b"x"))
        wait_until(lambda: c.get(task.taskId).attempt == 1, 10, what=f"the first dispatch of {topic}'s task")
    return task.taskId


def status(node, task_id: str) -> int:
    with node.client() as c:
        return c.get(task_id).status


def result(task_id: str) -> bytes:
    return json.dumps({"taskId": task_id, "attempt": 1, "status": "SUCCESS"}).encode()


def url_of(user: tuple[str, str]) -> str:
    p = pika.URLParameters(AMQP_URL)
    return f"amqp://{user[0]}:{user[1]}@{p.host}:{p.port}/{urllib.parse.quote(p.virtual_host, safe='')}"


def parked(node, reason: str) -> float:
    return node.metrics(labelled=True).get(f'delayq_results_parked_total{{reason="{reason}"}}', 0.0)


def publish(url: str, queue: str, body: bytes, user_id: str | None) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        ch.basic_publish("", queue, body, properties=pika.BasicProperties(delivery_mode=2, user_id=user_id))
    finally:
        if conn.is_open:
            conn.close()


def test_a_reporter_finishes_a_task_of_its_topic_but_not_one_of_another(node, reporter, topics):
    a, b = topics
    queue = f"delayq.results.{node.env['DELAYQ_CLUSTER']}"
    mine, other = dispatched(node, a), dispatched(node, b)
    before = parked(node, "forbidden")
    publish(url_of(reporter), queue, result(other), reporter[0])
    publish(url_of(reporter), queue, result(mine), reporter[0])
    wait_until(lambda: status(node, mine) == TaskStatus.FINISHED, 10, what="the result for A's task to be applied")
    wait_until(lambda: parked(node, "forbidden") == before + 1, 5, what="the result for B's task to be parked")
    assert status(node, other) == TaskStatus.READY


def test_a_result_without_user_id_or_from_an_unknown_user_is_parked(node, topics):
    a, _ = topics
    queue = f"delayq.results.{node.env['DELAYQ_CLUSTER']}"
    task_id = dispatched(node, a)
    before = parked(node, "unauthenticated")
    publish(AMQP_URL, queue, result(task_id), None)
    wait_until(lambda: parked(node, "unauthenticated") == before + 1, 10, what="the anonymous result to be parked")
    assert status(node, task_id) == TaskStatus.READY


def test_rabbitmq_refuses_a_user_id_that_is_not_the_connections_user(reporter):
    conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as e:
            ch.basic_publish("", "delayq.results.nowhere", b"{}", properties=pika.BasicProperties(user_id=reporter[0]))
        assert e.value.reply_code == 406
    finally:
        if conn.is_open:
            conn.close()


def test_the_consumer_helper_reports_as_its_own_rabbitmq_user(node, reporter, topics):
    """A downstream app with nothing but its own RabbitMQ user and a `report` grant consumes its
    topic and reports through the results queue: TaskConsumer sets user_id itself."""
    a, _ = topics
    consumer = TaskConsumer(a, lambda task: None, results="amqp", amqp_url=url_of(reporter),
                            cluster=node.env["DELAYQ_CLUSTER"])
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    try:
        assert consumer.wait_ready(10)
        with node.client() as c:
            task = c.submit(TaskSpec(topic=a, delayMs=50, payload=b"x"))
            wait_until(lambda: c.get(task.taskId).status == TaskStatus.FINISHED, 15,
                       what="the helper's result to finish the task")
    finally:
        consumer.stop()
        thread.join(5)
