"""Unit tests for delayq.nodes.amqp.confirms.Unconfirmed: the broker's answers to a channel's
publishes, turned into one outcome per message (pure, no broker)."""
from __future__ import annotations

import pytest

from delayq.nodes.amqp.confirms import CONFIRMED, FAILED, UNROUTABLE, Unconfirmed
from delayq.nodes.amqp.frames import Outgoing

pytestmark = pytest.mark.timeout(5)


def msg(n: int) -> Outgoing:
    return Outgoing("delayq", "t", b"", f"m{n}", {}, ref=n)


def on_wire(*ns: int) -> Unconfirmed:
    ledger = Unconfirmed()
    for n in ns:
        ledger.sent(msg(n), at=float(n), on_outcome=lambda ref, outcome, reason: None)
    return ledger


def outcomes(settled) -> list[tuple[object, str]]:
    return [(s.message.ref, s.outcome) for s in settled]


def test_a_multiple_ack_settles_every_tag_up_to_it_in_publish_order_and_no_later_one():
    ledger = on_wire(1, 2, 3)
    assert outcomes(ledger.confirm(2, multiple=True, ack=True)) == [(1, CONFIRMED), (2, CONFIRMED)]
    assert len(ledger) == 1 and ledger.oldest() == 3.0


def test_a_nack_is_a_failure_that_may_have_reached_a_queue():
    ledger = on_wire(1, 2)
    [settled] = ledger.confirm(2, multiple=False, ack=False)
    assert (settled.message.ref, settled.outcome, settled.reason) == (2, FAILED, "nacked by the broker")
    assert outcomes(ledger.confirm(1, multiple=False, ack=True)) == [(1, CONFIRMED)]


def test_a_returned_message_is_unroutable_when_its_confirm_comes():
    ledger = on_wire(1, 2)
    ledger.returned("m1")
    settled = ledger.confirm(2, multiple=True, ack=True)
    assert outcomes(settled) == [(1, UNROUTABLE), (2, CONFIRMED)]
    assert settled[0].reason == "no queue bound to 'delayq' for 't'"


def test_a_lost_connection_fails_everything_unconfirmed_and_a_new_channel_numbers_from_one():
    ledger = on_wire(1, 2)
    assert outcomes(ledger.lost("connection closed")) == [(1, FAILED), (2, FAILED)]
    assert len(ledger) == 0 and ledger.oldest() is None
    ledger.new_channel()
    ledger.sent(msg(3), at=3.0, on_outcome=lambda ref, outcome, reason: None)
    assert outcomes(ledger.confirm(1, multiple=False, ack=True)) == [(3, CONFIRMED)]


def test_a_confirm_of_an_unknown_tag_settles_nothing():
    assert on_wire(1).confirm(7, multiple=False, ack=True) == []
