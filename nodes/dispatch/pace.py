"""ClaimPace: how many due tasks a lane may claim now, so that each claim is written to the broker
within its lease (delayq.nodes.dispatch.lease) whatever the node's load.

A claim's lease runs from the moment the claim is sent: through the claim itself, the wait behind
what the lane claimed before, and the publish. After an outage a lane finds thousands of tasks
overdue; claiming two full batches at once (DELAYQ_DISPATCH_BATCH each) is right on an idle node,
but on a busy one the second batch waited behind the first past the lease and went back to DELAY
unsent, to be claimed and to wait again. So the lane claims no more than it can write within SHARE
of the lease, measured as it runs:

    room = (SHARE * lease - recent claim time) / recent cost per attempt - unwritten

where the cost is the time the lane's recent writes took (from one batch's write to the next's
while the lane was busy, or from a batch's release to its write after it was idle) over the
attempts they wrote, the claim time the mean of recent claims', and `unwritten` counts the
attempts claimed and neither written nor given up yet, and those a claim is being made for.
Capped by `most` per claim and `most * held_batches` unwritten (the lane's limits on an idle
node). Until a first write was measured (at the start, and again after claims failed: MySQL was
away, and what follows is a catch-up on a node and a MySQL busier than before) a claim takes FLOOR
tasks, and none is made while one's attempts are unwritten. With nothing unwritten, a claim may always take FLOOR tasks,
however slow the writes were: the lane never stalls, and measures again.

Worked example: lease 1.5 s (SHARE: 1 s), claims taking 0.2 s, 1 ms per attempt: 800 unwritten
at most, so with 500 waiting a further claim takes 300. At 4 ms per attempt (a node sharing its
CPUs) 200: the catch-up goes out in claims of 200 instead of expiring in claims of 500.

Thread-safe: the claiming threads reserve and claim, the releaser and the publisher's thread tell
of writes and of attempts given up.
"""
from __future__ import annotations

import collections
import contextlib
import threading
from typing import Callable, Iterator

SHARE = 2 / 3       # of the lease spent before the write, at most; the rest is margin for a misestimate
RECENT = 16         # claims and writes remembered
FLOOR = 50          # a claim with nothing else unwritten takes this many whatever was measured


class ClaimPace:
    def __init__(self, lease_s: float, most: int, held_batches: int, clock: Callable[[], float]):
        self._budget_s, self._most, self._cap, self._clock = SHARE * lease_s, most, most * held_batches, clock
        self._lock = threading.Condition()       # notified when attempts are written or given up
        self._claims: collections.deque[float] = collections.deque(maxlen=RECENT)
        self._writes: collections.deque[tuple[int, float]] = collections.deque(maxlen=RECENT)   # (n, seconds)
        self._unwritten = 0
        self._reserved = 0
        self._last_write = 0.0

    @property
    def unwritten(self) -> int:
        with self._lock:
            return self._unwritten + self._reserved

    def room(self, wait_s: float = 0.0) -> int:
        """Tasks the next claim may take now (0: none, after waiting up to wait_s for a write)."""
        with self._lock:
            self._lock.wait_for(lambda: self._room() > 0, wait_s)
            return self._room()

    def _room(self) -> int:
        """room(), under the lock."""
        waiting = self._unwritten + self._reserved
        left = self._cap - waiting
        written = sum(n for n, _ in self._writes)
        if not written:
            # Nothing measured since the start or an outage: small claims until one is written.
            # Each claiming thread may try one (while MySQL is away they take turns retrying).
            return 0 if self._unwritten else min(self._most, FLOOR)
        cost = sum(s for _, s in self._writes) / written
        claim_s = sum(self._claims) / len(self._claims) if self._claims else 0.0
        fits = int(max(0.0, self._budget_s - claim_s) / cost) if cost > 0 else self._cap
        left = min(left, fits - waiting)
        return min(self._most, max(left, 0 if waiting else FLOOR))

    def restart(self) -> None:
        """Forget what was measured: after an outage the node's load (and MySQL's) is not what it was."""
        with self._lock:
            self._writes.clear()
            self._claims.clear()
            self._lock.notify_all()

    @contextlib.contextmanager
    def reserving(self, n: int) -> Iterator[None]:
        """Count n as unwritten while a claim of up to n tasks is taken and made (other claiming
        threads see it), replaced by what the claim took (claimed())."""
        with self._lock:
            self._reserved += n
        try:
            yield
        finally:
            with self._lock:
                self._reserved -= n
                self._lock.notify_all()

    def claimed(self, n: int, took_s: float) -> None:
        with self._lock:
            self._unwritten += n
            self._claims.append(took_s)

    def released(self) -> float:
        """The instant a batch leaves the release heap (what written() measures from when idle)."""
        return self._clock()

    def written(self, n: int, released: float) -> None:
        """n attempts were just written to the broker (or refused at the write: either way done)."""
        with self._lock:
            now = self._clock()
            if n > 0:
                self._writes.append((n, now - max(released, self._last_write)))
            self._last_write = now
            self._unwritten = max(0, self._unwritten - n)
            self._lock.notify_all()

    def handoff(self, n: int, released: float) -> Handoff:
        """A batch of n attempts handed to the publisher (released from the heap at `released`)."""
        return Handoff(self, n, released)

    def dropped(self, n: int) -> None:
        """n attempts will not be written (refused, held back, misfired, the broker away)."""
        with self._lock:
            self._unwritten = max(0, self._unwritten - n)
            self._lock.notify_all()


class Handoff:
    """One batch handed to the publisher, told to its pace once: at its write (its veto asked, on
    the publisher's thread), or, never written, at its first outcome (the broker away)."""

    def __init__(self, pace: ClaimPace, n: int, released: float):
        self._pace, self._n, self._released = pace, n, released
        self._lock = threading.Lock()
        self._told = False

    def done(self, written: bool) -> None:
        with self._lock:
            if self._told:
                return
            self._told = True
        if written:
            self._pace.written(self._n, self._released)
        else:
            self._pace.dropped(self._n)
