"""Moving tasks that wait (DELAY) to other shards, outside a reshard: a node spreading a topic's
tasks over every shard when the topic gets a rate limit (delayq.nodes.memory.spread).

Safe against the claims of the shards' old owner: a claim takes only rows still DELAY and still on
a shard it holds at its epoch, re-read under lock (delayq.store.tasks.TaskStore.claim), so a memory
copy left behind by a move can only fail to claim.
"""
from __future__ import annotations

import collections
from typing import Mapping

from sqlalchemy import Engine

from delayq import tables
from delayq.db import unavailable_on_failure
from delayq.lifecycle import Status
from delayq.store.sqltext import literal_ids

TASK = tables.task


def move(engine: Engine, targets: Mapping[str, int]) -> dict[str, int]:
    """Put each task still waiting on its target shard (task id -> shard), in one transaction
    (`engine` must not be an autocommit one: the rows stay locked from the read to the move).
    Returns the tasks moved, each with its due time as it is now."""
    if not targets:
        return {}
    with unavailable_on_failure(), engine.begin() as conn:
        waiting = {r[0]: r[1] for r in conn.exec_driver_sql(
            f"SELECT task_id, due_ms FROM {TASK.name} FORCE INDEX (PRIMARY) WHERE task_id IN ({literal_ids(targets)}) "
            "AND status = %s FOR UPDATE", (int(Status.DELAY),))}
        by_shard = collections.defaultdict(list)
        for task_id in waiting:
            by_shard[targets[task_id]].append(task_id)
        for shard, ids in by_shard.items():
            conn.exec_driver_sql(f"UPDATE {TASK.name} SET shard_id = %s WHERE task_id IN ({literal_ids(ids)}) "
                                 "AND status = %s", (shard, int(Status.DELAY)))
    return waiting
