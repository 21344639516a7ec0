"""The in-memory DelayQueue: near-due task references, a due-time heap per topic, handed out fairly.

It is a cache of MySQL rows (docs/ARCHITECTURE.md, invariant 1): it holds only (task id, shard, due
time, topic), losing it loses nothing, and the dispatcher re-checks every entry against MySQL when it
claims it.

    q = DelayQueue(clock, gate=flow)
    q.offer(Entry("t1", shard_id=3, due_ms=clock.now_ms() + 500, topic="orders"))
    due = q.take_due(max_items=500, timeout=1.0)   # blocks until t1 is due (or 1 s passes)

Fair share: each topic has its own heap; a heap of the topics' earliest entries says which topics
have something due, so a topic with nothing due costs nothing. When several have, a take serves
them by deficit round robin (a quantum of entries per round, times the topic's weight), each in due
order, and the next take goes on where this one stopped: a topic with 100,000 tasks due at once
gets no more turns than one with a single task due. The gate (delayq.nodes.flow) says how many of a
topic's due entries may be taken now (its rate, its attempts in flight) and when to look again; an
entry held back stays here, unclaimed, so it can still be cancelled. Paused topics are not held at
all (`pause`): their tasks stay in MySQL until they resume.

Threads: any number of producers (loader, Thrift handlers, recorder) and of consumers (the
dispatcher's claiming threads). A producer whose entry becomes a topic's head wakes the consumers,
which otherwise wait only until the next entry is due or a held-back topic may go on: no polling.
`kick()` wakes them when the gate changed; `close()` wakes them for good.

`horizon_ms` is the due time up to which the queue holds *every* DELAY task of the node's shards
(of topics not paused); the loader advances it after each scan, and a submit adds its task only when
it falls below it.
"""
from __future__ import annotations

import heapq
import itertools
import threading
from typing import Container, Iterable, Protocol

from delayq.clock import Clock
from delayq.store.values import Entry

QUANTUM = 32            # entries a topic of weight 1 may take per round when others have tasks due too


class Gate(Protocol):
    def allowance(self, topic: str, now_ms: int) -> tuple[int, int | None]:
        """How many due entries of the topic may be taken now; with 0, when to ask again (ms)."""

    def took(self, topic: str, n: int, now_ms: int) -> None: ...

    def weight(self, topic: str) -> int: ...


class Open:
    """No limits: every due entry may go, all topics weigh the same."""
    def allowance(self, topic: str, now_ms: int) -> tuple[int, int | None]:
        return 1 << 30, None

    def took(self, topic: str, n: int, now_ms: int) -> None:
        pass

    def weight(self, topic: str) -> int:
        return 1


class DelayQueue:
    CHUNK = 256     # entries added per hold of the lock in offer_many

    def __init__(self, clock: Clock, cap: int = 1_000_000, gate: Gate | None = None):
        self._clock = clock
        self._cap = cap
        self._gate = gate or Open()
        self._cond = threading.Condition()
        self._live: dict[str, tuple[Entry, int]] = {}       # task_id -> (entry, seq of its heap item)
        self._heaps: dict[str, list[tuple[int, int, str]]] = {}   # topic -> (at_ms, seq, task_id); stale skipped
        self._items = 0                                     # heap items, stale ones included
        self._index: list[tuple[int, str]] = []             # (head at_ms, topic) of topics not in _due
        self._due: dict[str, None] = {}                     # topics with entries due: the round-robin ring
        self._credit: dict[str, int] = {}                   # what is left of a turn a take's size cut short
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
                heap = self._heaps.get(e.topic)
                if heap is None:
                    heap = self._heaps[e.topic] = []
                heapq.heappush(heap, (e.at_ms, seq, e.task_id))
                self._items += 1
                if heap[0][1] == seq:
                    # A new head: the consumers may have to wake earlier than they planned.
                    if e.topic in self._due:
                        wake = True
                    else:
                        wake = wake or not self._index or e.at_ms < self._index[0][0]
                        heapq.heappush(self._index, (e.at_ms, e.topic))
                added += 1
            if wake:
                self._cond.notify_all()
            self._compact_if_stale()
        return added

    def holds(self, task_id: str, due_ms: int) -> bool:
        """True when the task is queued for this due time already."""
        with self._cond:
            current = self._live.get(task_id)
            return current is not None and current[0].due_ms == due_ms

    def remove(self, task_id: str) -> bool:
        with self._cond:
            return self._live.pop(task_id, None) is not None

    def remove_shards(self, shards: set[int]) -> int:
        """Forget every entry of these shards (the node lost them)."""
        with self._cond:
            gone = [tid for tid, (e, _) in self._live.items() if e.shard_id in shards]
            for tid in gone:
                del self._live[tid]
            self._compact_if_stale()
            return len(gone)

    def pause(self, topics: Iterable[str]) -> tuple[int, set[str]]:
        """From now on hold no entry of these topics (and drop those held); returns the entries
        dropped and the topics no longer paused, whose tasks memory must read again."""
        with self._cond:
            paused = frozenset(topics)
            resumed, self._paused = set(self._paused - paused), paused
            dropped = 0
            for topic in paused:
                for _, seq, tid in self._heaps.pop(topic, ()):
                    current = self._live.get(tid)
                    if current is not None and current[1] == seq:
                        del self._live[tid]
                        dropped += 1
                    self._items -= 1
                self._due.pop(topic, None)
            return dropped, resumed

    def clear(self) -> None:
        with self._cond:
            self._live.clear()
            self._heaps.clear()
            self._index.clear()
            self._due.clear()
            self._credit.clear()
            self._items = 0
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
            if not skip:
                heads = [h for h in map(self._head, list(self._due)) if h is not None]
                top = self._index_top()
                if top is not None:
                    heads.append(top[0])
            else:
                heads = [h for h in map(self._head, [t for t in self._heaps if t not in skip]) if h is not None]
            return min(heads, default=None)

    def count(self, topic: str) -> int:
        """About how many entries of the topic memory holds (re-timed or removed ones may count)."""
        with self._cond:
            return len(self._heaps.get(topic, ()))

    def due_now(self, topics: Iterable[str]) -> dict[str, int]:
        """Entries of these topics due by now (held back by their gate, if still here)."""
        with self._cond:
            now = self._clock.now_ms()
            return {t: sum(1 for at, seq, tid in self._heaps.get(t, ()) if at <= now and self._live.get(tid, (0, -1))[1] == seq)
                    for t in topics}

    def kick(self) -> None:
        """The gate changed (a limit, a result freeing a slot): look at held-back topics again."""
        with self._cond:
            self._cond.notify_all()

    def take_due(self, max_items: int, timeout: float | None = None, lead_ms: int = 0,
                 gather_ms: int = 0) -> list[Entry]:
        """Remove and return up to max_items entries due within lead_ms from now, waiting for the
        first one the gate lets go.

        With gather_ms, it waits until the first entry is due within lead_ms - gather_ms and then
        takes everything due within lead_ms: a taker that keeps up takes about gather_ms worth of
        entries each time instead of one at a time.

        Returns [] when the timeout passes with nothing due, or when the queue is closed.
        """
        deadline = None if timeout is None else self._clock.monotonic() + timeout
        wake_ms = lead_ms - min(gather_ms, lead_ms)
        with self._cond:
            while not self._closed:
                now = self._clock.now_ms()
                limit = now + lead_ms
                self._activate(limit)
                ready, again = self._ready(now, limit, wake_ms)
                if ready:
                    return self._take(ready, now, limit, max_items)
                top = self._index_top()
                if top is not None:
                    again = min(again, top[0] - wake_ms) if again is not None else top[0] - wake_ms
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

    def _activate(self, limit: int) -> None:
        """Topics whose head is due by `limit` join the round-robin ring."""
        while True:
            top = self._index_top()
            if top is None or top[0] > limit:
                return
            heapq.heappop(self._index)
            self._due[top[1]] = None

    def _ready(self, now: int, limit: int, wake_ms: int) -> tuple[dict[str, int], int | None]:
        """The ring's topics that may give entries now, with how many; else when to look again
        (a head not yet within the gather, a held-back topic's next chance)."""
        ready: dict[str, int] = {}
        again: int | None = None
        for topic in list(self._due):
            head = self._head(topic)
            if head is None or head > limit:
                self._leave(topic, head)
                continue
            n, retry_at = self._gate.allowance(topic, now)
            if n <= 0:
                at = retry_at                   # None: until kick()
            elif head > now + wake_ms:
                at = head - wake_ms             # gathering: not yet
            else:
                ready[topic] = n
                continue
            if at is not None:
                again = at if again is None else min(again, at)
        return ready, again

    def _take(self, ready: dict[str, int], now: int, limit: int, max_items: int) -> list[Entry]:
        """Weighted round robin over the ready topics in ring order (QUANTUM x weight entries per
        round each; one entry costs one, so this is deficit round robin with nothing to carry
        over); the ring turns past the last topic served, so the next take starts with the one after it."""
        out: list[Entry] = []
        taken: dict[str, int] = {}
        last, cut_short = None, False
        ring = [t for t in self._due if t in ready]
        while ring and len(out) < max_items:
            for topic in list(ring):
                room = max_items - len(out)
                share = self._credit.pop(topic, 0) or QUANTUM * self._gate.weight(topic)
                n = min(room, ready[topic], share if len(ring) > 1 else room)
                got = self._pop(topic, limit, n)
                out.extend(got)
                ready[topic] -= len(got)
                taken[topic] = taken.get(topic, 0) + len(got)
                last = topic
                head = self._head(topic)
                if head is None or head > limit:
                    self._leave(topic, head)
                    ring.remove(topic)
                elif ready[topic] <= 0 or len(got) < n:
                    ring.remove(topic)
                elif len(out) >= max_items and len(ring) > 1 and len(got) < share:
                    # Cut short by the take's size: the rest of its turn opens the next take.
                    self._credit[topic], cut_short = share - len(got), True
                if len(out) >= max_items:
                    break
        if last in self._due:       # the next take starts after the last topic served (or with it, cut short)
            order = list(self._due)
            cut = order.index(last) + (0 if cut_short else 1)
            self._due = dict.fromkeys(order[cut:] + order[:cut])
        for topic, n in taken.items():
            if n:
                self._gate.took(topic, n, now)
        return out

    def _pop(self, topic: str, limit: int, n: int) -> list[Entry]:
        out = []
        heap = self._heaps.get(topic)
        while heap and len(out) < n and heap[0][0] <= limit:
            _, seq, tid = heapq.heappop(heap)
            self._items -= 1
            current = self._live.get(tid)
            if current is not None and current[1] == seq:
                del self._live[tid]
                out.append(current[0])
        return out

    def _head(self, topic: str) -> int | None:
        """The topic's earliest live entry's time (stale items dropped); None when it has none."""
        heap = self._heaps.get(topic)
        while heap:
            at, seq, tid = heap[0]
            current = self._live.get(tid)
            if current is not None and current[1] == seq:
                return at
            heapq.heappop(heap)
            self._items -= 1
        self._heaps.pop(topic, None)
        return None

    def _leave(self, topic: str, head: int | None) -> None:
        """Out of the ring: nothing of the topic is due by the limit (any more)."""
        self._due.pop(topic, None)
        self._credit.pop(topic, None)
        if head is not None:
            heapq.heappush(self._index, (head, topic))

    def _index_top(self) -> tuple[int, str] | None:
        """The earliest (head, topic) of the topics not in the ring, stale items fixed on the way."""
        while self._index:
            at, topic = self._index[0]
            if topic in self._due:
                heapq.heappop(self._index)
                continue
            head = self._head(topic)
            if head is None:
                heapq.heappop(self._index)
            elif head != at:
                heapq.heapreplace(self._index, (head, topic))
            else:
                return at, topic
        return None

    def _compact_if_stale(self) -> None:
        if self._items > 2 * len(self._live) + 1024:
            heaps: dict[str, list[tuple[int, int, str]]] = {}
            for tid, (e, seq) in self._live.items():
                heaps.setdefault(e.topic, []).append((e.at_ms, seq, tid))
            for heap in heaps.values():
                heapq.heapify(heap)
            self._heaps, self._items = heaps, len(self._live)
            self._due = {t: None for t in self._due if t in heaps}
            self._index = [(h[0][0], t) for t, h in heaps.items() if t not in self._due]
            heapq.heapify(self._index)
