"""Spreading a topic's tasks over every shard when it gets a rate limit.

A task due within the window goes to a shard of the node that takes it (straight into its memory),
but for a topic with a rate limit: each node fires its part of the rate, by its part of the shards
(delayq.nodes.memory.flow), so such a topic's tasks must spread over every shard
(delayq.nodes.front.handler). Tasks taken before the limit was set sit on the shards of the nodes
that took them and would drain at those nodes' part of the rate only. So when a topic gets a rate
limit, every node moves the tasks of it that its memory holds onto shards picked by task id over
all of the cluster's (delayq.store.placement), tells the new owners (hints), and keeps those that
stayed its own.

Runs on the thread that applies a change of the services (the services' Watch); a topic's memory holds
at most its budget of tasks (delayq.nodes.memory.flow.Flow.limited), so this moves at most that many. A
move MySQL refuses is left undone: those tasks fire at this node's share of the rate.
"""
from __future__ import annotations

import logging
import zlib
from typing import Callable

from sqlalchemy import Engine

from delayq import errors
from delayq.db import retry_lock_conflicts
from delayq.nodes.memory.delayqueue import DelayQueue, Entry
from delayq.nodes.cluster.ownership import Ownership
from delayq.store import placement

log = logging.getLogger(__name__)
BATCH = 1000


def spreader(engine: Engine, queue: DelayQueue, ownership: Ownership) -> Callable[[str], int]:
    def spread(topic: str) -> int:
        every, mine = ownership.all_shards(), ownership.shards()
        if not every:
            return 0
        entries = [e for e in queue.entries_of(topic) if e.shard_id in mine]
        moves = {e.task_id: every[zlib.crc32(e.task_id.encode()) % len(every)] for e in entries}
        entries = [e for e in entries if moves[e.task_id] != e.shard_id]
        moved = 0
        for i in range(0, len(entries), BATCH):
            batch = entries[i:i + BATCH]
            done = _move(engine, {e.task_id: moves[e.task_id] for e in batch})
            if done is None:
                log.warning("could not spread %s's tasks over the cluster (MySQL): the rest fire at this "
                            "node's share of its rate", topic)
                break
            placed = [Entry(e.task_id, moves[e.task_id], done[e.task_id], topic=e.topic)
                      for e in batch if e.task_id in done]
            for e in placed:
                queue.remove(e.task_id)
            queue.put_back(placed)          # ours stay, the others go to their owners (hints)
            moved += len(placed)
        if moved:
            log.info("topic %s has a rate limit now: %d of its tasks moved onto every node's shards", topic, moved)
        return moved
    return spread


def _move(engine: Engine, targets: dict[str, int]) -> dict[str, int] | None:
    """placement.move, tried again on a lock conflict with a claim or a submit; None when MySQL fails."""
    try:
        return retry_lock_conflicts(lambda: placement.move(engine, targets))
    except errors.Unavailable as e:
        log.warning("moving tasks: %s", e)
        return None
