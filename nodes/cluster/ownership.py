"""Ownership: the shards this node may claim, each with the epoch it was granted at.

The claim statement checks the same (owner, epoch) against job_shard in MySQL, so a stale view here
can only make a claim fail, never succeed wrongly. `claimable` is off while the node must not claim
at all (ZooKeeper session suspended). `suspensions` counts them, and `holds` says whether shards
are still ours at the epochs a claim was fenced with: a claim taken before a suspension, or of a
shard lost or granted anew since, may no longer be published (delayq.nodes.dispatch.lease).

Thread-safe. Listeners (gained, lost) run on the thread that changed the ownership.
"""
from __future__ import annotations

import builtins
import random
import threading
from typing import Callable, Iterable, Mapping, Sequence

Listener = Callable[[set[int], set[int]], None]


class Ownership:
    def __init__(self, node_id: str, rng: random.Random | None = None):
        self.node_id = node_id
        self._lock = threading.Lock()
        self._owner = node_id                  # the name job_shard records: node id, or node@session
        self._fence: dict[int, int] = {}
        self._all: tuple[int, ...] = ()      # the shards new tasks may go to
        self._assigned = 0
        self._all_set: frozenset[int] = frozenset()
        self._near: tuple[int, ...] = ()     # ours that new tasks may go to (kept with _fence, _all)
        self._claimable = True
        self._suspensions = 0
        self._listeners: list[Listener] = []
        self._rng = rng or random.Random()

    def on_change(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def set(self, fence: dict[int, int], all_shards: Iterable[int], owner: str | None = None,
            assigned: int | None = None) -> None:
        """Replace the owned shards (shard -> epoch), held as `owner`, and the cluster's shard list
        (`assigned`: how many shards the assignment gives out, draining ones of a reshard included)."""
        with self._lock:
            before = set(self._fence)
            changed = {s for s, e in fence.items() if self._fence.get(s) != e}
            if owner is not None and owner != self._owner:
                self._owner, changed = owner, set(fence)
            self._fence = dict(fence)
            self._all = tuple(sorted(all_shards))
            self._all_set = frozenset(self._all)
            self._assigned = assigned or len(self._all)
            # Only shards new tasks may go to: during a reshard the draining ones are excluded.
            self._near = tuple(s for s in sorted(self._fence) if s in self._all_set) if self._all_set \
                else tuple(sorted(self._fence))
        gained, lost = changed, before - set(fence)
        if gained or lost:
            for listener in self._listeners:
                listener(gained, lost)

    def set_claimable(self, claimable: bool) -> None:
        """Suspend or resume claiming; resuming tells the listeners the shards are usable again."""
        with self._lock:
            resumed = claimable and not self._claimable
            if not claimable:
                self._suspensions += 1
            self._claimable = claimable
            shards = set(self._fence)
        if resumed and shards:
            for listener in self._listeners:
                listener(shards, set())

    @property
    def suspensions(self) -> int:
        with self._lock:
            return self._suspensions

    def holds(self, owner: str, fence: Mapping[int, int]) -> bool:
        """True while every one of these shards is held by `owner` at the epoch given."""
        with self._lock:
            return owner == self._owner and all(self._fence.get(s) == e for s, e in fence.items())

    @property
    def claimable(self) -> bool:
        with self._lock:
            return self._claimable

    def fence(self) -> tuple[str, dict[int, int]]:
        """(owner, shard -> epoch) to claim with; no shards while claiming is suspended."""
        with self._lock:
            return self._owner, (dict(self._fence) if self._claimable else {})

    def shards(self) -> builtins.set[int]:
        with self._lock:
            return set(self._fence)

    def owns(self, shard_id: int) -> bool:
        with self._lock:
            return shard_id in self._fence

    @property
    def assigned(self) -> int:
        """Shards the assignment gives out, the draining ones of a reshard included: what each
        node's share of a cluster-wide limit is counted against."""
        with self._lock:
            return self._assigned

    def all_shards(self) -> tuple[int, ...]:
        with self._lock:
            return self._all

    def pick_shard(self, near: bool) -> int:
        """A shard for a new task: one of ours when it is due soon (it goes straight to memory),
        otherwise any shard, evenly."""
        return self.pick_shards([near])[0]

    def pick_shards(self, near: Sequence[bool]) -> list[int]:
        """pick_shard for many new tasks at once (one hold of the lock)."""
        with self._lock:
            ours = self._near if self._claimable else ()
            every = self._all
        rand = self._rng.random
        picked = []
        for n in near:
            pool = ours if n and ours else every
            if not pool:
                raise LookupError("the cluster has no shards yet")
            picked.append(pool[int(rand() * len(pool))])
        return picked
