"""Unit tests for delayq.nodes.memory.delayqueue.DelayQueue, driven by an injected fake clock (no sleeps)."""
from __future__ import annotations

import random
import threading
import time

import pytest

from delayq.nodes.memory.delayqueue import DelayQueue, Entry

pytestmark = pytest.mark.timeout(10)

FAR = 10**9  # ms ahead: never due during a test


class FakeClock:
    """now_ms() is whatever the test sets; monotonic() is real, so take_due timeouts still expire.

    `taker_waiting` is set the first time now_ms() is read by a thread other than the one that
    built the clock. DelayQueue.take_due reads now_ms() while holding the queue's lock and keeps the
    lock until it waits, so once the event is set, a producer's next lock acquisition can only
    happen after the taker has started waiting.
    """

    def __init__(self, now: int = 1_000_000):
        self.now = now
        self._owner = threading.get_ident()
        self.taker_waiting = threading.Event()

    def now_ms(self) -> int:
        if threading.get_ident() != self._owner:
            self.taker_waiting.set()
        return self.now

    def monotonic(self) -> float:
        return time.monotonic()


class Taker(threading.Thread):
    def __init__(self, q: DelayQueue, max_items: int = 100, timeout: float | None = None):
        super().__init__(daemon=True)
        self.q, self.max_items, self.timeout = q, max_items, timeout
        self.result: list[Entry] | None = None
        self.done = threading.Event()

    def run(self) -> None:
        self.result = self.q.take_due(self.max_items, timeout=self.timeout)
        self.done.set()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def q(clock: FakeClock) -> DelayQueue:
    return DelayQueue(clock)


def ids(entries: list[Entry]) -> list[str]:
    return [e.task_id for e in entries]


# ---------------------------------------------------------------- ordering and take_due


def test_many_random_entries_come_out_in_due_order(clock: FakeClock, q: DelayQueue):
    rng = random.Random(1234)
    base = clock.now
    entries = [Entry(f"t{i}", rng.randrange(8), base + rng.randrange(1, 100_000)) for i in range(2000)]
    for e in entries:
        assert q.offer(e)
    assert len(q) == len(entries)
    assert q.next_due_ms() == min(e.due_ms for e in entries)

    out: list[Entry] = []
    # Advance time in uneven steps; every take returns only what is due by then.
    while len(out) < len(entries):
        clock.now += rng.randrange(1, 5000)
        got = q.take_due(max_items=rng.randrange(1, 300), timeout=0)
        assert all(e.due_ms <= clock.now for e in got)
        out.extend(got)
    assert [e.due_ms for e in out] == sorted(e.due_ms for e in entries)
    assert sorted(out, key=lambda e: e.task_id) == sorted(entries, key=lambda e: e.task_id)
    assert len(q) == 0
    assert q.next_due_ms() is None


def test_take_due_returns_only_due_entries_at_most_max_items_earliest_first(clock: FakeClock, q: DelayQueue):
    now = clock.now
    # Offered out of order on purpose.
    for i, d in enumerate([500, -300, 0, 1, -100, -200, 900, -1]):
        q.offer(Entry(f"t{d}", i, now + d))
    first = q.take_due(max_items=3, timeout=0)
    assert ids(first) == ["t-300", "t-200", "t-100"]
    rest = q.take_due(max_items=100, timeout=0)
    assert ids(rest) == ["t-1", "t0"]          # due exactly now counts as due
    assert len(q) == 3
    assert q.next_due_ms() == now + 1
    assert q.take_due(max_items=100, timeout=0) == []
    clock.now += 1
    assert ids(q.take_due(max_items=100, timeout=0)) == ["t1"]


def test_take_due_with_gather_waits_until_the_head_is_close_then_takes_the_whole_lead(clock: FakeClock,
                                                                                     q: DelayQueue):
    now = clock.now
    for d in (15, 18, 22, 35):
        q.offer(Entry(f"t{d}", 0, now + d))
    # lead 20, gather 10: nothing until the head is due within 10 ms...
    assert q.take_due(100, timeout=0, lead_ms=20, gather_ms=10) == []
    clock.now = now + 5
    # ...then everything due within 20 ms, not only the head.
    assert ids(q.take_due(100, timeout=0, lead_ms=20, gather_ms=10)) == ["t15", "t18", "t22"]
    assert ids(q.take_due(100, timeout=0, lead_ms=20, gather_ms=0)) == []
    clock.now = now + 15
    assert ids(q.take_due(100, timeout=0, lead_ms=20, gather_ms=0)) == ["t35"]


def test_take_due_returns_the_offered_entry(clock: FakeClock, q: DelayQueue):
    e = Entry("x", 7, clock.now - 5)
    q.offer(e)
    assert q.take_due(10, timeout=0) == [e]


def test_take_due_with_timeout_returns_empty_when_nothing_is_due(clock: FakeClock, q: DelayQueue):
    q.offer(Entry("far", 0, clock.now + FAR))
    started = time.monotonic()
    assert q.take_due(10, timeout=0.05) == []
    elapsed = time.monotonic() - started
    assert 0.04 <= elapsed < 2.0
    assert len(q) == 1                           # the not-yet-due entry stays


def test_take_due_with_timeout_on_empty_queue(q: DelayQueue):
    assert q.take_due(10, timeout=0) == []
    assert q.take_due(10, timeout=0.01) == []


# ---------------------------------------------------------------- re-timing, remove, own


def test_offer_of_same_id_retimes_it(clock: FakeClock, q: DelayQueue):
    now = clock.now
    assert q.offer(Entry("a", 1, now + 100))
    assert q.offer(Entry("a", 1, now + 1000))    # re-timed later
    assert len(q) == 1
    assert q.next_due_ms() == now + 1000
    clock.now = now + 500
    assert q.take_due(10, timeout=0) == []       # the old due time no longer fires
    clock.now = now + 1000
    assert q.take_due(10, timeout=0) == [Entry("a", 1, now + 1000)]
    assert q.take_due(10, timeout=0) == []       # and it fires exactly once
    assert len(q) == 0


def test_offer_of_same_id_retimes_it_earlier(clock: FakeClock, q: DelayQueue):
    now = clock.now
    q.offer(Entry("a", 1, now + FAR))
    q.offer(Entry("a", 1, now - 1))
    assert q.take_due(10, timeout=0) == [Entry("a", 1, now - 1)]
    clock.now = now + FAR
    assert q.take_due(10, timeout=0) == []


def test_offer_of_identical_entry_keeps_one(clock: FakeClock, q: DelayQueue):
    e = Entry("a", 1, clock.now)
    q.offer(e)
    q.offer(e)
    assert len(q) == 1
    assert q.take_due(10, timeout=0) == [e]
    assert q.take_due(10, timeout=0) == []


def test_offer_many_counts_added_entries(clock: FakeClock, q: DelayQueue):
    entries = [Entry(f"t{i}", 0, clock.now + i) for i in range(5)]
    assert q.offer_many(entries) == 5
    assert q.offer_many(iter([])) == 0
    assert len(q) == 5


def test_remove(clock: FakeClock, q: DelayQueue):
    now = clock.now
    q.offer(Entry("a", 0, now - 2))
    q.offer(Entry("b", 0, now - 1))
    assert q.remove("a") is True
    assert q.remove("a") is False
    assert q.remove("nope") is False
    assert len(q) == 1
    assert q.next_due_ms() == now - 1
    assert ids(q.take_due(10, timeout=0)) == ["b"]


def test_removed_then_reoffered_fires_at_new_time_only(clock: FakeClock, q: DelayQueue):
    now = clock.now
    q.offer(Entry("a", 0, now - 10))
    q.remove("a")
    q.offer(Entry("a", 0, now + 10))
    assert q.take_due(10, timeout=0) == []
    clock.now = now + 10
    assert q.take_due(10, timeout=0) == [Entry("a", 0, now + 10)]


def test_own_forgets_the_entries_of_shards_no_longer_owned(clock: FakeClock, q: DelayQueue):
    now = clock.now
    for i in range(30):
        q.offer(Entry(f"t{i}", i % 3, now - 100 + i))
    assert q.own({1}) == 20
    assert q.own({1}) == 0
    assert len(q) == 10
    out = q.take_due(100, timeout=0)
    assert [e.shard_id for e in out] == [1] * 10
    assert ids(out) == [f"t{i}" for i in range(1, 30, 3)]


def test_clear_empties_and_resets_horizon(clock: FakeClock, q: DelayQueue):
    q.set_horizon(clock.now + 1000)
    q.offer(Entry("a", 0, clock.now))
    q.clear()
    assert len(q) == 0
    assert q.horizon_ms == 0
    assert q.next_due_ms() is None
    assert q.take_due(10, timeout=0) == []


# ---------------------------------------------------------------- blocking, waking, close


def test_blocked_taker_is_woken_by_an_earlier_due_entry(clock: FakeClock, q: DelayQueue):
    q.offer(Entry("far", 0, clock.now + FAR))
    taker = Taker(q, timeout=None)      # would wait ~FAR ms for "far" without a wake-up
    taker.start()
    try:
        assert clock.taker_waiting.wait(5), "taker never looked at the clock"
        started = time.monotonic()
        due = Entry("now", 1, clock.now)
        assert q.offer(due)             # acquires the lock only once the taker is waiting
        assert taker.done.wait(5), "taker was not woken by an earlier, due entry"
        assert time.monotonic() - started < 2.0
        assert taker.result == [due]
        assert len(q) == 1              # "far" is still there
    finally:
        q.close()
        taker.join(5)


def test_close_wakes_a_blocked_taker_which_returns_empty(clock: FakeClock, q: DelayQueue):
    taker = Taker(q, timeout=None)      # empty queue, no timeout: waits forever
    taker.start()
    assert clock.taker_waiting.wait(5)
    q.close()
    assert taker.done.wait(5), "close() did not wake the taker"
    assert taker.result == []
    taker.join(5)


def test_take_due_after_close_returns_empty_even_with_due_entries(clock: FakeClock, q: DelayQueue):
    q.offer(Entry("a", 0, clock.now - 1))
    q.close()
    assert q.take_due(10, timeout=None) == []


# ---------------------------------------------------------------- cap, horizon, accepts


def test_cap_refuses_new_entries_and_lowers_horizon(clock: FakeClock):
    q = DelayQueue(clock, cap=3)
    now = clock.now
    q.set_horizon(now + 10_000)
    for i in range(3):
        assert q.offer(Entry(f"t{i}", 0, now + i)) is True
    assert q.offer(Entry("x", 0, now + 5000)) is False
    assert len(q) == 3
    assert q.horizon_ms == now + 5000
    assert q.offer(Entry("y", 0, now + 7000)) is False
    assert q.horizon_ms == now + 5000          # only ever lowered
    assert q.offer(Entry("z", 0, now + 2000)) is False
    assert q.horizon_ms == now + 2000
    # Re-timing an entry already held is not an addition: allowed when full.
    assert q.offer(Entry("t0", 0, now + 50)) is True
    assert len(q) == 3
    assert q.horizon_ms == now + 2000
    # Room again after a removal.
    q.remove("t1")
    assert q.offer(Entry("x", 0, now + 5000)) is True
    assert len(q) == 3
    clock.now = now + 10_000
    assert ids(q.take_due(10, timeout=0)) == ["t2", "t0", "x"]


def test_offer_many_stops_adding_at_cap(clock: FakeClock):
    q = DelayQueue(clock, cap=5)
    q.set_horizon(clock.now + 1_000_000)
    entries = [Entry(f"t{i}", 0, clock.now + 100 - i) for i in range(8)]
    assert q.offer_many(entries) == 5
    assert len(q) == 5
    assert q.horizon_ms == clock.now + 100 - 7  # the earliest refused due time


def test_accepts_respects_horizon_and_cap(clock: FakeClock):
    q = DelayQueue(clock, cap=2)
    now = clock.now
    assert q.accepts(now) is False             # horizon starts at 0: nothing loaded yet
    q.set_horizon(now + 1000)
    assert q.accepts(now + 999) is True
    assert q.accepts(now + 1000) is False      # strictly below the horizon
    assert q.accepts(now + 1001) is False
    q.offer(Entry("a", 0, now))
    assert q.accepts(now) is True
    q.offer(Entry("b", 0, now))
    assert q.accepts(now) is False             # full: and memory now lacks a task due then
    q.remove("a")
    assert q.accepts(now - 1) is True
    assert q.accepts(now) is False             # until a scan has read MySQL from there again


def test_offer_written_takes_what_accepts_would_of_the_owned_shards(clock: FakeClock):
    handed = []
    q = DelayQueue(clock, cap=3, handover=handed.extend)
    q.own({0})
    now = clock.now
    assert q.offer_written([Entry("early", 0, now)]) == 0     # nothing loaded yet
    q.set_horizon(now + 1000)
    added = q.offer_written([Entry("a", 0, now + 10), Entry("late", 0, now + 1000), Entry("theirs", 1, now + 10),
                             Entry("b", 0, now + 20), Entry("c", 0, now + 30), Entry("d", 0, now + 5)])
    assert added == 3
    assert len(q) == 3 and not q.holds("late", now + 1000) and not q.holds("theirs", now + 10)
    assert handed == [Entry("theirs", 1, now + 10)]         # the owner of shard 1 is told
    assert q.horizon_ms == now + 5         # full: memory now lacks the task due then
    assert q.offer_many([Entry("e", 0, now + 3)]) == 0


# ---------------------------------------------------------------- compaction


def test_many_retimings_keep_behaviour_correct(clock: FakeClock, q: DelayQueue):
    rng = random.Random(99)
    now = clock.now
    # Entries offered once and never re-timed must survive every compaction.
    steady = [Entry(f"s{i}", 100 + i, now - 2_000_000 + i * 1_000_000) for i in range(4)]
    q.offer_many(steady)
    final: dict[str, Entry] = {e.task_id: e for e in steady}
    for _ in range(5000):
        for i in range(10):
            # Earlier rounds are mostly earlier than the final ones, so a stale heap item that
            # leaked out would be due (and returned) before the live entry.
            e = Entry(f"t{i}", i, now - 1_000_000 + rng.randrange(0, 2_000_000))
            q.offer(e)
            final[e.task_id] = e
    assert len(q) == 14
    # White-box: stale heap items are compacted away, memory stays bounded.
    assert q._topics._items <= 2 * 14 + 1024 + 1
    expected = sorted(final.values(), key=lambda e: e.due_ms)
    assert q.next_due_ms() == expected[0].due_ms
    clock.now = now + 2_000_000
    out = q.take_due(max_items=1000, timeout=0)
    assert out == expected
    assert len(q) == 0
    assert q.take_due(max_items=1000, timeout=0) == []


def test_own_after_retimings_keeps_order(clock: FakeClock, q: DelayQueue):
    now = clock.now
    for r in range(300):
        for i in range(10):
            q.offer(Entry(f"t{i}", i % 2, now - 10_000 + r * 10 + i))
    assert q.own({1}) == 5
    clock.now = now + 10_000
    out = q.take_due(100, timeout=0)
    assert ids(out) == ["t1", "t3", "t5", "t7", "t9"]
    assert [e.due_ms for e in out] == [now - 10_000 + 299 * 10 + i for i in (1, 3, 5, 7, 9)]


def test_offer_many_adds_more_entries_than_one_lock_chunk_and_wakes_for_the_new_head():
    clock = FakeClock(1000)
    q = DelayQueue(clock)
    n = DelayQueue.CHUNK * 3 + 7
    assert q.offer_many(Entry(f"t{i}", 0, 2000 + i) for i in range(n)) == n
    assert q.offer_many(Entry(f"t{i}", 0, 2000 + i) for i in range(n)) == 0     # already queued
    clock.now = 2000 + n
    assert [e.task_id for e in q.take_due(n + 1, timeout=0)] == [f"t{i}" for i in range(n)]


def test_raise_horizon_returns_the_horizon_it_replaced():
    q = DelayQueue(FakeClock(0))
    assert q.raise_horizon(5000) == 0
    q.set_horizon(0)
    assert q.raise_horizon(9000) == 0 and q.horizon_ms == 9000
    assert q.raise_horizon(12000) == 9000


def test_a_full_queue_refuses_a_task_below_its_horizon_and_lowers_the_horizon_to_it():
    clock = FakeClock()
    q = DelayQueue(clock, cap=2)
    q.set_horizon(clock.now_ms() + 60_000)
    q.offer(Entry("a", 1, clock.now_ms() + 1_000))
    q.offer(Entry("b", 1, clock.now_ms() + 2_000))
    assert not q.accepts(clock.now_ms() + 30_000)
    # From there on memory lacks a task, so the next scan reads MySQL from there.
    assert q.horizon_ms == clock.now_ms() + 30_000


def test_lower_horizon_keeps_a_reset_made_meanwhile():
    q = DelayQueue(FakeClock())
    q.set_horizon(0)
    q.lower_horizon(50_000)
    assert q.horizon_ms == 0
