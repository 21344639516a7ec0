"""RabbitMQ as the node's core publishes to it: a publisher whose broker answers when the test
says (`Outbox`: every message one outcome, to its batch's handler, as
delayq.nodes.amqp.publisher.ConfirmedPublisher), and the exchange guard's verdicts (`Exchanges`),
set by the test. delayq.testing.conformance holds them to RabbitMQ.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from delayq.nodes.amqp.confirms import CONFIRMED, FAILED, NOT_SENT, UNROUTABLE, VETOED, Outcome
from delayq.nodes.amqp.frames import Outgoing


@dataclass
class Sent:
    message: Outgoing
    on_outcome: Outcome


class Outbox:
    """A publisher that takes every batch at once and settles its messages when the test says:
    `answer(CONFIRMED)` for everything sent, or `answer(FAILED, ids)` for some."""

    def __init__(self) -> None:
        self.ready = True
        self.sent: list[Sent] = []
        self.vetoed: list[tuple[Outgoing, str]] = []

    def publish(self, batch: list[Outgoing], on_outcome: Outcome, veto: Callable[[], str | None] | None = None) -> None:
        # As the publisher: nothing to write asks no veto, and a batch with no connection to
        # write to never gets as far as asking it.
        if not batch:
            return
        if not self.ready:
            for msg in batch:
                on_outcome(msg.ref, NOT_SENT, "broker not connected")
            return
        why = veto() if veto is not None else None
        for msg in batch:
            if why is not None:
                self.vetoed.append((msg, why))
                on_outcome(msg.ref, VETOED, why)
            else:
                self.sent.append(Sent(msg, on_outcome))

    def answer(self, outcome: str = CONFIRMED, message_ids: Sequence[str] | None = None,
               reason: str | None = None) -> int:
        """Settle the messages sent (those with these message ids, or all) with one outcome."""
        chosen = [s for s in self.sent if message_ids is None or s.message.message_id in message_ids]
        self.sent = [s for s in self.sent if s not in chosen]
        for s in chosen:
            s.on_outcome(s.message.ref, outcome, reason or {FAILED: "nacked by the broker",
                                                            UNROUTABLE: "no queue bound"}.get(outcome))
        return len(chosen)

    @property
    def message_ids(self) -> list[str]:
        return [s.message.message_id for s in self.sent]


class Exchanges:
    """The exchange guard as the dispatcher asks it: why an exchange may not be used (None: it may)."""

    def __init__(self) -> None:
        self.bad: dict[str, str] = {}

    def verdict(self, exchange: str) -> str | None:
        return self.bad.get(exchange)

    def retry_in(self, exchange: str) -> float:
        return 1.0

    def unusable(self) -> dict[str, str]:
        return dict(self.bad)
