"""The in-memory DelayQueue: near-due task references, a due-time heap per topic, handed out fairly.

It is a cache of MySQL rows (docs/ARCHITECTURE.md, invariant 1): it holds only (task id, shard, due
time, topic), losing it loses nothing, and the dispatcher re-checks every entry against MySQL when it
claims it.

    q = DelayQueue(clock, gate=flow)
    q.offer(Entry("t1", shard_id=3, due_ms=clock.now_ms() + 500, topic="orders"))
    due = q.take_due(max_items=500, timeout=1.0)   # blocks until t1 is due (or 1 s passes)

Fair share (delayq.nodes.fairshare): each topic has its own heap, and when several have entries
due a take serves them by weighted round robin, each in due order, the next take going on where
this one stopped: a topic with 100,000 tasks due at once gets no more turns than one with a single
task due. The gate (delayq.nodes.flow) says how many of a topic's due entries may be taken now (its
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
"""
from __future__ import annotations

import itertools
import threading
from typing import Container, Iterable

from delayq.clock import Clock
from delayq.nodes.fairshare import BULK, PROMPT, QUANTUM, Gate, Open, Topics
from delayq.store.values import Entry

__all__ = ["BULK", "PROMPT", "QUANTUM", "DelayQueue", "Entry", "Gate", "Open"]

class DelayQueue:
    CHUNK = 256     # entries added per hold of the lock in offer_many

    def __init__(self, clock: Clock, cap: int = 1_000_000, gate: Gate | None = None):
        self._clock = clock
        self._cap = cap
        self._cond = threading.Condition()
        self._live: dict[str, tuple[Entry, int]] = {}       # task_id -> (entry, seq of its heap item)
        self._topics = Topics(self._live, gate or Open())
        self._paused: frozenset[str] = frozenset()
        self._seq = itertools.count()
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
        """offer() for many entries. The lock is taken per chunk of them, so a window scan of
        tens of thousands of entries never keeps the dispatcher from the head for long."""
        return self._offer(list(entries), below_horizon=False)

    def offer_written(self, entries: Iterable[Entry], owned: Container[int]) -> int:
        """Tasks just written to MySQL as DELAY (a submit, a retry): those of the `owned` shards
        that accepts() would take go into memory; the loader reads the others when their time
        comes."""
        return self._offer([e for e in entries if e.shard_id in owned], below_horizon=True)

    def _offer(self, entries: list[Entry], below_horizon: bool) -> int:
        added = 0
        for i in range(0, len(entries), self.CHUNK):
            added += self._offer_chunk(entries[i:i + self.CHUNK], below_horizon)
        return added

    def _offer_chunk(self, entries: list[Entry], below_horizon: bool) -> int:
        added, wake = 0, False
        with self._cond:
            for e in entries:
                if below_horizon and e.due_ms >= self.horizon_ms or e.topic in self._paused:
                    continue
                current = self._live.get(e.task_id)
                if current is not None and current[0] == e:
                    continue
                if current is None and len(self._live) >= self._cap:
                    # Full: everything from this due time on is no longer known to be in memory.
                    self.horizon_ms = min(self.horizon_ms, e.due_ms)
                    continue
                seq = next(self._seq)
                self._live[e.task_id] = (e, seq)
                wake = self._topics.push(e, seq) or wake
                added += 1
            if wake:
                self._cond.notify_all()
            self._topics.compact_if_stale()
        return added

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

    def remove_shards(self, shards: set[int]) -> int:
        """Forget every entry of these shards (the node lost them)."""
        with self._cond:
            gone = [tid for tid, (e, _) in self._live.items() if e.shard_id in shards]
            for tid in gone:
                del self._live[tid]
            self._topics.compact_if_stale()
            return len(gone)

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

    def next_due_ms(self, skip: Container[str] = ()) -> int | None:
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

        With a lane (PROMPT or BULK, delayq.nodes.fairshare), only the topics that go to that lane
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
