"""A node and a consumer on RabbitMQ over TLS (amqps://), as delayq's own user in its own vhost,
whose permissions reach only delayq's exchanges and queues (scripts/services.sh sets them up)."""
from __future__ import annotations

import logging
import os
import ssl
import threading
import uuid

import pika
import pytest

from conftest import wait_until
from delayq.client import CallbackService, DelayqClient, TaskSpec, TaskStatus
from delayq.client import amqp
from delayq.client.consumer import TaskConsumer
from delayq.client.gen.delayq_thrift import ttypes
from delayq.testing import security
from delayq.testing.services import RABBITMQ_TLS_DIR, amqps_url, delete_queue

pytestmark = pytest.mark.integration

CA = os.path.join(RABBITMQ_TLS_DIR, "ca.pem")


@pytest.fixture(scope="module")
def tls_node(node_factory, database):
    node = node_factory(DELAYQ_AMQP_URL=amqps_url(), DELAYQ_AMQP_CA_FILE=CA)
    yield node
    delete_queue(f"delayq.results.{database.name}", amqp.parameters(amqps_url(), CA))


def test_tasks_fire_and_results_return_over_amqps(tls_node):
    topic = f"tls-{uuid.uuid4().hex[:6]}"
    with tls_node.client() as c:
        c.registerService(CallbackService(topic=topic, ttrMs=10_000))
    seen = []
    consumer = TaskConsumer(topic, lambda task: seen.append(task.task_id), results="amqp",
                            amqp_url=amqps_url(), amqp_ca_file=CA, cluster=tls_node.env["DELAYQ_CLUSTER"])
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    try:
        assert consumer.wait_ready(10)
        with tls_node.client() as c:
            task_id = c.submit(TaskSpec(topic=topic, delayMs=300, payload=b"over tls")).taskId
            wait_until(lambda: c.get(task_id).status == TaskStatus.FINISHED, 15, what="the task to finish")
        assert seen == [task_id]
    finally:
        consumer.stop()
        thread.join(5)
        delete_queue(f"delayq.{topic}", amqp.parameters(amqps_url(), CA))


def test_the_consumer_connects_and_reports_where_the_environment_says(tls_node, tmp_path, monkeypatch):
    """No connection argument: the URL (from the file DELAYQ_AMQP_URL_FILE names: TLS, vhost and
    user delayq), its CA and the cluster's results queue (DELAYQ_CLUSTER) come from the same
    variables the nodes read, as docs/consumers.md sets them."""
    topic = f"tls-{uuid.uuid4().hex[:6]}"
    with tls_node.client() as c:
        c.registerService(CallbackService(topic=topic, ttrMs=10_000))
    url_file = tmp_path / "amqp.url"
    url_file.write_text(amqps_url() + "\n")
    monkeypatch.delenv("DELAYQ_AMQP_URL", raising=False)
    monkeypatch.setenv("DELAYQ_AMQP_URL_FILE", str(url_file))
    monkeypatch.setenv("DELAYQ_AMQP_CA_FILE", CA)
    monkeypatch.setenv("DELAYQ_CLUSTER", tls_node.env["DELAYQ_CLUSTER"])
    seen = []
    consumer = TaskConsumer(topic, lambda task: seen.append(task.task_id), results="amqp")
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    try:
        assert consumer.wait_ready(10)
        with tls_node.client() as c:
            task_id = c.submit(TaskSpec(topic=topic, delayMs=300, payload=b"from the environment")).taskId
            wait_until(lambda: c.get(task_id).status == TaskStatus.FINISHED, 15, what="the task to finish")
        assert seen == [task_id]
    finally:
        consumer.stop()
        thread.join(5)
        delete_queue(f"delayq.{topic}", amqp.parameters(amqps_url(), CA))


def test_the_documented_consumer_reports_with_a_client_that_may_only_report(tls_node, clients, tmp_path,
                                                                             monkeypatch, caplog):
    """docs/consumers.md's example as its "Connecting" section runs it: RabbitMQ from
    DELAYQ_AMQP_URL_FILE, the token of a client granted only `report` on the topic, the cluster's
    name from DELAYQ_CLUSTER: the task finishes, and the helper never asks a node for the name
    (that takes `admin`)."""
    topic = f"tls-{uuid.uuid4().hex[:6]}"
    with tls_node.client() as c:
        c.registerService(CallbackService(topic=topic, ttrMs=10_000))
    token = clients.add(f"app-{uuid.uuid4().hex[:6]}", grants=(("report", topic),))
    assert token is not None
    url_file = tmp_path / "amqp.url"
    url_file.write_text(amqps_url() + "\n")
    monkeypatch.delenv("DELAYQ_AMQP_URL", raising=False)
    monkeypatch.setenv("DELAYQ_AMQP_URL_FILE", str(url_file))
    monkeypatch.setenv("DELAYQ_AMQP_CA_FILE", CA)
    monkeypatch.setenv("DELAYQ_CLUSTER", tls_node.env["DELAYQ_CLUSTER"])
    monkeypatch.setenv("DELAYQ_TOKEN", token)
    seen = []
    consumer = TaskConsumer(topic, lambda task: seen.append(task.task_id),
                            results=DelayqClient([tls_node.endpoint], timeout_s=5))
    thread = threading.Thread(target=consumer.run, daemon=True)
    with caplog.at_level(logging.WARNING, logger="delayq.client"):
        thread.start()
        try:
            assert consumer.wait_ready(10)
            with tls_node.client() as c:
                task_id = c.submit(TaskSpec(topic=topic, delayMs=300, payload=b"order 42")).taskId
                done = wait_until(lambda: (i := c.get(task_id)).status == TaskStatus.FINISHED and i, 15,
                                  what="the task to finish")
            assert seen == [task_id] and [(a.attempt, a.result) for a in done.attempts] == [(1, "SUCCESS")]
        finally:
            consumer.stop()
            thread.join(5)
            delete_queue(f"delayq.{topic}", amqp.parameters(amqps_url(), CA))
    assert "cluster's name" not in caplog.text and "Forbidden" not in caplog.text


def test_an_exchange_outside_delayqs_permissions_is_refused_at_registration(tls_node):
    with tls_node.client() as c, pytest.raises(ttypes.InvalidService) as e:
        c.registerService(CallbackService(topic=f"tls-{uuid.uuid4().hex[:6]}", exchange="billing.events"))
    assert e.value.field == "exchange"


def test_a_broker_certificate_from_another_ca_is_refused():
    with pytest.raises((pika.exceptions.AMQPConnectionError, ssl.SSLError)):
        pika.BlockingConnection(amqp.parameters(amqps_url(), str(security.ensure() / "ca.pem")))
