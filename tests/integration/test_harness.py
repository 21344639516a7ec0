"""The test harness cleans up after itself on the real broker: a test database's results queues
are quorum queues (a Raft group each, kept running by RabbitMQ), and a suite that left them behind
would, run after run, leave the broker too busy to answer."""
from __future__ import annotations

import pika
import pytest

from conftest import AMQP_URL, NodeFactory, fresh_database, wait_until
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
