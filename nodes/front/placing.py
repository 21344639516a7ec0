"""Placing: where a task written as DELAY goes on this node, for the front's calls (submit,
reschedule, cancel): which shard a new or moved task takes, and this node's memory after the
commit.

A task due within the look-ahead window goes to one of this node's shards, straight into its
memory; a later one to any shard, evenly (delayq.nodes.cluster.ownership). Memory is a cache:
what it misses the loader reads (docs/ARCHITECTURE.md, invariant 1).

Thread-safe: the DelayQueue and Ownership it holds are.
"""
from __future__ import annotations

from typing import Iterable, Sequence

from delayq.nodes.cluster.ownership import Ownership
from delayq.nodes.memory.delayqueue import DelayQueue, Entry


class Placing:
    def __init__(self, queue: DelayQueue, ownership: Ownership, *, window_ms: int):
        self._queue, self._ownership, self._window_ms = queue, ownership, window_ms

    def shards(self, dues: Sequence[int], now_ms: int, spread: Sequence[bool]) -> list[int]:
        """A shard for each new task due at dues[i]; spread[i]: its topic has a rate limit, so its
        tasks go to every shard (each node fires its share of the rate), soon due or not."""
        near_before = now_ms + self._window_ms
        return self._ownership.pick_shards([due < near_before and not s for due, s in zip(dues, spread)])

    def moved_shard(self, due_ms: int, now_ms: int) -> int | None:
        """The shard a rescheduled task moves to: one of ours when it is now due soon (it goes
        straight into our memory), None to keep its own."""
        if due_ms < now_ms + self._window_ms and self._ownership.shards():
            return self._ownership.pick_shard(near=True)
        return None

    def offer(self, entries: Iterable[Entry]) -> None:
        """Tasks just committed as DELAY: those due within the window into memory, ours or the
        shard owner's through a hint (delayq.nodes.memory.hints)."""
        self._queue.offer_written(entries)

    def forget(self, task_id: str) -> None:
        """The task is no longer DELAY at the time memory knew (cancelled, moved)."""
        self._queue.remove(task_id)
