"""ClaimLease: whether a claim made a moment ago may still be published.

A claim in MySQL is fenced by the shard's epoch, but the publish that follows it is not: a node
stopped between the two (SIGSTOP, a long GC pause, a frozen VM) can wake after its shards went
to another node, which has meanwhile timed the attempt out and dispatched the next one. Publishing
then would deliver the task twice, the second time after it may have finished. So an attempt is
published only while its claim is provably current:

- within `lease_ms` of the moment the claim was issued, measured on CLOCK_BOOTTIME (it keeps
  running through a stopped process and a suspended machine; wall time may jump), and
- while no ZooKeeper session break and no shard loss happened since (Ownership.breaks).

A node's shards move only after its session expired, which takes the session timeout (2 s at the
least) after the node stopped answering: a lease well below that cannot outlive the ownership it
was taken under. An expired claim is not published; it goes back to DELAY with its attempt number
(conditional on still being that attempt, READY), so nothing is lost and nothing sent twice.

What remains: the publisher thread checks the lease just before it writes the frames to the
socket; a pause that falls in the few microseconds between that check and the write, and lasts
past the session timeout, still publishes. Frames already written are in the kernel's buffers and
reach the broker while the node is stopped, long before another node may claim the task.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from delayq.nodes.ownership import Ownership

_BOOTTIME = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


def boottime() -> float:
    """Seconds since boot, suspend included."""
    return time.clock_gettime(_BOOTTIME)


@dataclass(frozen=True)
class Lease:
    taken: float        # boottime seconds, read before the claim was sent
    breaks: int         # Ownership.breaks at that moment


class ClaimLease:
    def __init__(self, ownership: Ownership, lease_ms: int, clock: Callable[[], float] = boottime):
        self._ownership, self._lease_s, self._clock = ownership, lease_ms / 1000.0, clock

    def take(self) -> Lease:
        """Call before sending the claim: the lease runs from here."""
        return Lease(self._clock(), self._ownership.breaks)

    def current(self, lease: Lease) -> bool:
        return self._ownership.breaks == lease.breaks and self._clock() - lease.taken <= self._lease_s
