"""Fair share in memory: a due-time heap per topic, a heap of the topics' earliest entries (which
topics have something due, so a topic with nothing due costs nothing), and the ring of topics that
have, served by weighted round robin through a gate (delayq.nodes.memory.flow) that says how many of a
topic's due entries may go now.

Topics keeps the structure only; the DelayQueue (delayq.nodes.memory.delayqueue) owns the entries, the
lock and the waiting, and calls it under its lock. Heap items go stale when their entry is removed
or re-timed (the `live` map says which item is current) and are dropped on the way.
"""
from __future__ import annotations

import heapq
from typing import Callable, Iterable, Protocol

from delayq.store.values import Entry

QUANTUM = 32            # entries a topic of weight 1 may take per round when others have tasks due too

# Lanes (delayq.nodes.dispatch.lanes): a take for one lane sees only that lane's topics. A topic is
# backlogged, and its due entries go to the bulk lane, when more than BACKLOG of them are due
# already, or when its earliest is BEHIND_MS late (the prompt lane is not keeping up); otherwise
# they go to the prompt lane, which also takes every entry ahead of its due time (the start of a burst).
PROMPT, BULK = "prompt", "bulk"
BACKLOG = 100
BEHIND_MS = 100


class Gate(Protocol):
    def allowance(self, topic: str, now_ms: int) -> tuple[int, int | None]:
        """How many due entries of the topic may be taken now; with 0, when to ask again (ms)."""

    def took(self, topic: str, n: int, now_ms: int) -> None: ...

    def weight(self, topic: str) -> int: ...

    def on_change(self, listener: Callable[[], None]) -> None:
        """listener() after each change that may let held-back entries go (the queue's kick)."""


class Open:
    """No limits: every due entry may go, all topics weigh the same."""
    def allowance(self, topic: str, now_ms: int) -> tuple[int, int | None]:
        return 1 << 30, None

    def took(self, topic: str, n: int, now_ms: int) -> None:
        pass

    def weight(self, topic: str) -> int:
        return 1

    def on_change(self, listener: Callable[[], None]) -> None:
        pass        # never changes


class Topics:
    """Not thread-safe: the DelayQueue's lock guards every call."""

    def __init__(self, live: dict[str, tuple[Entry, int]], gate: Gate):
        self._live, self._gate = live, gate
        self._heaps: dict[str, list[tuple[int, int, str]]] = {}   # topic -> (at_ms, seq, task_id); stale skipped
        self._items = 0                                     # heap items, stale ones included
        self._index: list[tuple[int, str]] = []             # (head at_ms, topic) of topics not in _due
        self._due: dict[str, None] = {}                     # topics with entries due: the round-robin ring
        self._credit: dict[str, int] = {}                   # what is left of a turn a take's size cut short

    def push(self, e: Entry, seq: int) -> bool:
        """Add an entry (its `live` record made); True when it is a topic's new earliest, so that
        the consumers may have to wake earlier than they planned."""
        heap = self._heaps.get(e.topic)
        if heap is None:
            heap = self._heaps[e.topic] = []
        heapq.heappush(heap, (e.at_ms, seq, e.task_id))
        self._items += 1
        if heap[0][1] != seq:
            return False
        if e.topic in self._due:
            return True
        wake = not self._index or e.at_ms < self._index[0][0]
        heapq.heappush(self._index, (e.at_ms, e.topic))
        return wake

    def drop(self, topic: str) -> int:
        """Forget the topic's entries (paused); returns how many were live."""
        dropped = 0
        for _, seq, tid in self._heaps.pop(topic, ()):
            current = self._live.get(tid)
            if current is not None and current[1] == seq:
                del self._live[tid]
                dropped += 1
            self._items -= 1
        self._due.pop(topic, None)
        self._credit.pop(topic, None)
        return dropped

    def entries(self, topic: str) -> list[Entry]:
        """The topic's live entries (stale heap items skipped)."""
        out = []
        for _, seq, tid in self._heaps.get(topic, ()):
            current = self._live.get(tid)
            if current is not None and current[1] == seq:
                out.append(current[0])
        return out

    def clear(self) -> None:
        self._heaps.clear()
        self._index.clear()
        self._due.clear()
        self._credit.clear()
        self._items = 0

    def earliest(self, skip: Iterable[str] = ()) -> int | None:
        """The earliest live entry's time, but for the topics in `skip`."""
        skip = set(skip)
        if not skip:
            heads = [h for h in map(self._head, list(self._due)) if h is not None]
            top = self._index_top()
            if top is not None:
                heads.append(top[0])
        else:
            heads = [h for h in map(self._head, [t for t in self._heaps if t not in skip]) if h is not None]
        return min(heads, default=None)

    def count(self, topic: str) -> int:
        return len(self._heaps.get(topic, ()))

    def due_by(self, topic: str, now: int) -> int:
        return sum(1 for at, seq, tid in self._heaps.get(topic, ())
                   if at <= now and self._live.get(tid, (None, -1))[1] == seq)

    def ready(self, now: int, lead_ms: int, wake_ms: int, lane: str | None = None) -> tuple[dict[str, int], int | None]:
        """Topics due within lead_ms join the ring; returns the ring's topics that may give entries
        now (to this lane, if one is named), with how many, and otherwise when to look again (a head
        not yet within the gather, a held-back topic's next chance, the next topic's head)."""
        limit = now + lead_ms
        self._activate(limit)
        ready, again = self._ready(now, limit, wake_ms, lane)
        if not ready:
            top = self._index_top()
            if top is not None:
                again = min(again, top[0] - wake_ms) if again is not None else top[0] - wake_ms
        return ready, again

    def take(self, ready: dict[str, int], now: int, lead_ms: int, max_items: int) -> list[Entry]:
        return self._take(ready, now, now + lead_ms, max_items)

    def _activate(self, limit: int) -> None:
        """Topics whose head is due by `limit` join the round-robin ring."""
        while True:
            top = self._index_top()
            if top is None or top[0] > limit:
                return
            heapq.heappop(self._index)
            self._due[top[1]] = None

    def lane(self, topic: str, now: int) -> str:
        """The lane the topic's due entries go to now (its head is known to be live)."""
        heap = self._heaps[topic]
        if heap[0][0] <= now - BEHIND_MS:
            return BULK
        # Count the items due by now down the heap's tree, at most BACKLOG + 1 of them: a subtree
        # whose root is not due holds nothing due. Stale items count too: a rough figure is enough.
        found, todo = 0, [0]
        while todo and found <= BACKLOG:
            i = todo.pop()
            if i < len(heap) and heap[i][0] <= now:
                found += 1
                todo += (2 * i + 1, 2 * i + 2)
        return BULK if found > BACKLOG else PROMPT

    def _ready(self, now: int, limit: int, wake_ms: int, lane: str | None) -> tuple[dict[str, int], int | None]:
        """The ring's topics that may give entries now, with how many; else when to look again
        (a head not yet within the gather, a held-back topic's next chance)."""
        ready: dict[str, int] = {}
        again: int | None = None
        for topic in list(self._due):
            head = self._head(topic)
            if head is None or head > limit:
                self._leave(topic, head)
                continue
            if lane is not None and self.lane(topic, now) != lane:
                # The other lane's; a take there wakes this one. A prompt topic falling behind
                # turns bulk with no take at all.
                if lane == BULK:
                    again = head + BEHIND_MS if again is None else min(again, head + BEHIND_MS)
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
        out: list[Entry] = []
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

    def compact_if_stale(self) -> None:
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
