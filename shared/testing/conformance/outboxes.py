"""The broker an Outbox expectation publishes to: in memory (`FakeOutboxes`, on
delayq.testing.fakes.Outbox, whose broker confirms what it was sent when told) or RabbitMQ
(`RealOutboxes`, the production delayq.nodes.amqp.publisher.ConfirmedPublisher, with a queue of
its own bound to the routing key the expectations publish to).

Each gives a connected outbox and one that never connected, and says which messages reached the
queue.
"""
from __future__ import annotations

import threading
import uuid
from typing import Protocol

import pika

from delayq.nodes.amqp.confirms import CONFIRMED
from delayq.nodes.amqp.params import amqp_parameters
from delayq.nodes.amqp.publisher import ConfirmedPublisher
from delayq.nodes.dispatch.ports import Outbox
from delayq.testing.fakes import Outbox as FakeOutbox
from delayq.testing.process import wait_for
from delayq.testing.services import AMQP_URL

EXCHANGE = "delayq"
CONNECT_S = 10.0


class Outboxes(Protocol):
    @property
    def connected(self) -> Outbox: ...

    @property
    def unconnected(self) -> Outbox: ...

    @property
    def routing_key(self) -> str:
        """Messages to EXCHANGE with this key reach the queue `arrived` reads."""

    def broker_answers(self) -> None:
        """The broker settles what it was sent (RabbitMQ does so by itself)."""

    def arrived(self) -> list[str]:
        """The message ids that reached the queue so far, in order."""


class Told:
    """An on_outcome handler that keeps what it was told, from whichever thread tells it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._told: list[tuple[object, str, str | None]] = []

    def __call__(self, ref: object, outcome: str, reason: str | None) -> None:
        with self._lock:
            self._told.append((ref, outcome, reason))

    @property
    def outcomes(self) -> list[tuple[object, str, str | None]]:
        with self._lock:
            return list(self._told)

    def wait(self, count: int, timeout: float = 10.0) -> list[tuple[object, str, str | None]]:
        """The outcomes once `count` of them were told (TimeoutError after `timeout` s)."""
        return wait_for(lambda: len(self.outcomes) >= count and self.outcomes, timeout,
                        what=f"{count} outcomes (told {len(self.outcomes)})")


class FakeOutboxes:
    def __init__(self) -> None:
        self._connected, self._unconnected = FakeOutbox(), FakeOutbox()
        self._unconnected.ready = False
        self._arrived: list[str] = []

    @property
    def connected(self) -> FakeOutbox:
        return self._connected

    @property
    def unconnected(self) -> FakeOutbox:
        return self._unconnected

    @property
    def routing_key(self) -> str:
        return "conformance"

    def broker_answers(self) -> None:
        self._arrived += self._connected.message_ids
        self._connected.answer(CONFIRMED)

    def arrived(self) -> list[str]:
        return list(self._arrived)


class RealOutboxes:
    """A started ConfirmedPublisher (`start`, then `stop` when done) and one never started; a
    queue of its own per `bind` (its connection is the test thread's only)."""

    def __init__(self) -> None:
        params = amqp_parameters(AMQP_URL, 5000)
        self._connected = ConfirmedPublisher(params, exchanges=(EXCHANGE,))
        self._unconnected = ConfirmedPublisher(params, exchanges=(EXCHANGE,))
        self._routing_key = ""
        self._conn: pika.BlockingConnection | None = None
        self._queue = ""
        self._arrived: list[str] = []

    def start(self) -> None:
        self._connected.start()
        if not self._connected.wait_ready(CONNECT_S):
            raise RuntimeError("the publisher could not connect to RabbitMQ")

    def stop(self) -> None:
        self._connected.stop()

    def bind(self) -> None:
        """A new queue for the next expectation, bound to a routing key of its own."""
        self.unbind()
        self._routing_key, self._arrived = f"conformance.{uuid.uuid4().hex[:10]}", []
        self._conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
        channel = self._conn.channel()
        self._queue = channel.queue_declare("", exclusive=True).method.queue
        channel.queue_bind(self._queue, EXCHANGE, self._routing_key)

    def unbind(self) -> None:
        if self._conn is not None and self._conn.is_open:
            self._conn.close()          # the exclusive queue goes with it
        self._conn = None

    @property
    def connected(self) -> ConfirmedPublisher:
        return self._connected

    @property
    def unconnected(self) -> ConfirmedPublisher:
        return self._unconnected

    @property
    def routing_key(self) -> str:
        return self._routing_key

    def broker_answers(self) -> None:
        """RabbitMQ confirms on its own."""

    def arrived(self) -> list[str]:
        assert self._conn is not None, "bind() first"
        channel = self._conn.channel()
        while True:
            method, properties, _ = channel.basic_get(self._queue, auto_ack=True)
            if method is None:
                break
            self._arrived.append(properties.message_id)
        channel.close()
        return list(self._arrived)
