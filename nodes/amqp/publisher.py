"""ConfirmedPublisher: persistent, mandatory publishes with pipelined publisher confirms.

    pub = ConfirmedPublisher(params, max_in_flight=10_000)
    pub.start()
    pub.publish([Outgoing(exchange, routing_key, body, message_id, headers, ref=task)], on_outcome=handle)
    ...
    pub.stop()

Threads: it owns one thread, which creates and runs a pika SelectConnection (one that writes a
batch with one system call: delayq.nodes.amqp.pikaio) and its ioloop (a pika connection is never
shared between threads). `publish()` may be called from any thread: it hands
the batch over with `add_callback_threadsafe` and returns at once, blocking only while
`max_in_flight` publishes are unconfirmed.

Every message handed to `publish()` ends in exactly one call of its batch's
`on_outcome(ref, outcome, reason)`, made on the publisher's thread (it must not block): each
caller (the dispatcher's recorder, the dead-letterer) hears of its own messages only. The
outcomes (CONFIRMED, UNROUTABLE, NOT_SENT, VETOED, FAILED) and the ledger of what awaits its
confirm: delayq.nodes.amqp.confirms.

States: CONNECTING -> READY -> (connection lost) -> CONNECTING ... ; stop() -> STOPPED.
While not READY, publish() settles messages at once, on the caller's thread, as NOT_SENT (they
never left the node) instead of queueing them.

Given the parameters of several brokers (the nodes of a RabbitMQ cluster), it connects to the first
and, after a failed connect or a lost connection, to the next one (wrapping): what was unconfirmed
on the lost connection is FAILED, and its callers dispatch it again through the next broker.
"""
from __future__ import annotations

import logging
import struct
import threading
import time
from typing import Callable, Sequence

import pika
import pika.exceptions

from delayq.nodes.amqp.confirms import NOT_SENT, VETOED, Outcome, Settled, Unconfirmed
from delayq.nodes.amqp.frames import Outgoing, publish_frames
from delayq.nodes.amqp.params import connect_error
from delayq.nodes.amqp.pikaio import BatchingConnection
from delayq.topology import EXCHANGE_TYPE

log = logging.getLogger(__name__)


class ConfirmedPublisher:
    def __init__(self, params: pika.ConnectionParameters | Sequence[pika.ConnectionParameters], *,
                 max_in_flight: int = 10_000,
                 confirm_timeout: float = 30.0, exchanges: tuple[str, ...] = (), reconnect_delay: float = 1.0,
                 on_channel_closed: Callable[[str], None] = lambda reason: None):
        self._brokers = [params] if isinstance(params, pika.ConnectionParameters) else list(params)
        self._broker = 0                        # index of the broker connected to, or tried next
        self._confirm_timeout = confirm_timeout
        self._exchanges = set(exchanges)
        self._reconnect_delay = reconnect_delay
        self._max_in_flight = max_in_flight
        self._space = threading.Condition()
        self._pending = 0                      # handed to publish() and not yet settled
        # Told the broker's words when it closes the channel (e.g. "no exchange 'x'"), on this thread.
        self._on_channel_lost = on_channel_closed
        # batches handed over, not yet on the wire, each with its outcome handler and veto
        self._handed: dict[int, tuple[list[Outgoing], Outcome, Callable[[], str | None] | None]] = {}
        self._handoffs = 0
        self._lock = threading.Lock()          # guards _conn/_ready for the handoff from other threads
        self._conn: BatchingConnection | None = None
        self._ready = False
        self._stopping = threading.Event()
        self._ready_event = threading.Event()
        self._thread: threading.Thread | None = None
        # Owned by the publisher thread only:
        self._channel = None
        self._unconfirmed = Unconfirmed()

    # ---- any thread ---------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="publisher", daemon=True)
        self._thread.start()

    def wait_ready(self, timeout: float) -> bool:
        return self._ready_event.wait(timeout)

    @property
    def ready(self) -> bool:
        return self._ready

    @property
    def in_flight(self) -> int:
        """Messages handed to publish() and not yet settled."""
        return self._pending

    def settle(self, timeout: float) -> bool:
        """Wait until everything handed to publish() has its outcome, at most `timeout` seconds
        (before stop(), so nothing is left unconfirmed). True when nothing is left."""
        with self._space:
            return self._space.wait_for(lambda: not self._pending, timeout)

    def publish(self, batch: list[Outgoing], on_outcome: Outcome, veto: Callable[[], str | None] | None = None) -> None:
        """Send the batch; every message gets an outcome, told to on_outcome. veto, when given, is asked on the
        publisher thread just before the frames are written: a reason it gives settles the batch
        VETOED with that reason."""
        if not batch:
            return
        with self._space:
            # A batch larger than the window waits for an empty window rather than forever.
            while self._pending and self._pending + len(batch) > self._max_in_flight \
                    and not self._stopping.is_set():
                self._space.wait(0.5)
            self._pending += len(batch)
        with self._lock:
            if self._ready and self._conn is not None:
                self._handoffs += 1
                key = self._handoffs
                self._handed[key] = (batch, on_outcome, veto)
                try:
                    self._conn.ioloop.add_callback_threadsafe(lambda: self._publish_handed(key))
                    return
                except (pika.exceptions.AMQPError, RuntimeError, OSError, AttributeError):
                    del self._handed[key]
        self._settle_all(batch, on_outcome, NOT_SENT, "broker not connected")

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        with self._lock:
            conn = self._conn
        if conn is not None:
            try:
                conn.ioloop.add_callback_threadsafe(self._close)
            except (RuntimeError, AttributeError, OSError):
                pass
        if self._thread is not None:
            self._thread.join(timeout)

    # ---- publisher thread ---------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopping.is_set():
            params = self._brokers[self._broker]
            conn = BatchingConnection(params, on_open_callback=self._on_open,
                                    on_open_error_callback=self._on_open_error,
                                    on_close_callback=self._on_closed)
            with self._lock:
                self._conn = conn
            try:
                conn.ioloop.start()
            except Exception:  # noqa: BLE001 - the loop must survive anything pika raises
                log.exception("publisher ioloop failed")
            self._lost("connection closed")
            # Whatever ended this connection, the next broker of the cluster is the likelier to answer.
            self._broker = (self._broker + 1) % len(self._brokers)
            if not self._stopping.wait(self._reconnect_delay if self._broker == 0 else 0.1):
                log.info("reconnecting to RabbitMQ at %s:%s", self._brokers[self._broker].host,
                         self._brokers[self._broker].port)
        with self._lock:
            self._conn = None

    def _on_open(self, conn: BatchingConnection) -> None:
        conn.channel(on_open_callback=self._on_channel)

    def _on_open_error(self, conn: BatchingConnection, err: BaseException) -> None:
        log.warning("cannot connect to RabbitMQ: %s; retrying in %.1f s", connect_error(err), self._reconnect_delay)
        conn.ioloop.stop()

    def _on_closed(self, conn: BatchingConnection, reason: BaseException) -> None:
        if not self._stopping.is_set():
            log.warning("RabbitMQ connection lost: %s", reason)
        conn.ioloop.stop()

    def _on_channel(self, channel) -> None:
        self._channel = channel
        self._unconfirmed.new_channel()
        channel.add_on_close_callback(self._on_channel_closed)
        channel.add_on_return_callback(self._on_return)
        channel.confirm_delivery(self._on_confirm, callback=lambda _frame: self._on_confirm_mode())

    def _on_confirm_mode(self) -> None:
        for name in sorted(self._exchanges):
            self._declare(name)
        with self._lock:
            self._ready = True
        self._ready_event.set()
        params = self._brokers[self._broker]
        log.info("publisher connected to RabbitMQ at %s:%s (confirm mode)", params.host, params.port)
        if self._conn is not None:
            self._conn.ioloop.call_later(1.0, self._check_timeouts)

    def _declare(self, name: str) -> None:
        if self._channel is not None and self._channel.is_open:
            self._channel.exchange_declare(exchange=name, exchange_type=EXCHANGE_TYPE, durable=True)

    def _on_channel_closed(self, channel, reason) -> None:
        if getattr(reason, "reply_code", None) == 200:      # our own close: shutting down
            log.debug("RabbitMQ channel closed: %s", reason)
        else:
            log.warning("RabbitMQ channel closed: %s", reason)
            self._on_channel_lost(str(reason))
        self._channel = None
        if self._conn is not None and self._conn.is_open:
            self._conn.close()

    def _publish_handed(self, key: int) -> None:
        with self._lock:
            handed = self._handed.pop(key, None)
        if handed is None:
            return
        batch, on_outcome, veto = handed
        refused = veto() if veto is not None else None
        if refused is not None:
            self._settle_all(batch, on_outcome, VETOED, refused)
            return
        if self._conn is None:
            self._settle_all(batch, on_outcome, NOT_SENT, "broker not connected")
            return
        with self._conn.batched():
            self._publish_each(batch, on_outcome)

    def _publish_each(self, batch: list[Outgoing], on_outcome: Outcome) -> None:
        now = time.monotonic()
        stamp = int(time.time())
        conn = self._conn
        if conn is None:
            self._settle_all(batch, on_outcome, NOT_SENT, "broker not connected")
            return
        body_max = conn.body_max
        for i, msg in enumerate(batch):
            if self._channel is None or not self._channel.is_open:
                self._settle_all(batch[i:], on_outcome, NOT_SENT, "channel closed")
                return
            try:
                frames = publish_frames(self._channel.channel_number, msg, stamp, body_max)
                if frames is not None:
                    conn.write_frames(frames)
                else:
                    self._channel.basic_publish(
                        msg.exchange, msg.routing_key, msg.body, mandatory=True,
                        properties=pika.BasicProperties(delivery_mode=2, message_id=msg.message_id,
                                                        headers=msg.headers, timestamp=stamp))
            except (pika.exceptions.AMQPError, OSError, ValueError, struct.error) as e:
                self._settle_all(batch[i:], on_outcome, NOT_SENT, f"publish failed: {e}")
                return
            self._unconfirmed.sent(msg, now, on_outcome)

    def _on_return(self, channel, method, properties, body) -> None:
        if properties.message_id:
            self._unconfirmed.returned(properties.message_id)

    def _on_confirm(self, frame) -> None:
        method = frame.method
        self._settle(self._unconfirmed.confirm(method.delivery_tag, bool(method.multiple),
                                               ack=isinstance(method, pika.spec.Basic.Ack)))

    def _check_timeouts(self) -> None:
        if self._conn is None or not self._conn.is_open:
            return
        oldest = self._unconfirmed.oldest()
        if oldest is not None:
            if time.monotonic() - oldest > self._confirm_timeout:
                log.warning("no confirm from RabbitMQ for %.0f s: reconnecting", self._confirm_timeout)
                self._conn.close()
                return
        self._conn.ioloop.call_later(1.0, self._check_timeouts)

    def _lost(self, reason: str) -> None:
        with self._lock:
            self._ready = False
            self._conn = None
            handed, self._handed = self._handed, {}
        for batch, on_outcome, _ in handed.values():
            self._settle_all(batch, on_outcome, NOT_SENT, reason)
        self._ready_event.clear()
        self._channel = None
        self._settle(self._unconfirmed.lost(reason))

    def _close(self) -> None:
        if self._conn is not None and self._conn.is_open:
            self._conn.close()
        elif self._conn is not None:
            self._conn.ioloop.stop()

    def _settle_all(self, batch: list[Outgoing], on_outcome: Outcome, outcome: str, reason: str) -> None:
        self._settle([Settled(msg, on_outcome, outcome, reason) for msg in batch])

    def _settle(self, settled: list[Settled]) -> None:
        if not settled:
            return
        with self._space:
            self._pending -= len(settled)
            self._space.notify_all()
        for s in settled:
            try:
                s.on_outcome(s.message.ref, s.outcome, s.reason)
            except Exception:  # noqa: BLE001 - a failing callback must not kill the ioloop
                log.exception("publish outcome handler failed")
