"""DeadLetterer: publishes FAILED tasks to their service's dead-letter exchange.

The FAILED transition marks the backlog row (dead_letter = 1) in its own transaction, so nothing
is lost if the node dies before publishing: every few seconds, and when woken, this publishes the
marked rows of the node's shards through the confirmed publisher and clears the mark once the broker
confirmed. A task whose service has no dead-letter exchange is just cleared.

A dead letter that could not be published (no queue bound to the exchange for the topic, no
confirm) is tried again after a backoff of 2 s doubling to 60 s, per task, with one WARNING when it
first fails; one whose exchange is unusable (delayq.nodes.amqp.exchanges) waits until it is usable.

The message is built by delayq.nodes.amqp.messages.dead_letter; routing key = the topic.

Thread: one, owned here; `stop()` ends it.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from delayq.clock import Clock
from delayq.errors import Unavailable
from delayq.nodes.amqp import messages
from delayq.nodes.amqp.exchanges import ExchangeGuard
from delayq.nodes.amqp.confirms import CONFIRMED
from delayq.nodes.amqp.publisher import ConfirmedPublisher
from delayq.nodes.metrics import Metrics
from delayq.nodes.cluster.ownership import Ownership
from delayq.nodes.cluster.services import ServiceRegistry
from delayq.nodes.threads import NodeThread
from delayq.store.deadletters import DeadLetterRows

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeadLetterRef:
    task_id: str


class DeadLetterer(NodeThread):
    name = "dead-letters"

    def __init__(self, rows: DeadLetterRows, ownership: Ownership, services: ServiceRegistry,
                 publisher: ConfirmedPublisher, guard: ExchangeGuard, metrics: Metrics, clock: Clock, *, interval_s: float = 2.0,
                 batch: int = 500, first_backoff_ms: int = 2000, max_backoff_ms: int = 60_000):
        super().__init__()
        self._rows, self._ownership, self._services = rows, ownership, services
        self._publisher, self._guard, self._metrics, self._clock = publisher, guard, metrics, clock
        self._first_backoff_ms, self._max_backoff_ms = first_backoff_ms, max_backoff_ms
        self._retry: dict[str, tuple[int, int]] = {}      # task id -> (not before ms, last backoff ms)
        self._interval_s, self._batch = interval_s, batch
        self._lock = threading.Lock()
        self._in_flight: set[str] = set()
        self._confirmed: list[str] = []

    def on_outcome(self, ref: DeadLetterRef, outcome: str, reason: str | None) -> None:
        """Publisher callback: never blocks."""
        self._metrics.dead_letters.labels(outcome.lower()).inc()
        with self._lock:
            self._in_flight.discard(ref.task_id)
            if outcome == CONFIRMED:
                self._confirmed.append(ref.task_id)
                self._retry.pop(ref.task_id, None)
                self._wake.set()
                return
            _, last = self._retry.get(ref.task_id, (0, 0))
            backoff = min(self._max_backoff_ms, last * 2) if last else self._first_backoff_ms
            self._retry[ref.task_id] = (self._clock.now_ms() + backoff, backoff)
        log_at = logging.WARNING if not last else logging.DEBUG
        log.log(log_at, "dead letter of %s not published: %s; trying again in %.0f s", ref.task_id, reason,
                backoff / 1000)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._once()
            except Unavailable as e:
                log.warning("dead-letter pass failed: %s", e)
            except Exception:  # noqa: BLE001 - keep trying on the next pass
                log.exception("dead-letter pass failed")
            self._wake.wait(self._interval_s)
            self._wake.clear()

    def _once(self) -> None:
        with self._lock:
            done, self._confirmed = self._confirmed, []
        if done:
            self._rows.clear(done)
        if not self._publisher.ready:
            return
        rows = self._rows.pending(self._ownership.shards(), self._batch)
        now = self._clock.now_ms()
        out, nowhere, verdicts = [], [], {}
        for r in rows:
            svc = self._services.find(r["topic"])
            if svc is None or not svc.dead_letter_exchange:
                nowhere.append(r["task_id"])
                continue
            exchange = svc.dead_letter_exchange
            if exchange not in verdicts:
                verdicts[exchange] = self._guard.verdict(exchange)
            with self._lock:
                if r["task_id"] in self._in_flight or verdicts[exchange] is not None \
                        or self._retry.get(r["task_id"], (0, 0))[0] > now:
                    continue
                self._in_flight.add(r["task_id"])
            out.append(messages.dead_letter(r, exchange, DeadLetterRef(r["task_id"])))
        self._rows.clear(nowhere)
        with self._lock:       # forget backoffs of tasks no longer waiting here (moved shard, cleared)
            waiting = {r["task_id"] for r in rows}
            if len(rows) < self._batch:
                self._retry = {t: v for t, v in self._retry.items() if t in waiting}
        if out:
            self._publisher.publish(out, self.on_outcome)
