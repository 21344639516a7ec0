"""Unit tests for the two dispatch lanes in memory: which lane takes a topic's due tasks
(delayq.nodes.fairshare: prompt while on time, bulk with a backlog or once behind), and how far
ahead the prompt lane claims (delayq.nodes.claimlead). Driven by a fake clock, no sleeps."""
from __future__ import annotations

import pytest

from delayq.nodes.claimlead import RECENT, ClaimLead
from delayq.nodes.delayqueue import BULK, PROMPT, DelayQueue, Entry
from delayq.nodes.fairshare import BACKLOG, BEHIND_MS

pytestmark = pytest.mark.timeout(10)

NOW = 1_000_000
LEAD = 20


class Clock:
    def __init__(self, now: int = NOW):
        self.now = now

    def now_ms(self) -> int:
        return self.now

    def monotonic(self) -> float:
        return self.now / 1000.0


def burst(topic: str, n: int, due: int) -> list[Entry]:
    return [Entry(f"{topic}-{i}", 0, due, topic=topic) for i in range(n)]


def ids(entries: list[Entry]) -> list[str]:
    return [e.task_id for e in entries]


def test_the_first_tasks_of_a_burst_are_taken_by_the_prompt_lane_before_they_are_due():
    clock = Clock()
    q = DelayQueue(clock)
    q.offer_many(burst("a", 10_000, NOW + 10))
    assert q.take_due(1000, timeout=0, lane=BULK) == []
    first = q.take_due(100, timeout=0, lead_ms=LEAD, lane=PROMPT)
    assert len(first) == 100 and {e.topic for e in first} == {"a"}
    clock.now += 10                 # the rest is due: a backlog, the bulk lane's
    assert q.take_due(100, timeout=0, lead_ms=LEAD, lane=PROMPT) == []
    assert len(q.take_due(1000, timeout=0, lane=BULK)) == 1000


def test_a_topic_with_more_than_the_backlog_due_goes_to_the_bulk_lane_and_a_quiet_one_stays_prompt():
    clock = Clock()
    q = DelayQueue(clock)
    q.offer_many(burst("a", BACKLOG + 1, NOW))
    q.offer_many(burst("b", 3, NOW))
    prompt = q.take_due(1000, timeout=0, lead_ms=LEAD, lane=PROMPT)
    assert sorted(ids(prompt)) == ["b-0", "b-1", "b-2"]
    bulk = q.take_due(1000, timeout=0, lane=BULK)
    assert len(bulk) == BACKLOG + 1 and {e.topic for e in bulk} == {"a"}


def test_a_topic_with_a_backlog_no_larger_than_the_limit_stays_prompt():
    q = DelayQueue(Clock())
    q.offer_many(burst("a", BACKLOG, NOW))
    assert q.take_due(1000, timeout=0, lane=BULK) == []
    assert len(q.take_due(1000, timeout=0, lead_ms=LEAD, lane=PROMPT)) == BACKLOG


def test_a_topic_the_prompt_lane_fell_behind_on_goes_to_the_bulk_lane():
    clock = Clock()
    q = DelayQueue(clock)
    q.offer(Entry("late", 0, NOW - BEHIND_MS + 1, topic="a"))
    assert q.take_due(10, timeout=0, lane=BULK) == []
    clock.now += 1
    assert q.take_due(10, timeout=0, lead_ms=LEAD, lane=PROMPT) == []
    assert ids(q.take_due(10, timeout=0, lane=BULK)) == ["late"]


def test_the_two_lanes_take_every_task_once_and_each_topic_in_due_order():
    clock = Clock()
    q = DelayQueue(clock)
    q.offer_many([Entry(f"a-{i}", 0, NOW - 50 + i % 200, topic="a") for i in range(5_000)])
    q.offer_many([Entry(f"b-{i}", 0, NOW + 10 * i, topic="b") for i in range(50)])
    taken: list[Entry] = []
    for _ in range(400):
        for lane, lead in ((PROMPT, LEAD), (BULK, 0)):
            taken += q.take_due(100, timeout=0, lead_ms=lead, lane=lane)
        clock.now += 5
    assert len(taken) == 5_050 and len(set(ids(taken))) == 5_050
    for topic in ("a", "b"):
        dues = [e.at_ms for e in taken if e.topic == topic]
        assert dues == sorted(dues)


def test_the_claim_lead_is_the_configured_one_while_claims_are_quick():
    lead = ClaimLead(20, max_ms=250)
    assert lead.ms == 20
    for took in (2.0, 3.0, 12.0):
        lead.claimed(took)
    assert lead.ms == 20


def test_the_claim_lead_follows_the_slowest_recent_claim_up_to_its_limit_and_back():
    lead = ClaimLead(20, max_ms=250)
    lead.claimed(60.0)
    assert lead.ms == 90
    lead.claimed(400.0)
    assert lead.ms == 250
    for _ in range(RECENT):
        lead.claimed(2.0)
    assert lead.ms == 20
