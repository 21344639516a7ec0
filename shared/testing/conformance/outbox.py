"""What the recorder relies on from an outbox (delayq.nodes.dispatch.ports.Outbox), held by the
in-memory Outbox and by ConfirmedPublisher on RabbitMQ alike (docs/ARCHITECTURE.md, invariant 4):

- every message handed over is told exactly one outcome, with its own ref, to its batch's handler;
- a veto, asked once per batch just before the write, settles the whole batch VETOED with its
  reason and nothing of it reaches a queue;
- while not connected a batch is NOT_SENT (it never left the node), whatever a veto would say;
- an empty batch is no publish: no outcome, no veto asked.
"""
from __future__ import annotations

from delayq.nodes.amqp.confirms import CONFIRMED, NOT_SENT, VETOED
from delayq.nodes.amqp.frames import Outgoing
from delayq.testing.conformance.outboxes import EXCHANGE, Outboxes, Told


def messages(outboxes: Outboxes, *ids: str) -> list[Outgoing]:
    return [Outgoing(EXCHANGE, outboxes.routing_key, b"body", i, {"x-delayq-task-id": i}, ref=f"ref-{i}") for i in ids]


class Veto:
    """A veto that says `reason` and counts how often it was asked."""

    def __init__(self, reason: str | None) -> None:
        self.reason, self.asked = reason, 0

    def __call__(self) -> str | None:
        self.asked += 1
        return self.reason


class OutboxExpectations:
    """Run by a test class that provides the fixture `outboxes`, an Outboxes."""

    def test_each_message_is_told_one_outcome_with_its_own_ref(self, outboxes: Outboxes):
        told, veto = Told(), Veto(None)
        outboxes.connected.publish(messages(outboxes, "a:1", "b:1", "c:1"), told, veto)
        outboxes.broker_answers()
        assert sorted(told.wait(3)) == [("ref-a:1", CONFIRMED, None), ("ref-b:1", CONFIRMED, None),
                                        ("ref-c:1", CONFIRMED, None)]
        assert veto.asked == 1
        assert outboxes.arrived() == ["a:1", "b:1", "c:1"]

    def test_a_vetoed_batch_is_told_why_and_reaches_no_queue(self, outboxes: Outboxes):
        vetoed, told, veto = Told(), Told(), Veto("the claim's lease lapsed")
        outboxes.connected.publish(messages(outboxes, "a:1", "b:1"), vetoed, veto)
        outboxes.connected.publish(messages(outboxes, "c:1"), told)
        outboxes.broker_answers()
        assert sorted(vetoed.wait(2)) == [("ref-a:1", VETOED, "the claim's lease lapsed"),
                                          ("ref-b:1", VETOED, "the claim's lease lapsed")]
        assert told.wait(1) == [("ref-c:1", CONFIRMED, None)]
        assert veto.asked == 1
        assert outboxes.arrived() == ["c:1"]

    def test_a_batch_while_not_connected_is_not_sent_whatever_its_veto(self, outboxes: Outboxes):
        told, veto = Told(), Veto("the claim's lease lapsed")
        assert not outboxes.unconnected.ready
        outboxes.unconnected.publish(messages(outboxes, "a:1", "b:1"), told, veto)
        assert sorted(told.wait(2)) == [("ref-a:1", NOT_SENT, "broker not connected"),
                                        ("ref-b:1", NOT_SENT, "broker not connected")]
        assert veto.asked == 0

    def test_an_empty_batch_is_no_publish(self, outboxes: Outboxes):
        told, veto = Told(), Veto("the claim's lease lapsed")
        outboxes.connected.publish([], told, veto)
        outboxes.connected.publish(messages(outboxes, "a:1"), told)      # after it, in order
        outboxes.broker_answers()
        assert told.wait(1) == [("ref-a:1", CONFIRMED, None)]
        assert veto.asked == 0
