"""TaskConsumer: the helper downstream applications use to consume a topic's tasks.

    def handle(task: Delivery) -> None:
        ...                                   # raise RetryLater to retry, any other error is FATAL
        if task.cancelled.is_set(): ...       # long work: stop when delayq says so
    TaskConsumer("order.cancel", handle, results=DelayqClient(["127.0.0.1:9090"])).run()
    TaskConsumer("order.cancel", handle, results="amqp").run()   # report over delayq.results.<cluster>

It connects where the environment says, as the nodes read it (DELAYQ_AMQP_URL or
DELAYQ_AMQP_URL_FILE, DELAYQ_AMQP_CA_FILE, DELAYQ_CLUSTER: delayq.client.consumersettings) unless
given as arguments, declares the durable queue delayq.<topic> bound to the service's exchange and
routing key, consumes with a prefetch, calls the handler, reports SUCCESS / RETRY / FATAL for the
attempt, and acks after the report. A second delivery of an attempt it already finished (same
message id) is acked and dropped. `stop()` (thread-safe, also on SIGTERM through
`run(install_signals=True)`) finishes the message in hand and returns from `run()`.

Long tasks (docs/consumers.md): with a DelayqClient for `results`, a handler still running at half
its attempt's time-to-run is kept alive by heartbeats (`touch`, from a twin of that client;
delayq.client.heartbeats), and `task.set_progress(b"...")` goes with the next one. The handler is
told through `task.cancelled` (a threading.Event; `task.cancelled_why` says why) when delayq says
the task was cancelled, or that its attempt is over (timed out, ended), or when three heartbeats
in a row failed. Python cannot stop a thread from outside: the handler must look at the event
itself. A handler that returns after it was told the task was cancelled is taken to have
stopped: RETRY is reported, not SUCCESS, so the task ends CANCELLED; one that returned before the
helper was told, or after its attempt was over (its SUCCESS settles a task waiting to go again),
reports SUCCESS.

After three failed heartbeats the attempt is given up: neither reported nor acked; once
its handler returns, `run()` closes the connection (the broker hands the consumer's unacked
messages to others) and raises HeartbeatsLost, as ATF's executor stops itself: delayq will
dispatch the task again, and this process must not run it meanwhile.

A connection RabbitMQ closes or loses is opened again, after 0.5 s doubling to 15 s, for up to
`reconnect_for_s` (120 s) without one succeeding; past that `run()` raises the last error.

Threads: `run()` owns the calling thread and its own pika connection; each handler runs on a
thread of its own, started and joined by `run()` (so that the connection and the heartbeats go on
meanwhile).
"""
from __future__ import annotations

import collections
import logging
import os
import signal
import threading
import time
import uuid
from typing import Any, Callable

import pika
import pika.exceptions

from delayq import topology
from delayq.client import amqp
from delayq.client.consumersettings import ConsumerSettings
from delayq.client.delivery import Delivery, delivery_from
from delayq.client.gen.delayq_thrift.ttypes import ResultStatus
from delayq.client.heartbeats import Heartbeat
from delayq.client.reporting import Reporter

log = logging.getLogger(__name__)

# The connection is gone (closed by the broker, lost, or used after either): open another.
CONNECTION_LOST = (pika.exceptions.AMQPConnectionError, pika.exceptions.ConnectionWrongStateError,
                   pika.exceptions.ChannelWrongStateError)
_PUMP_S = 1.0        # how often the connection is served while a handler runs (AMQP heartbeats)


class RetryLater(Exception):
    """Raised by a handler: the attempt failed, try again after the service's backoff."""


class HeartbeatsLost(Exception):
    """run() stopped: three heartbeats of an attempt failed in a row (the attempt was given up)."""


# Why the helper told a handler to stop, for which a normal return is reported RETRY, not SUCCESS:
# the documented handler returns when told, its work abandoned, and after a cancel RETRY ends the
# task CANCELLED (any end but SUCCESS does). Not after a stale answer (the attempt timed out and the
# task waits to go again): most handlers never look at `cancelled`, and their SUCCESS then settles
# the task, where a RETRY would have it run again.
STOPPED = {"cancelled": "the task was cancelled while it ran"}


class _Run:
    """One handler call on a thread of its own: its outcome once `done` is set.

    A handler that returns normally reports SUCCESS, unless the helper had told it to stop
    (STOPPED) before it returned: then RETRY, saying so. A handler that returned before the
    helper was told keeps its SUCCESS (AttemptState orders the two)."""

    def __init__(self, handler: Callable[[Delivery], None], task: Delivery):
        self.done = threading.Event()
        self.status, self.message = ResultStatus.SUCCESS, ""
        self._handler, self._task = handler, task
        self.thread = threading.Thread(target=self._call, name=f"delayq-handler-{task.message_id}", daemon=True)

    def _call(self) -> None:
        try:
            self._handler(self._task)
            why = self._task.state.returned()
            if why in STOPPED:
                self.status = ResultStatus.RETRY
                self.message = f"stopped: the handler returned after it was told {STOPPED[why]}"
        except RetryLater as e:
            self.status, self.message = ResultStatus.RETRY, str(e)
        except Exception as e:  # noqa: BLE001 - a handler's failure is reported, not fatal to the consumer
            log.exception("handler failed on %s", self._task.message_id)
            self.status, self.message = ResultStatus.FATAL, f"{type(e).__name__}: {e}"
        finally:
            self.done.set()


class TaskConsumer:
    def __init__(self, topic: str, handler: Callable[[Delivery], None], *, results=None,
                 amqp_url: str | None = None, exchange: str = topology.DEFAULT_EXCHANGE,
                 amqp_ca_file: str | None = None,
                 routing_key: str | None = None, prefetch: int = 32, remember: int = 10_000,
                 report_timeout_s: float = 5.0, cluster: str | None = None, heartbeats=None,
                 reconnect_for_s: float = 120.0, clock: Callable[[], float] = time.monotonic,
                 settings: ConsumerSettings | None = None):
        """amqp_url, amqp_ca_file, cluster: None takes them from `settings` (default: read from the
        environment, delayq.client.consumersettings). heartbeats: the client that touches running
        attempts (default: a twin of a DelayqClient `results`; none with "amqp" or None: only
        Thrift answers whether to go on). clock: the monotonic clock heartbeats are timed by (tests
        drive it)."""
        self.topic = topic
        self._handler = handler
        twin = getattr(results, "twin", None)
        self._beats = heartbeats if heartbeats is not None else (twin() if callable(twin) else None)
        self.settings = (settings or ConsumerSettings.from_env()).given(amqp_url, amqp_ca_file, cluster)
        self._params = amqp.parameters(self.settings.amqp_url, self.settings.amqp_ca_file)
        # Where results go: a DelayqClient (Thrift reportResult), "amqp" (the delayq.results queue,
        # for consumers that speak only RabbitMQ), or None to only ack.
        self._reporter = None if results is None else Reporter(
            results, getattr(self._params.credentials, "username", None), report_timeout_s=report_timeout_s,
            cluster=self.settings.cluster)
        self._params.socket_timeout = 5
        self._params.heartbeat = 30
        # How RabbitMQ lists the connection (rabbitmqctl list_connections client_properties).
        self.connection_name = f"delayq-consumer {topic} {os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._params.client_properties = {"connection_name": self.connection_name}
        self._exchange = exchange
        self._routing_key = routing_key or topic
        self._prefetch = prefetch
        self._done: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._remember = remember
        self._reconnect_for_s = reconnect_for_s
        self._clock = clock
        self._conn: pika.BlockingConnection | None = None
        # pika's channels (untyped), opened by run().
        self._channel: Any = None
        self._ready = threading.Event()
        self._stopping = threading.Event()
        self.connections = 0               # opened so far (a reconnect adds one)

    def declare(self, channel) -> str:
        queue = topology.queue_name(self.topic)
        assert self._conn is not None
        # A refused declaration closes the channel: go on with the one each returns.
        channel = amqp.declare_exchange(self._conn, channel, self._exchange)
        channel = amqp.declare_queue(self._conn, channel, queue)
        channel.queue_bind(queue, self._exchange, self._routing_key)
        self._channel = channel
        return queue

    def wait_ready(self, timeout: float) -> bool:
        """Until the consumer is consuming (again, after a reconnect)."""
        return self._ready.wait(timeout)

    def run(self, install_signals: bool = False) -> None:
        if install_signals:
            signal.signal(signal.SIGTERM, lambda *_: self.stop())
            signal.signal(signal.SIGINT, lambda *_: self.stop())
        delay, lost_since = 0.5, 0.0
        try:
            while not self._stopping.is_set():
                try:
                    self._consume()
                    return
                except CONNECTION_LOST as e:
                    if self._stopping.is_set():
                        return
                    now = time.monotonic()
                    if self._ready.is_set() or not lost_since:
                        delay, lost_since = 0.5, now        # it was consuming (or never tried): a fresh loss
                    self._ready.clear()
                    if now - lost_since + delay > self._reconnect_for_s:
                        log.error("no connection to RabbitMQ for %.0f s: giving up (%s)", now - lost_since, e)
                        raise
                    log.warning("RabbitMQ connection lost or refused (%s): connecting again in %.1f s", e, delay)
                    self._stopping.wait(delay)
                    delay = min(delay * 2, 15.0)
        finally:
            self._ready.clear()

    def _consume(self) -> None:
        """One connection: consume until stop() (returns) or its loss (raises)."""
        self._conn = conn = pika.BlockingConnection(self._params)
        self.connections += 1
        try:
            self._channel = conn.channel()
            queue = self.declare(self._channel)
            if self._reporter is not None:
                self._reporter.open(conn)
            self._channel.basic_qos(prefetch_count=self._prefetch)
            self._channel.basic_consume(queue, self._on_message)
            p = self._params
            log.info("consuming %s on %s://%s:%d, vhost %s, as %s", queue, "amqps" if p.ssl_options else "amqp",
                     p.host, p.port, p.virtual_host, getattr(p.credentials, "username", "?"))
            self._ready.set()
            while not self._stopping.is_set():
                conn.process_data_events(time_limit=0.2)
        finally:
            if conn.is_open:
                try:
                    conn.close()
                except CONNECTION_LOST:
                    pass

    def stop(self) -> None:
        """Thread-safe: finish the message in hand, then return from run()."""
        self._stopping.set()

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
        run, beat, lost = self._handle(task)
        if beat is not None and beat.lost:
            raise HeartbeatsLost(f"{task.task_id} attempt {task.attempt}: {beat.failures} heartbeats failed in a row")
        if self._reporter is not None:
            self._reporter.report(task.task_id, task.attempt, task.message_id, run.status, run.message[:1024])
        self._done[mid] = None
        if len(self._done) > self._remember:
            self._done.popitem(last=False)
        if lost is not None:
            raise lost                        # reported; the broker redelivers it, and it is dropped then
        channel.basic_ack(method.delivery_tag)

    def _handle(self, task: Delivery) -> tuple[_Run, Heartbeat | None, Exception | None]:
        """Run the handler on its own thread until it returns, heartbeating meanwhile and serving
        the connection (a loss of it is returned, not raised: the handler's result still counts)."""
        run = _Run(self._handler, task)
        started = self._clock()
        beat = None
        if self._beats is not None and task.ttr_ms:
            waited = max(0, int(time.time() * 1000) - task.dispatched_at_ms)   # on two clocks: a guess
            beat = Heartbeat(task.task_id, task.attempt, task.ttr_ms, self._beats.touch, task.state, started, waited)
        lost: Exception | None = None
        run.thread.start()
        while True:
            now = self._clock()
            wait = _PUMP_S if beat is None or beat.next_at is None else min(_PUMP_S, max(0.0, beat.next_at - now))
            if run.done.wait(wait):
                break
            if beat is not None:
                beat.beat(self._clock())
            if lost is None and self._conn is not None:
                try:
                    self._conn.process_data_events(0)      # AMQP heartbeats; no delivery is dispatched in here
                except CONNECTION_LOST as e:
                    lost = e
        run.thread.join()
        return run, beat, lost
