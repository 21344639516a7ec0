"""The in-memory DelayQueue: near-due task references, a due-time heap per topic, handed out fairly.

It is a cache of MySQL rows (docs/ARCHITECTURE.md, invariant 1): it holds only (task id, shard, due
time, topic), losing it loses nothing, and the dispatcher re-checks every entry against MySQL when it
claims it.

    q = DelayQueue(clock, gate=flow)
    q.offer(Entry("t1", shard_id=3, due_ms=clock.now_ms() + 500, topic="orders"))
    due = q.take_due(max_items=500, timeout=1.0)   # blocks until t1 is due (or 1 s passes)

Fair share (delayq.nodes.memory.fairshare): each topic has its own heap, and when several have entries
due a take serves them by weighted round robin, each in due order, the next take going on where
this one stopped: a topic with 100,000 tasks due at once gets no more turns than one with a single
task due. The gate (delayq.nodes.memory.flow) says how many of a topic's due entries may be taken now (its
rate, its attempts in flight) and when to look again; an entry held back stays here, unclaimed, so
it can still be cancelled. Paused topics are not held at all (`pause`): their tasks stay in MySQL
until they resume.

Threads: any number of producers (loader, Thrift handlers, recorder) and of consumers (the
dispatcher's claiming threads). A producer whose entry becomes a topic's head wakes the consumers,
which otherwise wait only until the next entry is due or a held-back topic may go on: no polling.
`kick()` wakes them when the gate changed; `close()` wakes them for good.

`horizon_ms` is the due time up to which the queue holds *every* DELAY task of the node's shards
(of topics not paused); the loader advances it after each scan, and a submit adds its task only when
it falls below it.

Handover (docs/ARCHITECTURE.md, invariant 8). Once told which shards the node owns (`own`), the
queue holds entries of those shards only, and decides under its lock, so that no entry can slip in
beside a shard's loss: an entry written for a shard it does not own (a retry, a claim put back, a
submit, after the shard moved) goes to `handover`, which tells the shard's owner (a hint row,
delayq.nodes.memory.hints); and when a shard is lost, the entries of it offered in the last
HANDOVER_LOOKBACK_S go there too, since the new owner may have read its window before they were
written. Older entries were written before the shard moved and are in the new owner's read.
"""
from __future__ import annotations

import threading
from typing import Callable, Iterable

from delayq.clock import Clock
from delayq.nodes.memory.fairshare import BULK, PROMPT, QUANTUM, Gate, Open, Topics
from delayq.nodes.memory.offertimes import OfferTimes
from delayq.store.values import Entry

__all__ = ["BULK", "PROMPT", "QUANTUM", "DelayQueue", "Entry", "Gate", "Open"]

# How far back a shard's loss hands its entries over. The new owner reads its window once it hears
# of the move; this node hears of it at about the same moment (the same ZooKeeper write), so only
# entries offered since then can be missing from that read. Generous against a slow event thread.
HANDOVER_LOOKBACK_S = 5.0

Handover = Callable[[list[Entry]], None]


def _drop(entries: list[Entry]) -> None:
    """No handover: entries of shards not ours are left to MySQL (a queue that owns every shard)."""


class DelayQueue:
    CHUNK = 256     # entries added per hold of the lock in offer_many

    def __init__(self, clock: Clock, cap: int = 1_000_000, gate: Gate | None = None, handover: Handover = _drop,
                 shards: Iterable[int] | None = None):
        """shards: those owned at the start (None: every shard, for a queue with no handover); a
        node's queue owns none until the assignment gives it some, so that what it accepts
        meanwhile goes to the shards' owners."""
        self._clock = clock
        self._cap = cap
        self._cond = threading.Condition()
        self._live: dict[str, tuple[Entry, int]] = {}       # task_id -> (entry, seq of its heap item)
        gate = gate or Open()
        self._topics = Topics(self._live, gate)
        gate.on_change(self.kick)       # held-back entries may go now: the takers look again
        self._paused: frozenset[str] = frozenset()
        self._seq = 0                   # the next entry's sequence number: offers in order
        self._offered = OfferTimes(keep_s=2 * HANDOVER_LOOKBACK_S)     # when each number was given
        self._shards: frozenset[int] | None = None if shards is None else frozenset(shards)
        self._handover = handover
        self._closed = False
        self.horizon_ms = 0

    def __len__(self) -> int:
        with self._cond:
            return len(self._live)

    # ---- adding and removing --------------------------------------------------------------------

    def offer(self, entry: Entry) -> bool:
        """Add or re-time an entry; False when it was not added: already queued as it is, its topic
        is paused, or the queue is full (then the task stays in MySQL only)."""
        return self.offer_many([entry]) == 1

    def offer_many(self, entries: Iterable[Entry]) -> int:
        """offer() for many entries (a window scan's). The lock is taken per chunk of them, so a
        scan of tens of thousands of entries never keeps the dispatcher from the head for long.
        Entries of shards not ours are dropped."""
        return self._offer(list(entries), below_horizon=False, foreign_out=False)

    def offer_written(self, entries: Iterable[Entry]) -> int:
        """Tasks just written to MySQL as DELAY (a submit, a retry, a claim put back): those that
        accepts() would take go into memory, the loader reads the later ones when their time
        comes, and those of shards not ours go to the handover."""
        return self._offer(list(entries), below_horizon=True, foreign_out=True)

    def put_back(self, entries: Iterable[Entry]) -> int:
        """Entries taken from memory and not claimed (MySQL down, a cap kept them back): back in,
        whatever the horizon; those of shards no longer ours go to the handover."""
        return self._offer(list(entries), below_horizon=False, foreign_out=True)

    def hand_over(self, entries: list[Entry]) -> None:
        """Entries this node cannot hold (their shard is not ours): to their shard's owner."""
        if entries:
            self._handover(entries)

    def own(self, shards: Iterable[int], lookback_s: float = HANDOVER_LOOKBACK_S) -> int:
        """The node owns these shards from now on: forget the entries of the others, handing over
        those offered within lookback_s (the new owner's window read may have missed them).
        Returns how many entries were dropped."""
        with self._cond:
            self._shards = frozenset(shards)
            since = self._offered.since(self._clock.monotonic() - lookback_s, self._seq)
            gone = [(tid, e, seq) for tid, (e, seq) in self._live.items() if e.shard_id not in self._shards]
            for tid, _, _ in gone:
                del self._live[tid]
            self._topics.compact_if_stale()
        self.hand_over([e for _, e, seq in gone if seq >= since])
        return len(gone)

    def _offer(self, entries: list[Entry], below_horizon: bool, foreign_out: bool) -> int:
        """foreign_out: entries of shards not ours go to the handover (they were written to MySQL
        just now, maybe after their owner read its window); otherwise they are dropped (a window
        scan's, of a shard lost while it ran: in MySQL before the new owner's read)."""
        added, foreign = 0, []
        for i in range(0, len(entries), self.CHUNK):
            n, other = self._offer_chunk(entries[i:i + self.CHUNK], below_horizon)
            added += n
            foreign += other
        if foreign_out:
            self.hand_over(foreign)
        return added

    def _offer_chunk(self, entries: list[Entry], below_horizon: bool) -> tuple[int, list[Entry]]:
        added, wake, foreign = 0, False, []
        with self._cond:
            self._offered.offering(self._clock.monotonic(), self._seq)
            owned = self._shards
            for e in entries:
                if owned is not None and e.shard_id not in owned:
                    foreign.append(e)
                    continue
                if below_horizon and e.due_ms >= self.horizon_ms or e.topic in self._paused:
                    continue
                current = self._live.get(e.task_id)
                if current is not None and current[0] == e:
                    continue
                if current is None and len(self._live) >= self._cap:
                    # Full: everything from this due time on is no longer known to be in memory.
                    self.horizon_ms = min(self.horizon_ms, e.due_ms)
                    continue
                seq = self._seq
                self._seq += 1
                self._live[e.task_id] = (e, seq)
                wake = self._topics.push(e, seq) or wake
                added += 1
            if wake:
                self._cond.notify_all()
            self._topics.compact_if_stale()
        return added, foreign

    def holds(self, task_id: str, due_ms: int) -> bool:
        """True when the task is queued for this due time already."""
        with self._cond:
            current = self._live.get(task_id)
            return current is not None and current[0].due_ms == due_ms

    def remove(self, task_id: str) -> bool:
        with self._cond:
            return self._live.pop(task_id, None) is not None

    def entries_of(self, topic: str) -> list[Entry]:
        """The topic's entries now (a copy; costs the topic's entries, not the queue's)."""
        with self._cond:
            return self._topics.entries(topic)

    def pause(self, topics: Iterable[str]) -> tuple[int, set[str]]:
        """From now on hold no entry of these topics (and drop those held); returns the entries
        dropped and the topics no longer paused, whose tasks memory must read again."""
        with self._cond:
            paused = frozenset(topics)
            resumed, self._paused = set(self._paused - paused), paused
            return sum(self._topics.drop(topic) for topic in paused), resumed

    def clear(self) -> None:
        with self._cond:
            self._live.clear()
            self._topics.clear()
            self.horizon_ms = 0

    # ---- the horizon ----------------------------------------------------------------------------

    def set_horizon(self, horizon_ms: int) -> None:
        with self._cond:
            self.horizon_ms = horizon_ms

    def lower_horizon(self, horizon_ms: int) -> None:
        """Memory is complete only below horizon_ms, if it was not already less (a reset to 0 made
        meanwhile stays)."""
        with self._cond:
            self.horizon_ms = min(self.horizon_ms, horizon_ms)

    def raise_horizon(self, horizon_ms: int) -> int:
        """Set the horizon; returns the one it replaces (0: memory is not known to be complete)."""
        with self._cond:
            previous, self.horizon_ms = self.horizon_ms, horizon_ms
            return previous

    def accepts(self, due_ms: int) -> bool:
        """True when a task due then belongs in memory now (below the loaded horizon). When memory
        is full it does not, and from its due time on memory is no longer complete."""
        with self._cond:
            if due_ms >= self.horizon_ms:
                return False
            if len(self._live) >= self._cap:
                self.horizon_ms = due_ms
                return False
            return True

    @property
    def paused(self) -> frozenset[str]:
        return self._paused

    # ---- taking ---------------------------------------------------------------------------------

    def next_due_ms(self, skip: Iterable[str] = ()) -> int | None:
        """The earliest entry's time, but for the topics in `skip`."""
        with self._cond:
            return self._topics.earliest(skip)

    def count(self, topic: str) -> int:
        """About how many entries of the topic memory holds (re-timed or removed ones may count)."""
        with self._cond:
            return self._topics.count(topic)

    def due_now(self, topics: Iterable[str]) -> dict[str, int]:
        """Entries of these topics due by now (held back by their gate, if still here)."""
        with self._cond:
            now = self._clock.now_ms()
            return {t: self._topics.due_by(t, now) for t in topics}

    def kick(self) -> None:
        """The gate changed (a limit, a result freeing a slot): look at held-back topics again."""
        with self._cond:
            self._cond.notify_all()

    def take_due(self, max_items: int, timeout: float | None = None, lead_ms: int = 0,
                 gather_ms: int = 0, lane: str | None = None) -> list[Entry]:
        """Remove and return up to max_items entries due within lead_ms from now, waiting for the
        first one the gate lets go.

        With gather_ms, it waits until the first entry is due within lead_ms - gather_ms and then
        takes everything due within lead_ms: a taker that keeps up takes about gather_ms worth of
        entries each time instead of one at a time.

        With a lane (PROMPT or BULK, delayq.nodes.memory.fairshare), only the topics that go to that lane
        now are taken; a take wakes the other waiters, since it may have moved a topic between lanes.

        Returns [] when the timeout passes with nothing due, or when the queue is closed.
        """
        deadline = None if timeout is None else self._clock.monotonic() + timeout
        wake_ms = lead_ms - min(gather_ms, lead_ms)
        with self._cond:
            while not self._closed:
                now = self._clock.now_ms()
                ready, again = self._topics.ready(now, lead_ms, wake_ms, lane)
                if ready:
                    taken = self._topics.take(ready, now, lead_ms, max_items)
                    if lane is not None:
                        self._cond.notify_all()
                    return taken
                wait = None if again is None else max(0, again - now) / 1000.0
                if deadline is not None:
                    left = deadline - self._clock.monotonic()
                    if left <= 0:
                        return []
                    wait = left if wait is None else min(wait, left)
                self._cond.wait(wait)
            return []

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
