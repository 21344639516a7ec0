"""Deadlines: times out an attempt when its time-to-run has passed, on the node that dispatched it,
within a few milliseconds rather than at the next window scan.

The dispatcher adds (deadline, task, attempt) for every claim that expects a result (ttr > 0).
When deadlines come due, one query reads which of those attempts are still in flight in MySQL; each
one past its deadline there is timed out through the ResultApplier (retried, or FAILED after its
last retry), exactly as the loader's sweep would: the conditional update on (task, attempt,
status) makes either one a no-op once the other, or a result, got there first. An attempt whose
deadline MySQL moved later is watched again. The sweep remains the backstop for attempts of a node
that died.

No time-out is applied during an outage of delayq's own dependencies or its grace after
(delayq.nodes.outcomes.outages): due deadlines wait until it ends.

Thread: one, owned here; `stop()` ends it.
"""
from __future__ import annotations

import heapq
import logging
import threading
from typing import Iterable

from delayq.clock import Clock
from delayq.errors import DelayqError, Unavailable
from delayq.lifecycle import Result
from delayq.nodes.metrics import Metrics
from delayq.nodes.outcomes.outages import OutageGrace
from delayq.nodes.outcomes.results import ResultApplier
from delayq.nodes.threads import NodeThread
from delayq.store.overdue import OverdueRows

log = logging.getLogger(__name__)


class Deadlines(NodeThread):
    name = "deadlines"

    def __init__(self, store: OverdueRows, results: ResultApplier, metrics: Metrics, clock: Clock,
                 grace: OutageGrace, *, batch: int = 500):
        super().__init__()
        self._store, self._results, self._metrics, self._clock = store, results, metrics, clock
        self._grace, self._batch = grace, batch
        self._heap: list[tuple[int, str, int]] = []
        self._cond = threading.Condition()

    def add(self, deadlines: Iterable[tuple[int, str, int]]) -> None:
        """(deadline ms, task id, attempt) of attempts just claimed."""
        with self._cond:
            before = self._heap[0][0] if self._heap else None
            for d in deadlines:
                heapq.heappush(self._heap, d)
            if self._heap and (before is None or self._heap[0][0] < before):
                self._cond.notify()

    def __len__(self) -> int:
        with self._cond:
            return len(self._heap)

    def _interrupt(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.check(wait=True) is None:
                self._stop.wait(0.2)        # held (an outage, or MySQL not answering): look again soon

    def check(self, wait: bool = False) -> int | None:
        """One pass: time out the attempts whose deadline has come (waiting up to a second for
        the first when `wait`); returns how many deadlines were looked at, or None when they are
        held back (delayq's dependencies down, or in the grace after) and will be looked at again."""
        due = self._take_due(wait)
        if not due:
            return 0
        hold = self._grace.hold_until()
        if hold is not None:
            self.add((hold, t, a) for _, t, a in due)
            return None
        try:
            self._expire(due)
            self._grace.observe("mysql", True)
        except Unavailable as e:
            self._grace.observe("mysql", False)
            log.debug("deadline check deferred: %s", e)
            self.add((d + 1000, t, a) for d, t, a in due)
            return None
        return len(due)

    def _take_due(self, wait: bool) -> list[tuple[int, str, int]]:
        with self._cond:
            now = self._clock.now_ms()
            if not self._heap or self._heap[0][0] > now:
                if wait:
                    self._cond.wait(min(1.0, max(0.001, (self._heap[0][0] - now) / 1000.0 if self._heap else 1.0)))
                return []
            due: list[tuple[int, str, int]] = []
            while self._heap and self._heap[0][0] <= now and len(due) < self._batch:
                due.append(heapq.heappop(self._heap))
            return due

    def _expire(self, due: list[tuple[int, str, int]]) -> None:
        wanted = {(t, a) for _, t, a in due}
        now = self._clock.now_ms()
        later = []
        for task_id, attempt, deadline in self._store.deadlines([t for _, t, _ in due]):
            if (task_id, attempt) not in wanted or deadline is None:
                continue
            if deadline >= now:
                later.append((deadline, task_id, attempt))     # moved later by a touch (a heartbeat)
                continue
            try:
                t = self._results.apply(task_id, attempt, Result.TIMEOUT, "no result within the time-to-run")
            except Unavailable:
                raise
            except DelayqError as e:
                log.warning("time-out of %s attempt %d not applied: %s", task_id, attempt, e)
                continue
            if t.applied:
                self._metrics.deadline_timeouts.inc()
        if later:
            self.add(later)
