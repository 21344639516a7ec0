"""Delivery: one attempt of a task as the consumer helper hands it to a handler, read from the
message's headers (delayq.topology names them), with the attempt's state the heartbeats share
(delayq.client.heartbeats.AttemptState)."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

import pika

from delayq import topology
from delayq.client.heartbeats import AttemptState


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
    ttr_ms: int | None = None          # the attempt's time-to-run (None from nodes that do not send it)
    state: AttemptState = field(default_factory=AttemptState, repr=False, compare=False)

    @property
    def cancelled(self) -> threading.Event:
        """Set when the handler should stop: the task was cancelled, the attempt is over for delayq,
        or the helper could not heartbeat (see `cancelled_why`)."""
        return self.state.cancelled

    @property
    def cancelled_why(self) -> str | None:
        """"cancelled", "stale" or "heartbeats failed"; None while not cancelled."""
        return self.state.why

    def set_progress(self, progress: bytes) -> None:
        """Progress (up to 1024 bytes) sent with the next heartbeat; `get` shows it."""
        self.state.set_progress(progress)


def _text(value) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


def delivery_from(properties: pika.BasicProperties, body: bytes) -> Delivery:
    h = properties.headers or {}
    tags = _text(h.get(topology.HEADER_TAGS))
    ttr = h.get(topology.HEADER_TTR)
    return Delivery(task_id=h[topology.HEADER_TASK_ID], topic=h[topology.HEADER_TOPIC],
                    attempt=int(h[topology.HEADER_ATTEMPT]), due_at_ms=int(h[topology.HEADER_DUE_AT]),
                    dispatched_at_ms=int(h[topology.HEADER_DISPATCHED_AT]), payload=body,
                    message_id=properties.message_id or "", key=_text(h.get(topology.HEADER_KEY)),
                    tags=tuple(tags.split(",")) if tags else (), traceparent=_text(h.get(topology.HEADER_TRACEPARENT)),
                    ttr_ms=None if ttr is None else int(ttr))
