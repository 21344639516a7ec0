"""Pure shard-assignment strategy: shard -> node; balanced, sticky, deterministic.

Rules applied by :func:`assign`:

* Eligible nodes are ``members - drained``. Non-members own nothing; drained
  members own only the shards pinned to them.
* Pins: a shard pinned to a member goes to that member (even a drained one)
  and wins over balance. Pins to absent nodes, or to shards outside
  ``0..shard_count-1``, are ignored; those shards are simply free.
* Balance ("water-filling"): with ``p[n]`` the shards pinned to eligible node
  ``n``, the free shards are spread so that the totals ``t[n]`` (pins
  included) are as even as possible: for a level ``L``, every node gets
  ``t[n] = max(p[n], L)`` or ``max(p[n], L + 1)``. Equivalently: an eligible
  node that owns any free shard owns at most one more shard than any other
  eligible node. Without pins this is plain +-1 balance.
* The nodes that get ``L + 1`` are those with the highest current load
  (pinned count + free shards they already own), ties by node id; this
  minimises moves.
* Sticky: each eligible node keeps the free shards it owns, up to its quota
  (lowest shard ids first). Only its surplus, unowned shards and shards of
  ineligible owners move; they go, in ascending shard order, to the nodes
  below quota (ascending node id). The move count is the minimum possible.
* Deterministic: ids are sorted, no randomness, mapping order is irrelevant.

Example: 64 shards on a, b, c own 22/21/21. Adding ``d`` makes every quota
16: ``a`` gives up 6 shards, ``b`` and ``c`` 5 each, all 16 go to ``d`` and
no other shard moves. Removing ``d`` again moves only d's 16 shards.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["AssignmentInput", "assign", "moves", "balanced_assign"]


@dataclass(frozen=True)
class AssignmentInput:
    """Everything :func:`assign` looks at; see the module docstring."""

    shard_count: int  # logical shards 0..shard_count-1
    members: frozenset[str]  # live node ids
    current: Mapping[int, str]  # previous shard -> node (may be stale)
    drained: frozenset[str] = frozenset()  # members that must own nothing
    pinned: Mapping[int, str] = field(default_factory=dict)  # shard -> node


def assign(inp: AssignmentInput) -> dict[int, str]:
    """Return shard -> node for every shard 0..shard_count-1.

    Returns ``{}`` when there is no eligible node, except that shards pinned
    to a (drained) member are still returned. Raises ``ValueError`` for a
    negative ``shard_count``. The result is sorted by shard.
    """
    if inp.shard_count < 0:
        raise ValueError(f"shard_count must be >= 0, got {inp.shard_count}")
    pins = {s: n for s, n in inp.pinned.items()
            if 0 <= s < inp.shard_count and n in inp.members}
    eligible = sorted(inp.members - inp.drained)
    if not eligible:
        return dict(sorted(pins.items()))

    pin_count = {n: 0 for n in eligible}
    for node in pins.values():
        if node in pin_count:
            pin_count[node] += 1
    free = [s for s in range(inp.shard_count) if s not in pins]
    held: dict[str, list[int]] = {n: [] for n in eligible}
    for s in free:  # ascending, so held lists are sorted
        owner = inp.current.get(s)
        if owner in held:
            held[owner].append(s)
    quota = _free_quotas(len(free), pin_count, {n: len(v) for n, v in held.items()})

    result = dict(pins)
    for node in eligible:
        for s in held[node][:quota[node]]:
            result[s] = node
    pool = iter([s for s in free if s not in result])
    for node in eligible:
        for _ in range(quota[node] - min(quota[node], len(held[node]))):
            result[next(pool)] = node
    return dict(sorted(result.items()))


def _free_quotas(free_count: int, pin_count: Mapping[str, int],
                 held_count: Mapping[str, int]) -> dict[str, int]:
    """Number of free shards per eligible node (water-filling over pins)."""
    level = min(pin_count.values())
    # Raise the level while the free shards can lift every node below it.
    while sum(max(0, level + 1 - p) for p in pin_count.values()) <= free_count:
        level += 1
    quota = {n: max(0, level - p) for n, p in pin_count.items()}
    extra = free_count - sum(quota.values())  # < number of candidates
    candidates = sorted((n for n, p in pin_count.items() if p <= level),
                        key=lambda n: (-(pin_count[n] + held_count[n]), n))
    for node in candidates[:extra]:
        quota[node] += 1
    return quota


def moves(before: Mapping[int, str],
          after: Mapping[int, str]) -> dict[int, tuple[str | None, str | None]]:
    """Shards whose owner changes: shard -> (old owner or None, new owner or None).

    Covers the union of both mappings' shards, sorted by shard.
    """
    return {s: (before.get(s), after.get(s))
            for s in sorted(set(before) | set(after))
            if before.get(s) != after.get(s)}


def balanced_assign(shard_count: int, members: frozenset[str] | set[str]) -> dict[int, str]:
    """Fresh even assignment ignoring stickiness (for ``delayq rebalance``).

    Shard ``i`` goes to ``sorted(members)[i % len(members)]``; ``{}`` when
    there are no members. No drains or pins: pass eligible members only.
    """
    if shard_count < 0:
        raise ValueError(f"shard_count must be >= 0, got {shard_count}")
    nodes = sorted(members)
    if not nodes:
        return {}
    return {s: nodes[s % len(nodes)] for s in range(shard_count)}
