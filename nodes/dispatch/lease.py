"""ClaimLease: whether a claim made a moment ago may still be published.

A claim in MySQL is fenced by the shard's epoch, but the publish that follows it is not: a node
stopped between the two (SIGSTOP, a long GC pause, a frozen VM) can wake after its shards went
to another node, which has meanwhile timed the attempt out and dispatched the next one. Publishing
then would deliver the task twice, the second time after it may have finished. So an attempt is
published only while its claim is provably current:

- within `lease_ms` of the moment the claim was issued, measured on CLOCK_BOOTTIME (it keeps
  running through a stopped process and a suspended machine; wall time may jump),
- while no ZooKeeper session break happened since (Ownership.suspensions), and
- while its shard is still ours at the epoch the claim was fenced with (Ownership.holds).

A node's shards move only after its session expired, which takes the session timeout (2 s at the
least) after the node stopped answering: a lease well below that cannot outlive the ownership it
was taken under. A claim that is no longer current is not published; it goes back to DELAY with
its attempt number (conditional on still being that attempt, READY) and its due time, into memory
or to its shard's new owner (delayq.nodes.memory.hints), so nothing is lost, late or sent twice.

`refusal` says why not, and the reasons differ for the operator: a shard moved by plan (a
rebalance, a drain, a pin) is routine; a session broken means the node was cut off; a lease
outlived is one of two things, told apart by a PauseWatch (delayq.nodes.dispatch.pauses): the node
was stopped (PAUSED: the process did not run for part of the lease), or it ran and the claim
waited behind the node's own work (WAITED: more claimed than the node published within the lease,
which delayq.nodes.dispatch.pace keeps from happening).

A lease is never renewed: its proof of ownership is the claim's fence, checked by MySQL at the
claim. What keeps a large catch-up's claims publishable is claiming no more than the node
publishes within the lease (delayq.nodes.dispatch.pace), not a longer lease.

What remains: the publisher thread checks the lease just before it writes the frames to the
socket; a pause that falls in the few microseconds between that check and the write, and lasts
past the session timeout, still publishes. Frames already written are in the kernel's buffers and
reach the broker while the node is stopped, long before another node may claim the task.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterable, Mapping, Protocol, Sequence, TypeVar

from delayq.nodes.cluster.ownership import Ownership


class Sharded(Protocol):
    @property
    def shard_id(self) -> int: ...


S = TypeVar("S", bound=Sharded)      # a claimed task

_BOOTTIME = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)

PAUSED = "claim lease expired: the node was paused past it"
WAITED = "claim lease expired before its turn to publish: it waited behind the node's own backlog"
BROKEN = "the ZooKeeper session broke since the claim"
MOVED = "its shard moved to another node"


def boottime() -> float:
    """Seconds since boot, suspend included."""
    return time.clock_gettime(_BOOTTIME)


@dataclass(frozen=True, eq=False)
class Lease:
    """One claim's right to publish; also what the claim is fenced with (owner, shard -> epoch)."""
    taken: float                 # boottime seconds, read before the claim was sent
    suspensions: int             # Ownership.suspensions at that moment
    owner: str
    fence: Mapping[int, int]


class Pauses(Protocol):
    """delayq.nodes.dispatch.pauses.PauseWatch, as a lease asks it."""

    def paused_between(self, began: float, ended: float) -> float: ...


class NoPauses:
    """Where no watch runs: no pause is ever seen, so a lapsed lease is WAITED."""

    def paused_between(self, began: float, ended: float) -> float:
        return 0.0


class ClaimLease:
    def __init__(self, ownership: Ownership, lease_ms: int, clock: Callable[[], float] = boottime,
                 pauses: Pauses = NoPauses()):
        self._ownership, self._lease_s, self._clock, self._pauses = ownership, lease_ms / 1000.0, clock, pauses

    @property
    def seconds(self) -> float:
        return self._lease_s

    def take(self) -> Lease:
        """Call before sending the claim: the lease runs from here, and the claim uses its fence."""
        taken, suspensions = self._clock(), self._ownership.suspensions
        owner, fence = self._ownership.fence()
        return Lease(taken, suspensions, owner, fence)

    def refusal(self, lease: Lease, shards: Iterable[int]) -> str | None:
        """Why claims of these shards under this lease may not be published now (None: they may)."""
        return self._lapsed(lease) or self._moved(lease, shards)

    def current(self, lease: Lease, shards: Iterable[int] = ()) -> bool:
        return self.refusal(lease, shards) is None

    def refusal_of(self, held: Sequence[tuple[Sharded, Lease]]) -> str | None:
        """refusal() for a batch of claims (task, its lease): the first reason any of them has."""
        for lease, tasks in _by_lease(held):
            why = self.refusal(lease, {t.shard_id for t in tasks})
            if why is not None:
                return why
        return None

    def split(self, held: Sequence[tuple[S, Lease]]) -> tuple[list[tuple[S, Lease]], dict[str, list[S]]]:
        """The claims still current, and the others by the reason they are not (each lease and
        each of its shards looked at once, however many tasks it claimed)."""
        current: list[tuple[S, Lease]] = []
        refused: dict[str, list[S]] = {}
        for lease, tasks in _by_lease(held):
            lapsed = self._lapsed(lease)
            if lapsed is not None:
                refused.setdefault(lapsed, []).extend(tasks)
                continue
            moved = {s for s in {t.shard_id for t in tasks} if self._moved(lease, (s,))}
            for t in tasks:
                if t.shard_id in moved:
                    refused.setdefault(MOVED, []).append(t)
                else:
                    current.append((t, lease))
        return current, refused

    def _lapsed(self, lease: Lease) -> str | None:
        now = self._clock()
        if now - lease.taken > self._lease_s:
            # Stopped for part of it, the node may have lost its shards unaware: that is a pause.
            # Otherwise it ran all along and the claim waited for its turn.
            return PAUSED if self._pauses.paused_between(lease.taken, now) > 0 else WAITED
        if self._ownership.suspensions != lease.suspensions:
            return BROKEN
        return None

    def _moved(self, lease: Lease, shards: Iterable[int]) -> str | None:
        held = self._ownership.holds(lease.owner, {s: lease.fence.get(s, -1) for s in shards})
        return None if held else MOVED


def _by_lease(held: Sequence[tuple[S, Lease]]) -> list[tuple[Lease, list[S]]]:
    groups: dict[int, tuple[Lease, list[S]]] = {}
    for task, lease in held:
        groups.setdefault(id(lease), (lease, []))[1].append(task)
    return list(groups.values())
