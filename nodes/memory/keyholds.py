"""KeyHolds: the KEEP_IF_ACTIVE tasks memory holds back while an attempt of their key is in flight.

A claim leaves such a task DELAY (delayq.store.oneflight) and the dispatcher hands it here
(`hold`): it goes back into the DelayQueue to be handed out again RECHECK_MS later, and is noted
under its (topic, key). When an attempt of the key ends on this node (a result applied here, a
time-out, the confirm that finishes a fire-and-forget attempt: delayq.nodes.outcomes.results),
`freed` puts the noted tasks back at their due time, so
the next claim takes them at once. An end that another node applied is not heard of here: the
recheck is what finds it, RECHECK_MS later at most.

It only schedules claims; MySQL's unique key decides them, so a note that is stale (the task was
cancelled, claimed elsewhere, its shard moved) costs a claim that takes nothing, never a
second attempt in flight.

Threads: `hold` from the dispatcher's claiming threads, `freed` from whichever thread applies a
result; one lock, never held while calling the queue.
"""
from __future__ import annotations

import threading
from typing import Iterable

from delayq.clock import Clock
from delayq.nodes.memory.delayqueue import DelayQueue
from delayq.store.values import Entry, KeyWait

RECHECK_MS = 500        # how soon a held task is tried again when its key's end is not heard of here
FORGET_MS = 60_000      # a note older than this is dropped (its task was claimed or moved meanwhile)


class KeyHolds:
    def __init__(self, queue: DelayQueue, clock: Clock, recheck_ms: int = RECHECK_MS):
        self._queue, self._clock, self._recheck_ms = queue, clock, recheck_ms
        self._lock = threading.Lock()
        self._held: dict[tuple[str, bytes], dict[str, tuple[Entry, int]]] = {}   # key -> task id -> (entry, noted ms)
        self._count = 0
        self._pruned_at = 0

    def hold(self, waits: Iterable[KeyWait]) -> None:
        """Tasks a claim left waiting for their key: tried again after the recheck, or when freed."""
        now = self._clock.now_ms()
        back = []
        with self._lock:
            for w in waits:
                plain = w.entry._replace(fire_ms=None)
                tasks = self._held.setdefault((w.topic, w.key), {})
                self._count += w.entry.task_id not in tasks
                tasks[w.entry.task_id] = (plain, now)
                back.append(plain._replace(fire_ms=max(plain.due_ms, now + self._recheck_ms)))
            if self._count > 2 * self._pruned_at + 1000:
                self._prune(now)
        self._queue.put_back(back)

    def freed(self, topic: str, key: bytes) -> None:
        """An attempt of (topic, key) ended here: its held tasks go back at their due time (now)."""
        with self._lock:
            tasks = self._held.pop((topic, key), None)
            if not tasks:
                return
            self._count -= len(tasks)
        # Only what memory still holds for a later try: one taken meanwhile is being claimed.
        self._queue.put_back([e for e, _ in tasks.values() if self._queue.holds(e.task_id, e.due_ms)])

    @property
    def held(self) -> int:
        """The noted tasks memory still holds. A note whose task is no longer in memory (claimed
        here or by another node once the key was free, cancelled, its shard moved) is dropped
        here: its end is never heard of otherwise. (A task taken for its recheck's claim is out of
        memory for that moment and noted again when the claim leaves it waiting.)"""
        with self._lock:
            notes = [(key, task_id, e.due_ms) for key, tasks in self._held.items() for task_id, (e, _) in tasks.items()]
        gone = [(key, task_id) for key, task_id, due_ms in notes if not self._queue.holds(task_id, due_ms)]
        with self._lock:
            for key, task_id in gone:
                tasks = self._held.get(key)
                if tasks is not None and tasks.pop(task_id, None) is not None:
                    self._count -= 1
                    if not tasks:
                        del self._held[key]
            return self._count

    def _prune(self, now: int) -> None:
        for key in list(self._held):
            tasks = self._held[key]
            for task_id in [t for t, (_, at) in tasks.items() if at < now - FORGET_MS]:
                del tasks[task_id]
                self._count -= 1
            if not tasks:
                del self._held[key]
        self._pruned_at = self._count
