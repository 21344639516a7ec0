"""An attempt on its way from its claim to its record, and where claimed attempts wait to go out.

    claim (Dispatcher) -> Attempt(task, lease, release_ms) -> ReleaseHeap -> decide() -> publish
        -> the batch's outcome handler (Recorder.on_outcome) -> Settled(attempt, outcome) -> MySQL

One value travels the whole way: the claimed task (which attempt its claim took), the lease that
says whether it may still be published, the instant it is released at, and, once handed to the
broker, when (`sent_ms`, the dispatch time its message and its execlog row carry). Whatever
happens to it is a `Settled`: what the Recorder writes (docs/ARCHITECTURE.md, invariant 4).

ReleaseHeap: the claimed attempts not yet published, earliest release first. The claiming threads
push, the releaser takes what is due; `len()` is what the claimers keep within HELD_BATCHES.
Thread-safe; `close()` wakes a waiting taker for good.
"""
from __future__ import annotations

import heapq
import itertools
import threading
from dataclasses import dataclass
from typing import Callable, Iterable

from delayq.nodes.dispatch.lease import Lease
from delayq.store.values import Claimed


@dataclass(eq=False, slots=True)
class Attempt:
    task: Claimed           # the task, and the attempt number its claim took
    lease: Lease            # the claim's right to be published (delayq.nodes.dispatch.lease)
    release_ms: int         # when it goes out: its due time, or its catch-up slot
    sent_ms: int = 0        # when it was handed to the broker (0: not yet)

    @property
    def shard_id(self) -> int:
        return self.task.shard_id


# What becomes of an attempt the dispatcher did not publish (the Recorder puts it back to DELAY):
HELD = "HELD"           # its service's exchange is unusable now
RETURNED = "RETURNED"   # its claim is no longer current


@dataclass(frozen=True, slots=True)
class Settled:
    """What became of an attempt, for the Recorder. `due_ms`: when a task put back to DELAY is due
    again (None: the Recorder's own retry delay)."""
    attempt: Attempt
    outcome: str            # delayq.nodes.amqp.confirms' outcomes, or HELD, RETURNED
    reason: str | None = None
    due_ms: int | None = None


class ReleaseHeap:
    def __init__(self, now_ms: Callable[[], int]):
        self._now_ms = now_ms
        self._cond = threading.Condition()
        self._heap: list[tuple[int, int, Attempt]] = []
        self._seq = itertools.count()
        self._closed = False

    def __len__(self) -> int:
        with self._cond:
            return len(self._heap)

    def push(self, attempts: Iterable[Attempt]) -> None:
        with self._cond:
            head = self._heap[0][0] if self._heap else None
            for a in attempts:
                heapq.heappush(self._heap, (a.release_ms, next(self._seq), a))
            if self._heap and (head is None or self._heap[0][0] < head):
                self._cond.notify_all()

    def take_due(self, max_items: int, timeout: float) -> list[Attempt]:
        """Up to max_items attempts released by now, waiting up to `timeout` s for the first; []
        when none came due in time, or when the heap is closed."""
        with self._cond:
            waited = False
            while not self._closed:
                now = self._now_ms()
                if self._heap and self._heap[0][0] <= now:
                    out: list[Attempt] = []
                    while self._heap and self._heap[0][0] <= now and len(out) < max_items:
                        out.append(heapq.heappop(self._heap)[2])
                    self._cond.notify_all()       # room for the claimers
                    return out
                if waited:
                    return []
                wait = timeout if not self._heap else min(timeout, (self._heap[0][0] - now) / 1000.0)
                waited = wait >= timeout
                self._cond.wait(max(0.0, wait))
            return []

    def wait_for_room(self, room: int, timeout: float) -> bool:
        """True once fewer than `room` attempts wait (at most `timeout` s)."""
        with self._cond:
            return self._cond.wait_for(lambda: len(self._heap) < room or self._closed, timeout) and \
                len(self._heap) < room

    def take_all(self) -> list[Attempt]:
        with self._cond:
            out = [a for _, _, a in sorted(self._heap)]
            self._heap.clear()
            self._cond.notify_all()
            return out

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
