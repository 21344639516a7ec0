"""Hints: a task due soon reaches the memory of its shard's owner at once, whichever node wrote it.

A node writes tasks into shards it does not own: a submit while it owns no shard it may claim on
(drained, just joined, its ZooKeeper session suspended), and whatever it writes back after a shard
moved away (a claim it could not publish, put back to DELAY; a retry). The owner would otherwise
find them only at its next full re-read of the window (up to DELAYQ_FULL_SCAN_MS, longer while a
backlog pauses it). So the DelayQueue gives every such entry due within the window to the node's
`Handover`, and so it does with the entries of a lost shard it was given in the last seconds
(delayq.nodes.memory.delayqueue, "Handover"). The HintReader's thread writes them as hints (shard, task,
due, topic) after the tasks themselves committed, and every node reads and deletes the hints of
its own shards every `poll_ms`, offering the tasks to its memory. A hint is only a nudge: the
claim still checks MySQL, so a stale hint (the task cancelled, rescheduled, or already fired)
costs nothing; a lost one (the node died between the two writes) leaves the task to the re-read.

Thread: HintReader, one, owned here; it writes the handover's hints and reads the node's own.
"""
from __future__ import annotations

import logging
import threading
from typing import Sequence

from sqlalchemy import Connection, Engine, delete, insert, tuple_

from delayq import tables
from delayq.clock import Clock
from delayq.db import HeldConnection
from delayq.errors import Unavailable
from delayq.nodes.memory.delayqueue import DelayQueue, Entry
from delayq.nodes.cluster.ownership import Ownership
from delayq.nodes.threads import NodeThread

log = logging.getLogger(__name__)

HINT = tables.hint


def write(conn: Connection, entries: Sequence[Entry]) -> None:
    conn.execute(insert(HINT).prefix_with("IGNORE"),
                 [{"shard_id": e.shard_id, "task_id": e.task_id, "due_ms": e.due_ms, "topic": e.topic} for e in entries])


class Handover:
    """Entries of shards this node does not own, due within the window, waiting to be written as
    hints for their owners. `give` never blocks (the DelayQueue calls it, from any thread, with no
    lock held); `take` hands the writer what waits. While MySQL is down they wait, up to `cap`
    entries; beyond that the oldest are left to the owners' re-read, with a warning."""

    def __init__(self, clock: Clock, window_ms: int, cap: int = 100_000):
        self._clock, self._window_ms, self._cap = clock, window_ms, cap
        self._lock = threading.Lock()
        self._waiting: list[Entry] = []
        self.given = threading.Event()     # set when entries wait: the writer's thread waits on it

    def give(self, entries: Sequence[Entry]) -> None:
        near = self._clock.now_ms() + self._window_ms
        soon = [e for e in entries if e.due_ms < near]
        if not soon:
            return
        with self._lock:
            self._waiting += soon
            over = len(self._waiting) - self._cap
            if over > 0:
                del self._waiting[:over]
        if over > 0:
            log.warning("%d hints for other nodes' shards not written (MySQL down, more than %d waiting): "
                        "their owners' re-read of the window finds them", over, self._cap)
        self.given.set()

    def take(self) -> list[Entry]:
        with self._lock:
            self.given.clear()
            taken, self._waiting = self._waiting, []
            return taken

    def restore(self, entries: list[Entry]) -> None:
        """Not written (MySQL down): first in line again."""
        with self._lock:
            self._waiting = entries + self._waiting
            if self._waiting:
                self.given.set()

    @property
    def waiting(self) -> int:
        with self._lock:
            return len(self._waiting)


class HintReader(NodeThread):
    name = "hints"

    def __init__(self, engine: Engine, queue: DelayQueue, ownership: Ownership, handover: Handover, *,
                 poll_ms: int, batch: int = 1000):
        """engine: an autocommit engine; the reader keeps one of its connections."""
        super().__init__()
        self._queue, self._ownership, self._handover = queue, ownership, handover
        self._held = HeldConnection(engine)
        self._poll_s, self._batch = poll_ms / 1000.0, batch
        self._shards: list[int] = []
        self._query = ""

    def _run(self) -> None:
        failing = False
        try:
            while not self._stop.is_set():
                self._handover.given.wait(self._poll_s)     # a poll, or hints to write at once
                try:
                    self.write_once()
                    while self.read_once() >= self._batch:
                        pass
                    failing = False
                except Unavailable as e:
                    if not failing:
                        log.warning("hints: %s; retrying", e)
                    failing = True
                    self._stop.wait(0.25)
            self.write_once()       # what the last of the node's writes handed over
        except Unavailable as e:
            log.warning("%d hints for other nodes' shards not written at stop: %s; their owners' re-read "
                        "finds them", self._handover.waiting, e)
        finally:
            self._held.close()

    def _interrupt(self) -> None:
        self._handover.given.set()       # end the wait at once

    def write_once(self) -> int:
        """Write what waits in the handover, a statement per batch."""
        entries = self._handover.take()
        done = 0
        try:
            with self._held.use() as conn:
                for done in range(0, len(entries), self._batch):
                    write(conn, entries[done:done + self._batch])
        except Unavailable:
            self._handover.restore(entries[done:])
            raise
        if entries:
            log.debug("handed %d tasks over to their shards' owners", len(entries))
        return len(entries)

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
            # A shard lost since the read: the queue hands its tasks over again.
            self._queue.offer_written([Entry(r.task_id, r.shard_id, r.due_ms, topic=r.topic) for r in rows])
        return len(rows)
