"""Hints: a task due soon reaches the memory of its shard's owner at once, whichever node took it.

A node that owns no shard it may claim on (drained, just joined, its ZooKeeper session suspended)
still accepts submits: their tasks go to other nodes' shards, whose owners would otherwise find
them only at their next full re-read of the window (up to DELAYQ_FULL_SCAN_MS, longer while a
backlog pauses it). So the accepting node writes a hint (shard, task, due) for each such task due
within the window (`write`, with its topic, whose flow controls it is under), after the task itself committed, and every node reads and deletes the
hints of its own shards every `poll_ms` (`HintReader`), offering the tasks to its memory. A hint is
only a nudge: the claim still checks MySQL, so a stale hint (the task cancelled, rescheduled, or
already fired) costs nothing; a lost one (the node died between the two writes) leaves the task to
the re-read.

Thread: HintReader, one, owned here.
"""
from __future__ import annotations

import logging
from typing import Sequence

from sqlalchemy import Engine, delete, insert, tuple_

from delayq import tables
from delayq.db import HeldConnection, unavailable_on_failure
from delayq.errors import Unavailable
from delayq.nodes.delayqueue import DelayQueue, Entry
from delayq.nodes.ownership import Ownership
from delayq.nodes.threads import NodeThread

log = logging.getLogger(__name__)

HINT = tables.hint


def write(engine: Engine, entries: Sequence[Entry]) -> None:
    """Hints for tasks of other nodes' shards (best effort: a failure is logged)."""
    if not entries:
        return
    try:
        with unavailable_on_failure(), engine.begin() as conn:
            conn.execute(insert(HINT).prefix_with("IGNORE"),
                         [{"shard_id": e.shard_id, "task_id": e.task_id, "due_ms": e.due_ms, "topic": e.topic}
                          for e in entries])
    except Unavailable as e:
        log.warning("could not hint %d tasks to their shards' owners: %s; their re-read finds them", len(entries), e)


class HintReader(NodeThread):
    name = "hints"

    def __init__(self, engine: Engine, queue: DelayQueue, ownership: Ownership, *, poll_ms: int, batch: int = 1000):
        """engine: an autocommit engine; the reader keeps one of its connections."""
        super().__init__()
        self._queue, self._ownership = queue, ownership
        self._held = HeldConnection(engine)
        self._poll_s, self._batch = poll_ms / 1000.0, batch
        self._shards: list[int] = []
        self._query = ""

    def _run(self) -> None:
        failing = False
        try:
            while not self._stop.wait(self._poll_s):
                try:
                    while self.read_once() >= self._batch:
                        pass
                    failing = False
                except Unavailable as e:
                    if not failing:
                        log.warning("reading hints failed: %s; retrying", e)
                    failing = True
                    self._stop.wait(1.0)
        finally:
            self._held.close()

    def read_once(self) -> int:
        """One read (on the reader's own autocommit connection: one round trip when there is
        nothing, which is nearly always)."""
        shards = sorted(self._ownership.shards()) if self._ownership.claimable else []
        if not shards:
            return 0
        if shards != self._shards:
            # The statement as MySQL reads it, made once per set of shards (integers, written out):
            # a Core select with its IN list bound anew on every read cost 2-3 times the CPU of the
            # whole read, and an idle node reads 20 times a second.
            self._shards = shards
            self._query = (f"SELECT shard_id, task_id, due_ms, topic FROM {HINT.name} "
                           f"WHERE shard_id IN ({','.join(str(int(s)) for s in shards)}) LIMIT {int(self._batch)}")
        with self._held.use() as conn:
            rows = conn.exec_driver_sql(self._query).all()
            if rows:     # a second reader of the same shard (ownership moving) only repeats a nudge
                conn.execute(delete(HINT).where(tuple_(HINT.c.shard_id, HINT.c.task_id).in_(
                    [(r.shard_id, r.task_id) for r in rows])))
        if rows:
            self._queue.offer_written([Entry(r.task_id, r.shard_id, r.due_ms, topic=r.topic) for r in rows],
                                      self._ownership.shards())
        return len(rows)
