"""DeadLetterer: publishes FAILED tasks to their service's dead-letter exchange.

The FAILED transition marks the backlog row (dead_letter = 1) in its own transaction, so nothing
is lost if the node dies before publishing: every few seconds, and when woken, this publishes the
marked rows of the node's shards through the confirmed publisher and clears the mark once the broker
confirmed. A task whose service has no dead-letter exchange is just cleared.

The message: body = payload, message_id = <taskId>:<attempt>:dead, the usual x-delayq-* headers plus
x-delayq-status: FAILED and x-delayq-reason; routing key = the topic.

Thread: one, owned here; `stop()` ends it.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from shared import topology
from shared.clock import Clock
from shared.errors import Unavailable
from shared.publisher import CONFIRMED, ConfirmedPublisher, Outgoing
from nodes.ownership import Ownership
from nodes.services import ServiceRegistry
from nodes.store import TaskStore

from nodes.worker import Worker

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeadLetterRef:
    task_id: str


class DeadLetterer(Worker):
    name = "dead-letters"

    def __init__(self, store: TaskStore, ownership: Ownership, services: ServiceRegistry,
                 publisher: ConfirmedPublisher, clock: Clock, *, interval_s: float = 2.0, batch: int = 500):
        super().__init__()
        self._store, self._ownership, self._services = store, ownership, services
        self._publisher, self._clock = publisher, clock
        self._interval_s, self._batch = interval_s, batch
        self._lock = threading.Lock()
        self._in_flight: set[str] = set()
        self._confirmed: list[str] = []

    def on_outcome(self, ref: DeadLetterRef, outcome: str, reason: str | None) -> None:
        """Publisher callback: never blocks."""
        with self._lock:
            self._in_flight.discard(ref.task_id)
            if outcome == CONFIRMED:
                self._confirmed.append(ref.task_id)
        if outcome != CONFIRMED:
            log.warning("dead letter of %s not published: %s", ref.task_id, reason)
        self._wake.set()

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
            self._store.dead_lettered(done)
        if not self._publisher.ready:
            return
        rows = self._store.dead_letters(self._ownership.shards(), self._batch)
        out, nowhere = [], []
        with self._lock:
            for r in rows:
                if r["task_id"] in self._in_flight:
                    continue
                svc = self._services.find(r["topic"])
                if svc is None or not svc.dead_letter_exchange:
                    nowhere.append(r["task_id"])
                    continue
                self._in_flight.add(r["task_id"])
                out.append(Outgoing(svc.dead_letter_exchange, r["topic"], bytes(r["payload"]),
                                    f"{topology.message_id(r['task_id'], r['attempt'])}:dead", {
                                        topology.HEADER_TASK_ID: r["task_id"], topology.HEADER_TOPIC: r["topic"],
                                        topology.HEADER_ATTEMPT: r["attempt"], topology.HEADER_DUE_AT: r["due_ms"],
                                        topology.HEADER_STATUS: "FAILED",
                                        topology.HEADER_REASON: (r["message"] or "")[:1024]},
                                    ref=DeadLetterRef(r["task_id"])))
        self._store.dead_lettered(nowhere)
        if out:
            for exchange in {o.exchange for o in out}:
                self._publisher.declare_exchange(exchange)
            self._publisher.publish(out)
