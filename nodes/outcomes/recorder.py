"""Recorder: turns publish outcomes into MySQL records, in batches, off the publisher's thread.

    CONFIRMED   execlog row for the attempt (docs/ARCHITECTURE.md, invariant 4);
                a task that expects no result (ttr 0) is FINISHED here
    NOT_SENT    the attempt did not happen: back to DELAY with its number, sent again after publish_retry_ms
    FAILED      it may have reached a queue: back to DELAY, sent again as a new attempt
    UNROUTABLE  a failed attempt (no queue bound): retried with the service's backoff, then FAILED
    HELD        not published: its service's exchange is unusable (delayq.nodes.amqp.exchanges); back to
                DELAY with its number, due when the exchange is next checked
    RETURNED    not published: its claim is no longer current (delayq.nodes.dispatch.lease; VETOED when the
                publisher found so just before the write); back to DELAY with its number and its
                due time, so it fires at once wherever its shard now is

Whatever goes back to DELAY goes back into memory, or to its shard's new owner as a hint when the
shard moved meanwhile (delayq.nodes.memory.delayqueue, "Handover"). A shard moved by plan (a rebalance,
a drain, a pin) is routine: its claims handed back are logged at INFO, once per record batch.

If MySQL is down, the outcomes wait here and are retried every RETRY_S; a crash loses nothing either: a claimed
task that was never recorded times out after its time-to-run and is dispatched again.

Outcomes are gathered for gather_ms (DELAYQ_RECORD_GATHER_MS) after the first of a batch arrives,
so that a steady stream of publishes is recorded in a few transactions per second rather than one
per confirm. The price: a node killed meanwhile has published those attempts without recording
them, so they go out again as further attempts after their time-to-run.

Thread: one, owned here; `stop()` drains what is queued (bounded by its timeout) and joins it.
"""
from __future__ import annotations

import logging
import queue
from dataclasses import dataclass

from delayq.clock import Clock
from delayq.config import SchedulingSettings
from delayq.errors import DelayqError, Unavailable
from delayq.lifecycle import Result
from delayq.nodes.amqp.confirms import CONFIRMED, FAILED, NOT_SENT, UNROUTABLE, VETOED
from delayq.nodes.dispatch.attempts import HELD, RETURNED, Attempt, Settled
from delayq.nodes.memory.delayqueue import DelayQueue, Entry
from delayq.nodes.dispatch.lease import MOVED
from delayq.nodes.metrics import Metrics
from delayq.nodes.cluster.ownership import Ownership
from delayq.nodes.dispatch.ports import RecordStore
from delayq.nodes.outcomes.results import ResultApplier
from delayq.nodes.threads import NodeThread
from delayq.store.values import Claimed

log = logging.getLogger(__name__)

RETRY_S = 0.25      # a record MySQL refused is tried again this soon: firing resumes as it answers


@dataclass(frozen=True)
class RecordSettings:
    publish_retry_ms: int = 1000    # a publish that never left the node is sent again this much later
    gather_ms: int = 0              # outcomes gathered into one record batch after the first arrives
    batch: int = 1000               # outcomes per record batch, at most

    @classmethod
    def of(cls, s: SchedulingSettings) -> RecordSettings:
        return cls(publish_retry_ms=s.publish_retry_ms, gather_ms=s.record_gather_ms)


class Recorder(NodeThread):
    name = "recorder"

    def __init__(self, store: RecordStore, queue_: DelayQueue, ownership: Ownership, results: ResultApplier,
                 metrics: Metrics, clock: Clock, settings: RecordSettings = RecordSettings()):
        super().__init__()
        self._store, self._queue, self._ownership = store, queue_, ownership
        self._results, self._clock, self._metrics = results, clock, metrics
        self._retry_ms = settings.publish_retry_ms
        self._batch = settings.batch
        self._gather_s = settings.gather_ms / 1000.0
        self._inbox: queue.Queue[Settled] = queue.Queue()

    def on_outcome(self, attempt: Attempt, outcome: str, reason: str | None) -> None:
        """The outcome handler of the dispatcher's published batches (on the publisher's thread):
        never blocks."""
        c = attempt.task
        if outcome == VETOED:
            self._metrics.claims_expired.inc()
            self._inbox.put(Settled(attempt, RETURNED, reason, c.due_ms))
            return
        if outcome == CONFIRMED:
            self._metrics.confirmed.labels(c.topic).inc()
            self._metrics.lateness.labels(c.topic).observe(max(0, self._clock.now_ms() - c.due_ms) / 1000.0)
        else:
            self._metrics.publish_failures.labels(outcome.lower()).inc()
        self._inbox.put(Settled(attempt, outcome, reason))

    def put(self, settled: list[Settled]) -> None:
        """Attempts the dispatcher did not publish (HELD: their exchange is unusable; RETURNED: their
        claim is no longer current): back to DELAY at their due_ms."""
        for s in settled:
            self._inbox.put(s)

    @property
    def backlog(self) -> int:
        return self._inbox.qsize()

    def record_waiting(self) -> int:
        """Record every outcome waiting now, in one go (what the thread does each turn, without
        its gathering pause); returns how many. Raises Unavailable while MySQL is down."""
        items = []
        while True:
            try:
                items.append(self._inbox.get_nowait())
            except queue.Empty:
                break
        if items:
            self._record(items)
        return len(items)

    def _run(self) -> None:
        pending: list[Settled] = []
        while not (self._stop.is_set() and not pending and self._inbox.empty()):
            if not pending:
                try:
                    pending.append(self._inbox.get(timeout=0.2))
                except queue.Empty:
                    continue
                # Let the outcomes of the next few publishes join: recording many costs about what
                # recording one does (the same round trips and commit).
                if self._gather_s and self._inbox.qsize() + 1 < self._batch:
                    self._stop.wait(self._gather_s)
            while len(pending) < self._batch:
                try:
                    pending.append(self._inbox.get_nowait())
                except queue.Empty:
                    break
            try:
                self._record(pending)
                pending = []
            except Unavailable as e:
                self._metrics.errors.labels("mysql").inc()
                log.warning("cannot record %d publish outcomes: %s; retrying", len(pending), e)
                if self._stop.wait(RETRY_S):
                    return
            except Exception:  # noqa: BLE001 - a bug in one batch must not stop recording
                # Dropped: those tasks stay READY and their time-to-run dispatches them again.
                log.exception("recording %d publish outcomes failed; dropped", len(pending))
                pending = []

    def _record(self, items: list[Settled]) -> None:
        by: dict[str, list[Settled]] = {}
        for s in items:
            by.setdefault(s.outcome, []).append(s)
        if CONFIRMED in by:
            confirmed = [(s.attempt.task, s.attempt.sent_ms) for s in by[CONFIRMED]]
            for c in self._store.record_dispatched(confirmed, self._ownership.node_id):
                self._metrics.finished.labels(c.topic).inc()
                # No result expected: a slot of its maxInFlight, and its key, are free.
                self._results.ended(c.topic, c.key)
        failed = by.get(NOT_SENT, []) + by.get(FAILED, [])
        if failed:
            now = self._clock.now_ms()
            due = now + self._retry_ms
            node = self._ownership.node_id
            self._store.release([s.attempt.task for s in by.get(NOT_SENT, [])], due, False, node, now)
            self._store.release([s.attempt.task for s in by.get(FAILED, [])], due, True, node, now)
            log.warning("%d publishes failed (%s): dispatching again in %d ms", len(failed), failed[0].reason,
                        self._retry_ms)
            self._requeue([(s.attempt.task, due) for s in failed])
        for s in by.get(UNROUTABLE, []):
            self._unroutable(s.attempt.task, s.reason)
        if HELD in by:
            self._release_at(by[HELD])
        if RETURNED in by:
            self._release_at(by[RETURNED])
            self._log_returned(by[RETURNED])

    def _release_at(self, items: list[Settled]) -> None:
        """Back to DELAY with their attempt number, each at its own due time."""
        now, node = self._clock.now_ms(), self._ownership.node_id
        for due in sorted({s.due_ms for s in items if s.due_ms is not None}):
            self._store.release([s.attempt.task for s in items if s.due_ms == due], due, False, node, now)
        self._requeue([(s.attempt.task, s.due_ms) for s in items if s.due_ms is not None])

    @staticmethod
    def _log_returned(returned: list[Settled]) -> None:
        moved = [s for s in returned if s.reason == MOVED]
        if moved:
            log.info("handed back %d claims of shards %s, moved to another node: their new owners fire them",
                     len(moved), sorted({s.attempt.shard_id for s in moved}))
        others = [s for s in returned if s.reason != MOVED]
        if others:
            log.warning("%d claims not published (%s): back to DELAY, fired again at once", len(others),
                        others[0].reason)

    def _unroutable(self, c: Claimed, reason: str | None) -> None:
        log.warning("task %s attempt %d unroutable: %s", c.task_id, c.attempt, reason)
        try:
            self._results.apply(c.task_id, c.attempt, Result.UNROUTABLE, reason)
        except Unavailable:
            raise
        except DelayqError as e:
            log.warning("unroutable task %s not updated: %s", c.task_id, e)

    def _requeue(self, items: list[tuple[Claimed, int]]) -> None:
        # Into memory if the shard is still ours, else handed over to its owner (delayq.nodes.memory.hints).
        self._queue.offer_written(Entry(c.task_id, c.shard_id, due, topic=c.topic) for c, due in items)
