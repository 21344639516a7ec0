"""The outcomes of a publish, and the ledger of publishes the broker has not confirmed yet.

Every message handed to a publisher ends in exactly one outcome:
    CONFIRMED   the broker took responsibility for it (basic.ack)
    UNROUTABLE  returned: no queue is bound for its routing key (mandatory)
    NOT_SENT    it never went on the wire (not connected, channel closed first)
    VETOED      it never went on the wire: the batch's veto refused it just before the write
    FAILED      sent, but nacked, not confirmed in time, or the connection was lost before the
                confirm: it may or may not have reached a queue

Unconfirmed keeps what is on the wire by delivery tag, in publish order, and turns the broker's
answers (basic.ack / basic.nack, single or `multiple`, and basic.return before them) into Settled
values; it talks to nothing, so tests/unit/test_confirms.py drives it without a broker. Not
thread-safe: the publisher's thread alone uses it (delayq.nodes.amqp.publisher).
"""
from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Any, Callable

from delayq.nodes.amqp.frames import Outgoing

CONFIRMED, UNROUTABLE, NOT_SENT, FAILED, VETOED = "CONFIRMED", "UNROUTABLE", "NOT_SENT", "FAILED", "VETOED"

Outcome = Callable[[Any, str, str | None], None]        # on_outcome(ref, outcome, reason)


@dataclass(frozen=True, slots=True)
class Settled:
    """One message's outcome, to be told to its batch's handler."""
    message: Outgoing
    on_outcome: Outcome
    outcome: str
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class _OnWire:
    message: Outgoing
    sent_at: float          # monotonic seconds
    on_outcome: Outcome


class Unconfirmed:
    def __init__(self) -> None:
        self._next_tag = 0
        self._on_wire: collections.OrderedDict[int, _OnWire] = collections.OrderedDict()
        self._returned: set[str] = set()

    def __len__(self) -> int:
        return len(self._on_wire)

    def new_channel(self) -> None:
        """A channel in confirm mode numbers its deliveries from 1 again."""
        self._next_tag = 0

    def sent(self, message: Outgoing, at: float, on_outcome: Outcome) -> None:
        """The message's frames were written: it is delivery tag next_tag + 1 of the channel."""
        self._next_tag += 1
        self._on_wire[self._next_tag] = _OnWire(message, at, on_outcome)

    def returned(self, message_id: str) -> None:
        """basic.return: the broker routes the message nowhere; its confirm follows."""
        self._returned.add(message_id)

    def confirm(self, delivery_tag: int, multiple: bool, ack: bool) -> list[Settled]:
        """basic.ack (ack) or basic.nack of one tag, or of every tag up to it (multiple)."""
        if multiple:
            tags = []
            for tag in self._on_wire:         # in publish order: stop at the first one after
                if tag > delivery_tag:
                    break
                tags.append(tag)
        else:
            tags = [delivery_tag]
        settled = []
        for tag in tags:
            item = self._on_wire.pop(tag, None)
            if item is None:
                continue
            msg = item.message
            if msg.message_id in self._returned:
                self._returned.discard(msg.message_id)
                settled.append(Settled(msg, item.on_outcome, UNROUTABLE,
                                       f"no queue bound to {msg.exchange!r} for {msg.routing_key!r}"))
            elif ack:
                settled.append(Settled(msg, item.on_outcome, CONFIRMED))
            else:
                settled.append(Settled(msg, item.on_outcome, FAILED, "nacked by the broker"))
        return settled

    def oldest(self) -> float | None:
        """When the oldest unconfirmed message was written (monotonic seconds), if any."""
        return next(iter(self._on_wire.values())).sent_at if self._on_wire else None

    def lost(self, reason: str) -> list[Settled]:
        """The connection is gone: every unconfirmed message may or may not have reached a queue."""
        on_wire, self._on_wire = self._on_wire, collections.OrderedDict()
        self._returned.clear()
        return [Settled(w.message, w.on_outcome, FAILED, reason) for w in on_wire.values()]
