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


def _topic(node) -> str:
    topic = f"tls-{uuid.uuid4().hex[:6]}"
    with node.client() as c:
        c.registerService(CallbackService(topic=topic, ttrMs=10_000))
    return topic


def _finishes(node, topic: str, consumer: TaskConsumer, seen: list[str], payload: bytes) -> ttypes.TaskInfo:
    """Runs the consumer while a task of the topic is submitted; the task as `get` shows it once
    FINISHED, after the consumer's handler saw it and nothing else."""
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    try:
        assert consumer.wait_ready(10)
        with node.client() as c:
            task_id = c.submit(TaskSpec(topic=topic, delayMs=300, payload=payload)).taskId
            done = wait_until(lambda: (i := c.get(task_id)).status == TaskStatus.FINISHED and i, 15,
                              what="the task to finish")
        assert seen == [task_id]
        return done
    finally:
        consumer.stop()
        thread.join(5)
        delete_queue(f"delayq.{topic}", amqp.parameters(amqps_url(), CA))


def _from_the_environment(node, tmp_path, monkeypatch) -> None:
    """RabbitMQ's URL from the file DELAYQ_AMQP_URL_FILE names, its CA and the cluster's name, as
    docs/consumers.md sets them."""
    url_file = tmp_path / "amqp.url"
    url_file.write_text(amqps_url() + "\n")
    monkeypatch.delenv("DELAYQ_AMQP_URL", raising=False)
    monkeypatch.setenv("DELAYQ_AMQP_URL_FILE", str(url_file))
    monkeypatch.setenv("DELAYQ_AMQP_CA_FILE", CA)
    monkeypatch.setenv("DELAYQ_CLUSTER", node.env["DELAYQ_CLUSTER"])


def test_tasks_fire_and_results_return_over_amqps(tls_node):
    topic = _topic(tls_node)
    seen: list[str] = []
    consumer = TaskConsumer(topic, lambda task: seen.append(task.task_id), results="amqp",
                            amqp_url=amqps_url(), amqp_ca_file=CA, cluster=tls_node.env["DELAYQ_CLUSTER"])
    _finishes(tls_node, topic, consumer, seen, b"over tls")


def test_the_consumer_connects_and_reports_where_the_environment_says(tls_node, tmp_path, monkeypatch):
    """No connection argument: the URL (TLS, vhost and user delayq), its CA and the cluster's
    results queue come from the same variables the nodes read."""
    topic = _topic(tls_node)
    _from_the_environment(tls_node, tmp_path, monkeypatch)
    seen: list[str] = []
    consumer = TaskConsumer(topic, lambda task: seen.append(task.task_id), results="amqp")
    _finishes(tls_node, topic, consumer, seen, b"from the environment")


def test_the_documented_consumer_reports_with_a_client_that_may_only_report(tls_node, clients, tmp_path,
                                                                             monkeypatch, caplog):
    """docs/consumers.md's example as its "Connecting" section runs it: RabbitMQ from
    DELAYQ_AMQP_URL_FILE, the token of a client granted only `report` on the topic, the cluster's
    name from DELAYQ_CLUSTER: the task finishes, and the helper never asks a node for the name
    (that takes `admin`)."""
    topic = _topic(tls_node)
    token = clients.add(f"app-{uuid.uuid4().hex[:6]}", grants=(("report", topic),))
    assert token is not None
    _from_the_environment(tls_node, tmp_path, monkeypatch)
    monkeypatch.setenv("DELAYQ_TOKEN", token)
    seen: list[str] = []
    consumer = TaskConsumer(topic, lambda task: seen.append(task.task_id),
                            results=DelayqClient([tls_node.endpoint], timeout_s=5))
    with caplog.at_level(logging.WARNING, logger="delayq.client"):
        done = _finishes(tls_node, topic, consumer, seen, b"order 42")
    assert [(a.attempt, a.result) for a in done.attempts] == [(1, "SUCCESS")]
    assert "cluster's name" not in caplog.text and "Forbidden" not in caplog.text


def test_an_exchange_outside_delayqs_permissions_is_refused_at_registration(tls_node):
    with tls_node.client() as c, pytest.raises(ttypes.InvalidService) as e:
        c.registerService(CallbackService(topic=f"tls-{uuid.uuid4().hex[:6]}", exchange="billing.events"))
    assert e.value.field == "exchange"


def test_a_broker_certificate_from_another_ca_is_refused():
    with pytest.raises((pika.exceptions.AMQPConnectionError, ssl.SSLError)):
        pika.BlockingConnection(amqp.parameters(amqps_url(), str(security.ensure() / "ca.pem")))
