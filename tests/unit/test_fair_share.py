"""Unit tests for fair share and flow control in memory: the DelayQueue's round robin over topics,
its gate (delayq.nodes.memory.flow.Flow: rates split by shard share, in-flight room), paused topics, and
which dispatch lane takes a topic's tasks (prompt while on time, bulk with a backlog or once
behind). Driven by fake clocks, no sleeps."""
from __future__ import annotations

import collections

import pytest

from delayq.nodes.memory.delayqueue import BULK, PROMPT, QUANTUM, DelayQueue, Entry, Open
from delayq.nodes.memory.fairshare import BACKLOG, BEHIND_MS
from delayq.nodes.memory.flow import Bucket, Flow
from delayq.nodes.cluster.ownership import Ownership
from delayq.store.controls import Controls
from delayq.testing.fakes import Services

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


def entries(topic: str, n: int, due: int = NOW, start: int = 0) -> list[Entry]:
    return [Entry(f"{topic}-{i}", 0, due - i % 3, topic=topic) for i in range(start, start + n)]


def test_a_topic_with_one_task_due_is_served_in_the_first_take_beside_a_burst():
    q = DelayQueue(Clock())
    q.offer_many(entries("a", 10_000))
    q.offer(Entry("b-0", 0, NOW, topic="b"))
    first = q.take_due(500, timeout=0)
    assert len(first) == 500
    assert "b-0" in [e.task_id for e in first]


class HeavyWeighsThree(Open):
    """No limits; the topic "heavy" weighs 3, every other 1."""
    def weight(self, topic):
        return {"heavy": 3}.get(topic, 1)


def test_topics_with_tasks_due_share_each_take_in_proportion_to_their_weights():
    q = DelayQueue(Clock(), gate=HeavyWeighsThree())
    for topic in ("heavy", "light", "other"):
        q.offer_many(entries(topic, 5_000))
    counts = collections.Counter()
    for _ in range(10):
        counts.update(e.topic for e in q.take_due(500, timeout=0))
    assert sum(counts.values()) == 5_000
    assert counts["light"] == counts["other"]
    assert 2.9 <= counts["heavy"] / counts["light"] <= 3.1


@pytest.mark.parametrize("take", [100, 500])
def test_weights_hold_when_takes_cut_turns_short(take):
    q = DelayQueue(Clock(), gate=HeavyWeighsThree())
    for topic in ("heavy", "light"):
        q.offer_many(entries(topic, 20_000))
    counts = collections.Counter()
    for _ in range(40):
        counts.update(e.topic for e in q.take_due(take, timeout=0))
    assert 2.9 <= counts["heavy"] / counts["light"] <= 3.1, counts


def test_each_topic_comes_out_in_due_order_and_the_ring_turns_between_takes():
    q = DelayQueue(Clock())
    for topic in "abcdefghij":      # more topics than one take serves a quantum each
        q.offer_many([Entry(f"{topic}-{i}", 0, NOW - 100 + (i * 7) % 50, topic=topic) for i in range(100)])
    taken = []
    while len(taken) < 1000:
        got = q.take_due(QUANTUM * 4, timeout=0)
        assert len({e.topic for e in got}) >= 4          # no topic takes a whole take alone
        taken += got
    for topic in "abcdefghij":
        dues = [e.due_ms for e in taken if e.topic == topic]
        assert dues == sorted(dues) and len(dues) == 100


def test_a_topic_with_nothing_due_is_not_looked_at():
    asked = collections.Counter()

    class Counting(Open):
        def allowance(self, topic, now_ms):
            asked[topic] += 1
            return super().allowance(topic, now_ms)

    q = DelayQueue(Clock(), gate=Counting())
    for t in range(200):
        q.offer(Entry(f"later-{t}", 0, NOW + 60_000, topic=f"later{t}"))
    q.offer_many(entries("now", 50))
    assert len(q.take_due(500, timeout=0)) == 50
    assert set(asked) == {"now"}


def test_paused_topics_are_not_held_and_resume_reports_them():
    q = DelayQueue(Clock())
    q.offer_many(entries("p", 10) + entries("q", 10))
    dropped, resumed = q.pause({"p"})
    assert (dropped, resumed) == (10, set())
    assert not q.offer(Entry("p-late", 0, NOW, topic="p"))
    assert {e.topic for e in q.take_due(100, timeout=0)} == {"q"}
    assert q.pause(set()) == (0, {"p"})
    assert q.offer(Entry("p-late", 0, NOW, topic="p"))


class Split:
    """A node that owns `mine` of `total` shards."""
    def __init__(self, mine: int, total: int):
        self.ownership = Ownership("n1")
        self.ownership.set({s: 1 for s in range(mine)}, range(total))


def _flow(mine: int = 4, total: int = 4):
    clock = Clock()
    flow = Flow(Split(mine, total).ownership, now_ms=clock.now_ms)
    return flow, clock


def test_a_rate_limit_lets_through_the_burst_and_then_the_rate():
    flow, clock = _flow()
    flow.apply({"r": Controls(max_fire_rate=100.0, fire_burst=10)})
    q = DelayQueue(clock, gate=flow)
    q.offer_many(entries("r", 1000, due=NOW - 10))
    assert len(q.take_due(500, timeout=0)) == 10          # the burst
    assert q.take_due(500, timeout=0) == []               # nothing until tokens come back
    fired = 0
    for _ in range(100):                                  # one second in 10 ms steps
        clock.now += 10
        fired += len(q.take_due(500, timeout=0))
    assert 95 <= fired <= 100


def test_a_nodes_rate_is_its_share_of_the_shards():
    flow, clock = _flow(mine=16, total=64)
    flow.apply({"r": Controls(max_fire_rate=400.0)})
    q = DelayQueue(clock, gate=flow)
    q.offer_many(entries("r", 5000, due=NOW - 10))
    fired = len(q.take_due(500, timeout=0))               # the share of the burst: 20 / 4
    for _ in range(200):                                  # two seconds
        clock.now += 10
        fired += len(q.take_due(500, timeout=0))
    assert 195 <= fired <= 206                            # 400/s x 1/4 x 2 s, plus the burst


def test_a_node_without_shards_fires_nothing_of_a_limited_topic():
    flow, clock = _flow(mine=0, total=8)
    flow.apply({"r": Controls(max_fire_rate=100.0)})
    q = DelayQueue(clock, gate=flow)
    q.offer_many(entries("r", 10, due=NOW - 10))
    assert q.take_due(500, timeout=0) == []


def test_the_in_flight_room_is_what_the_last_claim_left_less_what_was_taken_since():
    flow, clock = _flow()
    flow.apply({"c": Controls(max_in_flight=5)})
    q = DelayQueue(clock, gate=flow)
    q.offer_many(entries("c", 100, due=NOW - 10))
    probe = q.take_due(500, timeout=0)
    assert len(probe) == 5                                # room unknown: the cap, and the claim decides
    flow.claimed("c", in_flight=5, room=0)
    assert q.take_due(500, timeout=0) == []
    flow.released("c")                                    # a result on this node frees a slot
    assert len(q.take_due(500, timeout=0)) == 1
    flow.claimed("c", in_flight=5, room=0)
    clock.now += 100                                      # results elsewhere: looked at again
    assert len(q.take_due(500, timeout=0)) == 5


def test_a_limited_topic_does_not_hold_back_the_others():
    flow, clock = _flow()
    flow.apply({"slow": Controls(max_fire_rate=1.0)})
    q = DelayQueue(clock, gate=flow)
    q.offer_many(entries("slow", 100, due=NOW - 10) + entries("fast", 100, due=NOW - 10))
    got = collections.Counter(e.topic for e in q.take_due(500, timeout=0))
    assert got == {"fast": 100, "slow": 1}


def test_a_bucket_says_when_it_will_hold_enough_tokens():
    b = Bucket(rate=50.0, burst=5.0, now_ms=0)
    b.tokens = 0.0
    assert b.when(1.0) in (20, 21)
    assert b.available(b.when(1.0)) >= 1.0


# ---- lanes ---------------------------------------------------------------------------------------

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


# ---- a topic that gets a rate limit spreads over every shard (delayq.nodes.memory.spread) -------------------

class Watch:
    def __init__(self):
        self.listeners = []

    def on_change(self, listener):
        self.listeners.append(listener)

    def changed(self):
        for listener in self.listeners:
            listener()


class Metrics:
    def topic_gauges(self, figures):
        pass


def test_a_topic_spreads_once_when_it_gets_a_rate_limit_and_not_at_the_first_read():
    from delayq.nodes.memory.flow import follow
    watch, services, spread = Watch(), Services(), []
    services.limits = {"old": Controls(max_fire_rate=10.0), "capped": Controls(max_in_flight=3)}
    follow(watch, services, Flow(Ownership("n1")), DelayQueue(Clock()), lambda: None, Metrics(),
           lambda topic: spread.append(topic) or 0)
    watch.changed()                 # the first read: limits set before this node started
    assert spread == []
    services.limits["new"] = Controls(max_fire_rate=5.0)
    services.limits["capped"] = Controls(max_in_flight=4)
    watch.changed()
    watch.changed()                 # unchanged: nothing more
    assert spread == ["new"]
    del services.limits["new"]
    watch.changed()
    services.limits["new"] = Controls(max_fire_rate=7.0)
    watch.changed()
    assert spread == ["new", "new"]


def test_a_topics_entries_are_its_live_ones_only():
    q = DelayQueue(Clock())
    q.offer_many([*entries("a", 5), *entries("b", 3)])
    q.remove("a-1")
    q.offer(Entry("a-2", 7, NOW + 50, topic="a"))        # re-timed: one entry, the new one
    got = sorted(q.entries_of("a"), key=lambda e: e.task_id)
    assert [(e.task_id, e.shard_id) for e in got] == [("a-0", 0), ("a-2", 7), ("a-3", 0), ("a-4", 0)]
    assert q.entries_of("nobody") == []
