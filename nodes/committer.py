"""GroupCommitter: concurrent submits share one MySQL transaction, so one commit (one fsync) serves
many clients.

Thrift handler threads call `submit(tasks)`, which blocks until its group is committed. A
committer thread takes whatever is waiting when it is free (nothing is held back on purpose: an
idle node commits a lone submit at once) and inserts up to `max_rows` tasks in one transaction.
With several threads, the next group gathers and goes out while one waits for its commit.
Each submit keeps its own result: created or existing tasks, or its own Conflict.

Threads: `threads`, owned here (a Worker); `stop()` fails what is still waiting with Unavailable.
"""
from __future__ import annotations

import logging
import queue
import threading
from concurrent.futures import Future
from typing import Sequence

from shared.errors import Unavailable
from nodes.store import NewTask, Submitted, TaskStore
from nodes.worker import Worker

log = logging.getLogger(__name__)


class GroupCommitter(Worker):
    name = "committer"

    def __init__(self, store: TaskStore, *, max_rows: int = 2000, timeout_s: float = 30.0, threads: int = 1):
        super().__init__(threads)
        self._store = store
        self._max_rows = max_rows
        self._timeout_s = timeout_s
        self._inbox: queue.Queue[tuple[Sequence[NewTask], Future]] = queue.Queue()
        self._turn = threading.Lock()       # held by the one thread waiting for submits

    def submit(self, tasks: Sequence[NewTask]) -> list[Submitted]:
        """Insert these tasks (all or nothing) with whatever else is waiting; raises like the store."""
        if not self.alive:
            return self._store.insert_tasks(tasks)
        done: Future = Future()
        self._inbox.put((tasks, done))
        try:
            return done.result(timeout=self._timeout_s)
        except TimeoutError:
            raise Unavailable(f"MySQL did not commit within {self._timeout_s:.0f} s") from None

    def _run(self) -> None:
        while not self._stop.is_set():
            batch = self._gather()
            if batch:
                self._commit(batch)
        self._fail_waiting()

    def _gather(self) -> list[tuple[Sequence[NewTask], Future]]:
        """What is waiting, up to max_rows, once this thread's turn to wait has come. The threads
        take turns at waiting: one submit wakes one thread, and a second thread gathers the next
        group only while the first is busy committing its own. The wait ends every 0.2 s, so a
        thread sees the stop flag within that."""
        with self._turn:
            try:
                first = self._inbox.get(timeout=0.2)
            except queue.Empty:
                return []
            batch, rows = [first], len(first[0])
            while rows < self._max_rows:
                try:
                    item = self._inbox.get_nowait()
                except queue.Empty:
                    break
                batch.append(item)
                rows += len(item[0])
            return batch

    def _commit(self, batch: list[tuple[Sequence[NewTask], Future]]) -> None:
        try:
            results = self._store.insert_groups([tasks for tasks, _ in batch])
        except Exception as e:  # noqa: BLE001 - every waiting submit gets the failure as its own
            for _, done in batch:
                done.set_exception(e)
            return
        for (_, done), result in zip(batch, results):
            if isinstance(result, Exception):
                done.set_exception(result)
            else:
                done.set_result(result)

    def _fail_waiting(self) -> None:
        while True:
            try:
                _, done = self._inbox.get_nowait()
            except queue.Empty:
                return
            if not done.done():
                done.set_exception(Unavailable("the node is stopping"))
