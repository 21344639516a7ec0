"""TaskConsumer: the helper downstream applications use to consume a topic's tasks.

    def handle(task: Delivery) -> None:
        ...                                   # raise RetryLater to retry, any other error is FATAL
    TaskConsumer("order.cancel", handle, results=DelayqClient(["127.0.0.1:9090"])).run()
    TaskConsumer("order.cancel", handle, results="amqp").run()   # report over delayq.results.default

It declares the durable queue delayq.<topic> bound to the service's exchange and routing key,
consumes with a prefetch, calls the handler, reports SUCCESS / RETRY / FATAL for the attempt, and
acks after the report. A second delivery of an attempt it already finished (same message id) is
acked and dropped. `stop()` (thread-safe, also on SIGTERM through `run(install_signals=True)`)
finishes the message in hand and returns from `run()`.

Threads: `run()` owns the calling thread and its own pika connection.
"""
from __future__ import annotations

import collections
import json
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import pika
from thrift.Thrift import TException

from delayq import topology
from delayq.client import amqp
from delayq.client.gen.delayq_thrift.ttypes import ResultStatus

log = logging.getLogger(__name__)


class RetryLater(Exception):
    """Raised by a handler: the attempt failed, try again after the service's backoff."""


@dataclass(frozen=True)
class Delivery:
    task_id: str
    topic: str
    attempt: int
    due_at_ms: int
    dispatched_at_ms: int
    payload: bytes
    message_id: str
    key: str | None = None
    tags: tuple[str, ...] = ()
    traceparent: str | None = None


def _text(value) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


def delivery_from(properties: pika.BasicProperties, body: bytes) -> Delivery:
    h = properties.headers or {}
    tags = _text(h.get(topology.HEADER_TAGS))
    return Delivery(task_id=h[topology.HEADER_TASK_ID], topic=h[topology.HEADER_TOPIC],
                    attempt=int(h[topology.HEADER_ATTEMPT]), due_at_ms=int(h[topology.HEADER_DUE_AT]),
                    dispatched_at_ms=int(h[topology.HEADER_DISPATCHED_AT]), payload=body,
                    message_id=properties.message_id or "", key=_text(h.get(topology.HEADER_KEY)),
                    tags=tuple(tags.split(",")) if tags else (), traceparent=_text(h.get(topology.HEADER_TRACEPARENT)))


class TaskConsumer:
    def __init__(self, topic: str, handler: Callable[[Delivery], None], *, results=None,
                 amqp_url: str = "amqp://guest:guest@127.0.0.1:5672/%2F", exchange: str = topology.DEFAULT_EXCHANGE,
                 amqp_ca_file: str | None = None,
                 routing_key: str | None = None, prefetch: int = 32, remember: int = 10_000,
                 report_timeout_s: float = 5.0, cluster: str | None = None):
        self.topic = topic
        self._handler = handler
        # Where results go: a DelayqClient (Thrift reportResult), "amqp" (the delayq.results queue,
        # for consumers that speak only RabbitMQ), or None to only ack.
        self._results = results
        self._params = amqp.parameters(amqp_url, amqp_ca_file if amqp_ca_file is not None
                                       else os.environ.get("DELAYQ_AMQP_CA_FILE", ""))
        self._user = getattr(self._params.credentials, "username", None)
        self._params.socket_timeout = 5
        self._params.heartbeat = 30
        self._exchange = exchange
        self._routing_key = routing_key or topic
        self._prefetch = prefetch
        self._done: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._remember = remember
        self._report_timeout_s = report_timeout_s
        self._cluster = cluster            # whose results queue (None: asked of a node at start)
        self._conn: pika.BlockingConnection | None = None
        # pika's channels (untyped), opened by run().
        self._channel: Any = None
        self._results_channel: Any = None
        self._ready = threading.Event()

    def declare(self, channel) -> str:
        queue = topology.queue_name(self.topic)
        channel.exchange_declare(self._exchange, exchange_type=topology.EXCHANGE_TYPE, durable=True)
        assert self._conn is not None
        # A refused declaration closes the channel: go on with the one declare_queue returns.
        channel = amqp.declare_queue(self._conn, channel, queue)
        channel.queue_bind(queue, self._exchange, self._routing_key)
        self._channel = channel
        return queue

    def wait_ready(self, timeout: float) -> bool:
        return self._ready.wait(timeout)

    def run(self, install_signals: bool = False) -> None:
        if install_signals:
            signal.signal(signal.SIGTERM, lambda *_: self.stop())
            signal.signal(signal.SIGINT, lambda *_: self.stop())
        self._conn = pika.BlockingConnection(self._params)
        try:
            self._channel = self._conn.channel()
            queue = self.declare(self._channel)
            if self._results is not None:     # "amqp", or the fallback of a Thrift report
                self._cluster = self._cluster or self._cluster_name()
                self._results_channel = amqp.declare_queue(self._conn, self._conn.channel(),
                                                           topology.results_queue(self._cluster))
                self._results_channel.confirm_delivery()
            self._channel.basic_qos(prefetch_count=self._prefetch)
            self._channel.basic_consume(queue, self._on_message)
            self._ready.set()
            self._channel.start_consuming()
        finally:
            if self._conn.is_open:
                self._conn.close()

    def stop(self) -> None:
        conn, channel = self._conn, self._channel
        if conn is not None and channel is not None and conn.is_open:
            conn.add_callback_threadsafe(channel.stop_consuming)

    def _report(self, task: Delivery, status: int, message: str) -> None:
        """Report the result, retrying while the nodes cannot take it (unreachable, or their MySQL
        down). Past report_timeout_s it goes to the cluster's durable results queue instead (with
        the broker's confirm), which the nodes apply once they can: a result is not lost to an
        outage of delayq's own, and the consumer moves on."""
        deadline = time.monotonic() + self._report_timeout_s
        delay = 0.1
        if self._results == "amqp":
            self._report_amqp(task, status, message)
            return
        while True:
            try:
                self._results.reportResult(task.task_id, task.attempt, status, message)
                return
            except (TException, OSError) as e:
                if time.monotonic() + delay > deadline:
                    log.warning("could not report %s for %s to a node (%s): sent to %s instead",
                                ResultStatus._VALUES_TO_NAMES.get(status), task.message_id, e,
                                self._results_queue())
                    self._report_amqp(task, status, message)
                    return
                log.warning("reporting %s failed (%s); retrying in %.1f s", task.message_id, e, delay)
                assert self._conn is not None     # deliveries come only while run() holds it
                self._conn.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _results_queue(self) -> str:
        assert self._cluster is not None      # run() settles it before the first delivery
        return topology.results_queue(self._cluster)

    def _cluster_name(self) -> str:
        """Whose results queue: the cluster the Thrift client reaches (asked once), else "default"."""
        if self._results == "amqp":
            return "default"
        try:
            return self._results.cluster().cluster
        except (TException, OSError) as e:
            log.warning("cannot ask a node for its cluster's name (%s): results fall back to "
                        "delayq.results.default; pass cluster= to be sure", e)
            return "default"

    def _report_amqp(self, task: Delivery, status: int, message: str) -> None:
        body = json.dumps({"taskId": task.task_id, "attempt": task.attempt, "message": message,
                           "status": ResultStatus._VALUES_TO_NAMES[status]}).encode()
        # user_id: RabbitMQ vouches that it is this connection's user, whom the nodes check for `report`.
        self._results_channel.basic_publish("", self._results_queue(), body,
                                            properties=pika.BasicProperties(delivery_mode=2, user_id=self._user))

    def _on_message(self, channel, method, properties, body) -> None:
        mid = properties.message_id or ""
        if mid and mid in self._done:
            log.info("dropping duplicate delivery of %s", mid)
            channel.basic_ack(method.delivery_tag)
            return
        try:
            task = delivery_from(properties, body)
        except (KeyError, ValueError, TypeError):
            log.error("message %r lacks the delayq headers: dropped", mid)
            channel.basic_ack(method.delivery_tag)
            return
        status, message = ResultStatus.SUCCESS, ""
        try:
            self._handler(task)
        except RetryLater as e:
            status, message = ResultStatus.RETRY, str(e)
        except Exception as e:  # noqa: BLE001 - a handler's failure is reported, not fatal to the consumer
            log.exception("handler failed on %s", mid)
            status, message = ResultStatus.FATAL, f"{type(e).__name__}: {e}"
        if self._results is not None:
            self._report(task, status, message[:1024])
        channel.basic_ack(method.delivery_tag)
        self._done[mid] = None
        if len(self._done) > self._remember:
            self._done.popitem(last=False)
