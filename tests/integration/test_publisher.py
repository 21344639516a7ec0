"""ConfirmedPublisher against the real RabbitMQ: what it hands the socket itself, and what it leaves
to pika's buffer when the socket takes only part of a batch."""
from __future__ import annotations

import threading
import uuid

import pytest

from delayq.nodes.amqp.frames import Outgoing
from delayq.nodes.amqp.confirms import CONFIRMED
from delayq.nodes.amqp.publisher import ConfirmedPublisher
from delayq.nodes.amqp.params import amqp_parameters
from tests.conftest import AMQP_URL, Collector, wait_until


@pytest.fixture
def route():
    key = f"pub.{uuid.uuid4().hex[:10]}"
    collector = Collector("delayq", key)
    yield key, collector
    collector.close()


@pytest.fixture
def publisher():
    outcomes: list[tuple[str, str]] = []
    lock = threading.Lock()

    def on_outcome(ref, outcome, _reason):
        with lock:
            outcomes.append((ref, outcome))

    pub = ConfirmedPublisher(amqp_parameters(AMQP_URL, 5000), exchanges=("delayq",))
    pub.start()
    assert pub.wait_ready(10), "publisher could not connect to RabbitMQ"
    yield (lambda batch: pub.publish(batch, on_outcome)), outcomes
    pub.stop()


def _messages(key: str, count: int, size: int, prefix: str) -> list[Outgoing]:
    return [Outgoing("delayq", key, f"{prefix}{i:06d}".encode().ljust(size, b"."), f"{prefix}{i}", {},
                     ref=f"{prefix}{i}") for i in range(count)]


def test_lone_publishes_are_each_confirmed_and_delivered(route, publisher):
    key, collector = route
    publish, outcomes = publisher
    sent = _messages(key, 50, 100, "one")
    for msg in sent:
        publish([msg])
    wait_until(lambda: len(outcomes) == 50, 20, what="50 outcomes")
    assert sorted(outcomes) == sorted((m.ref, CONFIRMED) for m in sent)
    got = collector.wait_for(50, 20)
    assert [m.body for m in got] == [m.body for m in sent]


def test_a_batch_larger_than_the_socket_takes_at_once_arrives_whole_and_in_order(route, publisher):
    key, collector = route
    publish, outcomes = publisher
    # 24 MB in one hand-over: the socket takes a part, pika's buffer sends the rest.
    sent = _messages(key, 400, 60_000, "big")
    publish(sent)
    after = _messages(key, 3, 100, "after")     # queued behind the buffered rest, not ahead of it
    publish(after)
    wait_until(lambda: len(outcomes) == 403, 60, what="403 outcomes")
    assert {o for _, o in outcomes} == {CONFIRMED}
    got = collector.wait_for(403, 60)
    assert [m.body for m in got] == [m.body for m in sent + after]
