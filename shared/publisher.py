"""ConfirmedPublisher: persistent, mandatory publishes with pipelined publisher confirms.

    pub = ConfirmedPublisher(params, on_outcome=handle, max_in_flight=10_000)
    pub.start()
    pub.publish([Outgoing(exchange, routing_key, body, message_id, headers, ref=task)])
    ...
    pub.stop()

Threads: it owns one thread, which creates and runs a pika SelectConnection and its ioloop (a pika
connection is never shared between threads). `publish()` may be called from any thread: it hands
the batch over with `add_callback_threadsafe` and returns at once, blocking only while
`max_in_flight` publishes are unconfirmed.

Every message handed to `publish()` ends in exactly one `on_outcome(ref, outcome, reason)` call,
made on the publisher's thread (it must not block):
    CONFIRMED   the broker took responsibility for it (basic.ack)
    UNROUTABLE  returned: no queue is bound for its routing key (mandatory)
    NOT_SENT    it never went on the wire (not connected, channel closed first)
    FAILED      sent, but nacked, not confirmed in time, or the connection was lost before the
                confirm: it may or may not have reached a queue

States: CONNECTING -> READY -> (connection lost) -> CONNECTING ... ; stop() -> STOPPED.
While not READY, publish() fails messages at once (FAILED) instead of queueing them.
"""
from __future__ import annotations

import collections
import contextlib
import logging
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import pika
import pika.exceptions
from pika.adapters.select_connection import SelectConnection
from pika.adapters.utils.io_services_utils import _AsyncPlaintextTransport as _PlainTransport

from shared.topology import EXCHANGE_TYPE

log = logging.getLogger(__name__)

CONFIRMED, UNROUTABLE, NOT_SENT, FAILED = "CONFIRMED", "UNROUTABLE", "NOT_SENT", "FAILED"


@dataclass(frozen=True)
class Outgoing:
    exchange: str
    routing_key: str
    body: bytes
    message_id: str
    headers: dict[str, Any]
    ref: Any = field(compare=False)


Outcome = Callable[[Any, str, str | None], None]

# AMQP 0-9-1 frames of a persistent, mandatory basic.publish, written directly: pika's generic
# encoders (a Method, a Header and a Body object per message, a struct call per field) took a third
# of the publisher thread's time in a burst. The bytes are pika's own (a unit test compares them).
_FRAME_END = b"\xce"
_PUBLISH_METHOD = struct.pack(">IH", 0x003C0028, 0)          # basic.publish (60, 40), ticket 0
# Property flags: headers, delivery-mode, message-id, timestamp.
_PROPERTY_FLAGS = struct.pack(">H", (1 << 13) | (1 << 12) | (1 << 7) | (1 << 6))
_INT32 = range(-2 ** 31, 2 ** 31)


def _shortstr(text: str) -> bytes:
    raw = text.encode()
    if len(raw) > 255:
        raise ValueError(f"{text[:40]!r}... is over 255 bytes")
    return bytes((len(raw),)) + raw


def _table(headers: dict[str, Any]) -> bytes | None:
    """An AMQP field table as pika writes it; None when a value is of a type not handled here."""
    parts = []
    for key, value in headers.items():
        parts.append(_shortstr(key))
        if isinstance(value, str):
            raw = value.encode()
            parts.append(b"S" + struct.pack(">I", len(raw)) + raw)
        elif isinstance(value, bool):
            parts.append(b"t\x01" if value else b"t\x00")
        elif isinstance(value, int):
            parts.append(b"I" + struct.pack(">i", value) if value in _INT32 else b"l" + struct.pack(">q", value))
        else:
            return None
    body = b"".join(parts)
    return struct.pack(">I", len(body)) + body


def publish_frames(channel: int, msg: Outgoing, timestamp: int, body_max: int) -> list[bytes] | None:
    """The frames of msg published persistent and mandatory with these properties, or None when
    it holds something this encoder does not write (pika's basic_publish then does)."""
    table = _table(msg.headers)
    if table is None:
        return None
    method = _PUBLISH_METHOD + _shortstr(msg.exchange) + _shortstr(msg.routing_key) + b"\x01"
    header = (struct.pack(">HHQ", 60, 0, len(msg.body)) + _PROPERTY_FLAGS + table + b"\x02"
              + _shortstr(msg.message_id) + struct.pack(">Q", timestamp))
    frames = [struct.pack(">BHI", 1, channel, len(method)) + method + _FRAME_END,
              struct.pack(">BHI", 2, channel, len(header)) + header + _FRAME_END]
    body = msg.body
    for start in range(0, len(body), body_max):
        chunk = body[start:start + body_max]
        frames.append(struct.pack(">BHI", 3, channel, len(chunk)) + chunk + _FRAME_END)
    return frames


class _BatchingConnection(SelectConnection):
    """A SelectConnection that can hold back its outgoing frames and write them as one buffer.

    pika hands each frame (method, header, body: three per message) to the transport separately,
    and the transport sends each with its own `send()`. For a batch of publishes that is three
    system calls per message, each releasing and retaking the GIL the node's other threads are
    using. Inside `batched()` the frames are collected and written once, in the same order.
    It overrides pika's `_output_marshaled_frames`, which is not public API: setup.cfg keeps pika
    below 1.5 so that a release that changes it is taken on purpose."""

    _held: list[bytes] | None = None

    def _output_marshaled_frames(self, marshaled_frames) -> None:
        if self._held is None:
            super()._output_marshaled_frames(marshaled_frames)
            return
        for frame in marshaled_frames:
            self.bytes_sent += len(frame)
            self.frames_sent += 1
        self._held.extend(marshaled_frames)

    @contextlib.contextmanager
    def batched(self) -> Iterator[None]:
        self._held = []
        try:
            yield
        finally:
            held, self._held = self._held, None
            if held and self.is_open:
                self._emit_now(b"".join(held))

    def _emit_now(self, data: bytes) -> None:
        """Send at once what the socket takes. pika's transport only buffers a write and asks the
        poller to say when the socket is writable: two more system calls to change what it polls
        for and one more pass of the loop per batch, the bulk of a lone publish's cost. What the
        socket does not take (or a TLS socket's data) goes through pika's buffer as before."""
        transport = self._transport
        if isinstance(transport, _PlainTransport) and not transport.get_write_buffer_size():
            try:
                sent = transport._sock.send(data)
            except OSError:         # EAGAIN; or a broken socket, which pika's write path handles
                sent = 0
            if sent == len(data):
                return
            data = data[sent:]
        self._adapter_emit_data(data)


class ConfirmedPublisher:
    def __init__(self, params: pika.ConnectionParameters, on_outcome: Outcome, *, max_in_flight: int = 10_000,
                 confirm_timeout: float = 30.0, exchanges: tuple[str, ...] = (), reconnect_delay: float = 1.0):
        self._params = params
        self._on_outcome = on_outcome
        self._confirm_timeout = confirm_timeout
        self._exchanges = set(exchanges)
        self._reconnect_delay = reconnect_delay
        self._max_in_flight = max_in_flight
        self._space = threading.Condition()
        self._pending = 0                      # handed to publish() and not yet settled
        # Told the broker's words when it closes the channel (e.g. "no exchange 'x'"), on this thread.
        self.on_channel_closed: Callable[[str], None] = lambda reason: None
        # batches handed over, not yet on the wire, each with its still_valid check
        self._handed: dict[int, tuple[list[Outgoing], Callable[[], bool] | None]] = {}
        self._handoffs = 0
        self._lock = threading.Lock()          # guards _conn/_ready for the handoff from other threads
        self._conn: SelectConnection | None = None
        self._ready = False
        self._stopping = threading.Event()
        self._ready_event = threading.Event()
        self._thread: threading.Thread | None = None
        # Owned by the publisher thread only:
        self._channel = None
        self._next_tag = 0
        self._in_flight: collections.OrderedDict[int, tuple[Outgoing, float]] = collections.OrderedDict()
        self._returned: set[str] = set()

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

    def declare_exchange(self, name: str) -> None:
        """Make sure the exchange exists (durable topic) on this and every later connection."""
        with self._lock:
            if name in self._exchanges:
                return
            self._exchanges.add(name)
            if self._ready and self._conn is not None:
                self._conn.ioloop.add_callback_threadsafe(lambda: self._declare(name))

    def publish(self, batch: list[Outgoing], still_valid: Callable[[], bool] | None = None) -> None:
        """Send the batch; every message gets an outcome. still_valid, when given, is asked on the
        publisher thread just before the frames are written: False settles the batch NOT_SENT."""
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
                self._handed[key] = (batch, still_valid)
                try:
                    self._conn.ioloop.add_callback_threadsafe(lambda: self._publish_handed(key))
                    return
                except (pika.exceptions.AMQPError, RuntimeError, OSError, AttributeError):
                    del self._handed[key]
        self._settle_many([(msg, NOT_SENT, "broker not connected") for msg in batch])

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
            conn = _BatchingConnection(self._params, on_open_callback=self._on_open,
                                    on_open_error_callback=self._on_open_error,
                                    on_close_callback=self._on_closed)
            with self._lock:
                self._conn = conn
            try:
                conn.ioloop.start()
            except Exception:  # noqa: BLE001 - the loop must survive anything pika raises
                log.exception("publisher ioloop failed")
            self._lost("connection closed")
            if not self._stopping.wait(self._reconnect_delay):
                log.info("reconnecting to RabbitMQ")
        with self._lock:
            self._conn = None

    def _on_open(self, conn: SelectConnection) -> None:
        conn.channel(on_open_callback=self._on_channel)

    def _on_open_error(self, conn: SelectConnection, err: BaseException) -> None:
        log.warning("cannot connect to RabbitMQ: %s; retrying in %.1f s", err, self._reconnect_delay)
        conn.ioloop.stop()

    def _on_closed(self, conn: SelectConnection, reason: BaseException) -> None:
        if not self._stopping.is_set():
            log.warning("RabbitMQ connection lost: %s", reason)
        conn.ioloop.stop()

    def _on_channel(self, channel) -> None:
        self._channel = channel
        self._next_tag = 0
        channel.add_on_close_callback(self._on_channel_closed)
        channel.add_on_return_callback(self._on_return)
        channel.confirm_delivery(self._on_confirm, callback=lambda _frame: self._on_confirm_mode())

    def _on_confirm_mode(self) -> None:
        for name in sorted(self._exchanges):
            self._declare(name)
        with self._lock:
            self._ready = True
        self._ready_event.set()
        log.info("publisher connected to RabbitMQ (confirm mode)")
        self._conn.ioloop.call_later(1.0, self._check_timeouts)

    def _declare(self, name: str) -> None:
        if self._channel is not None and self._channel.is_open:
            self._channel.exchange_declare(exchange=name, exchange_type=EXCHANGE_TYPE, durable=True)

    def _on_channel_closed(self, channel, reason) -> None:
        if getattr(reason, "reply_code", None) == 200:      # our own close: shutting down
            log.debug("RabbitMQ channel closed: %s", reason)
        else:
            log.warning("RabbitMQ channel closed: %s", reason)
            self.on_channel_closed(str(reason))
        self._channel = None
        if self._conn is not None and self._conn.is_open:
            self._conn.close()

    def _publish_handed(self, key: int) -> None:
        with self._lock:
            batch, still_valid = self._handed.pop(key, (None, None))
        if batch is None:
            return
        if still_valid is not None and not still_valid():
            self._settle_many([(msg, NOT_SENT, "claim lease expired") for msg in batch])
            return
        self._publish_batch(batch)

    def _publish_batch(self, batch: list[Outgoing]) -> None:
        if self._conn is None:
            self._settle_many([(msg, NOT_SENT, "broker not connected") for msg in batch])
            return
        with self._conn.batched():
            self._publish_each(batch)

    def _publish_each(self, batch: list[Outgoing]) -> None:
        now = time.monotonic()
        stamp = int(time.time())
        conn = self._conn
        body_max = conn._body_max_length
        for i, msg in enumerate(batch):
            if self._channel is None or not self._channel.is_open:
                self._settle_many([(rest, NOT_SENT, "channel closed") for rest in batch[i:]])
                return
            try:
                frames = publish_frames(self._channel.channel_number, msg, stamp, body_max)
                if frames is not None:
                    conn._output_marshaled_frames(frames)
                else:
                    self._channel.basic_publish(
                        msg.exchange, msg.routing_key, msg.body, mandatory=True,
                        properties=pika.BasicProperties(delivery_mode=2, message_id=msg.message_id,
                                                        headers=msg.headers, timestamp=stamp))
            except (pika.exceptions.AMQPError, OSError, ValueError, struct.error) as e:
                self._settle_many([(rest, NOT_SENT, f"publish failed: {e}") for rest in batch[i:]])
                return
            self._next_tag += 1
            self._in_flight[self._next_tag] = (msg, now)

    def _on_return(self, channel, method, properties, body) -> None:
        if properties.message_id:
            self._returned.add(properties.message_id)

    def _on_confirm(self, frame) -> None:
        method = frame.method
        ack = isinstance(method, pika.spec.Basic.Ack)
        if method.multiple:
            tags = []
            for tag in self._in_flight:         # in publish order: stop at the first one after
                if tag > method.delivery_tag:
                    break
                tags.append(tag)
        else:
            tags = [method.delivery_tag]
        settled = []
        for tag in tags:
            item = self._in_flight.pop(tag, None)
            if item is None:
                continue
            msg = item[0]
            if msg.message_id in self._returned:
                self._returned.discard(msg.message_id)
                settled.append((msg, UNROUTABLE, f"no queue bound to {msg.exchange!r} for {msg.routing_key!r}"))
            elif ack:
                settled.append((msg, CONFIRMED, None))
            else:
                settled.append((msg, FAILED, "nacked by the broker"))
        self._settle_many(settled)

    def _check_timeouts(self) -> None:
        if self._conn is None or not self._conn.is_open:
            return
        if self._in_flight:
            oldest = next(iter(self._in_flight.values()))[1]
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
        for batch, _ in handed.values():
            self._settle_many([(msg, NOT_SENT, reason) for msg in batch])
        self._ready_event.clear()
        self._channel = None
        pending, self._in_flight = self._in_flight, collections.OrderedDict()
        self._returned.clear()
        self._settle_many([(msg, FAILED, reason) for msg, _ in pending.values()])

    def _close(self) -> None:
        if self._conn is not None and self._conn.is_open:
            self._conn.close()
        elif self._conn is not None:
            self._conn.ioloop.stop()

    def _settle_many(self, settled: list[tuple[Outgoing, str, str | None]]) -> None:
        if not settled:
            return
        with self._space:
            self._pending -= len(settled)
            self._space.notify_all()
        for msg, outcome, reason in settled:
            try:
                self._on_outcome(msg.ref, outcome, reason)
            except Exception:  # noqa: BLE001 - a failing callback must not kill the ioloop
                log.exception("publish outcome handler failed")
