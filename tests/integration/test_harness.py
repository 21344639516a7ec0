"""The test harness cleans up after itself on the real broker: a test database's results queues
are quorum queues (a Raft group each, kept running by RabbitMQ), and a suite that left them behind
would, run after run, leave the broker too busy to answer."""
from __future__ import annotations

import uuid

import pika
import pytest

from conftest import AMQP_URL, NodeFactory, broker_queues, fresh_database, sweep_queues, wait_until
from delayq import topology

pytestmark = pytest.mark.integration


def queue_exists(name: str) -> bool:
    conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    try:
        conn.channel().queue_declare(name, passive=True)
        return True
    except pika.exceptions.ChannelClosedByBroker as e:
        assert e.reply_code == 404, e
        return False
    finally:
        if conn.is_open:
            conn.close()


def test_a_finished_test_database_leaves_no_results_queue_on_the_broker(tmp_path):
    with fresh_database(2) as db:
        queues = (topology.results_queue(db.name), topology.parked_results_queue(db.name))
        factory = NodeFactory(db, tmp_path)
        try:
            factory()
            wait_until(lambda: all(queue_exists(q) for q in queues), 15, 0.1, what="the node's results queues")
        finally:
            factory.stop_all()
    assert [q for q in queues if queue_exists(q)] == []


def test_the_session_sweeps_the_topic_queues_tests_left_and_keeps_those_in_use():
    before = broker_queues()
    if before is None:
        pytest.skip("rabbitmqctl cannot be run here (another machine's broker, or not root)")
    left, used = f"delayq.sweep.{uuid.uuid4().hex[:8]}", f"delayq.sweep.{uuid.uuid4().hex[:8]}"
    conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    try:
        ch = conn.channel()
        for name in (left, used):
            ch.queue_declare(name, durable=True, arguments=topology.QUEUE_ARGUMENTS)
        ch.basic_consume(used, lambda *_: None)
        assert left in sweep_queues(before)
        assert not queue_exists(left) and queue_exists(used)
    finally:
        if conn.is_open:
            conn.channel().queue_delete(used)
            conn.close()
