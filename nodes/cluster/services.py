"""ServiceRegistry: the callback services (topic -> exchange, routing key, retry rules), cached.

Every node reads the table at start and again every `refresh_s`; a topic it does not know is
looked up in MySQL before a submit is refused, so a service registered on another node is usable
at once. Such a re-read happens at most once per `miss_refresh_s` (0.1 s): a client sending
unknown topics in a loop costs MySQL ten reads a second, and other clients' submits (served on
the same thread) do not wait behind those reads. A service registered elsewhere in the last 0.1 s
may be refused once (UnknownTopic); asking again finds it. The dispatch path (`find`) re-reads
on every miss: a task in MySQL says its service exists. Thread-safe.
"""
from __future__ import annotations

import collections

import threading
from dataclasses import asdict

from sqlalchemy import Engine, select
from sqlalchemy.dialects.mysql import insert as mysql_insert

from delayq import tables
from delayq.clock import Clock
from delayq.db import unavailable_on_failure
from delayq.errors import UnknownTopic
from delayq.lifecycle import RetryPolicy
from delayq.nodes.validation import ServiceSpec, check_service
from delayq.store import versions
from delayq.store.controls import NONE as NO_CONTROLS, Controls, from_row

SERVICE = tables.callback_service


class ServiceRegistry:
    def __init__(self, engine: Engine, clock: Clock, refresh_s: float = 10.0, miss_refresh_s: float = 0.1):
        self._engine = engine
        self._clock = clock
        self._refresh_s = refresh_s
        self._miss_refresh_s = miss_refresh_s
        self._lock = threading.Lock()
        self._by_topic: dict[str, ServiceSpec] = {}
        self._controls: dict[str, Controls] = {}
        self._loaded_at = float("-inf")
        # This node's latest upserts, numbered: a re-read whose SELECT began before one of them
        # committed must not put the older row back (the topic would be unknown here until the
        # next re-read, and a submit right after registering it refused).
        self._upserts: collections.deque[tuple[int, ServiceSpec]] = collections.deque(maxlen=64)
        self._upserted = 0

    def get(self, topic: str) -> ServiceSpec:
        """The enabled service for a topic, or UnknownTopic (saying whether it has one, disabled)."""
        svc = self._cached(topic) or self._reread(topic)
        if svc is None or not svc.enabled:
            raise UnknownTopic(topic, disabled=svc is not None)
        return svc

    def find(self, topic: str) -> ServiceSpec | None:
        """The service for a topic, enabled or not, without refusing (used by the dispatch path)."""
        svc = self._cached(topic)
        if svc is None:
            self.refresh()
            svc = self._cached(topic)
        return svc

    def policy(self, topic: str, max_retries: int) -> RetryPolicy:
        svc = self.find(topic) or ServiceSpec(topic, "", topic)
        return RetryPolicy(max_retries, svc.backoff, svc.retry_backoff_ms, svc.retry_backoff_max_ms)

    def all(self) -> list[ServiceSpec]:
        self.refresh()
        with self._lock:
            return sorted(self._by_topic.values(), key=lambda s: s.topic)

    def upsert(self, svc: ServiceSpec) -> ServiceSpec:
        check_service(svc)
        now = self._clock.now_ms()
        row = {k: v for k, v in asdict(svc).items()}
        row["enabled"] = 1 if svc.enabled else 0
        stmt = mysql_insert(SERVICE).values(**row, created_ms=now, updated_ms=now)
        stmt = stmt.on_duplicate_key_update({k: stmt.inserted[k] for k in row if k != "topic"} | {"updated_ms": now})
        with versions.bumping(self._engine, versions.SERVICES) as conn:   # other nodes re-read at once
            conn.execute(stmt)
        with self._lock:
            self._by_topic[svc.topic] = svc
            self._upserted += 1
            self._upserts.append((self._upserted, svc))
        return svc

    def refresh(self) -> None:
        with self._lock:
            began = self._upserted
        with unavailable_on_failure(), self._engine.connect() as conn:
            rows = conn.execute(select(SERVICE)).mappings().all()
        fresh, controls = {}, {}
        for r in rows:
            fields = {k: r[k] for k in ServiceSpec.__dataclass_fields__}
            fields["enabled"] = bool(fields["enabled"])
            fresh[r["topic"]] = ServiceSpec(**fields)
            controls[r["topic"]] = from_row(r)
        with self._lock:
            for n, svc in self._upserts:
                if n > began:
                    fresh[svc.topic] = svc
            self._by_topic, self._controls = fresh, controls
            self._loaded_at = self._clock.monotonic()

    def controls(self, topic: str) -> Controls:
        """The topic's flow controls and tenant as last read (none for an unknown topic)."""
        with self._lock:
            return self._controls.get(topic, NO_CONTROLS)

    def all_controls(self) -> dict[str, Controls]:
        with self._lock:
            return dict(self._controls)

    def _reread(self, topic: str) -> ServiceSpec | None:
        """A topic not in the cache: read the services again, unless that was done just now."""
        with self._lock:
            recent = self._clock.monotonic() - self._loaded_at < self._miss_refresh_s
        if recent:
            return None
        self.refresh()
        return self._cached(topic)

    def _cached(self, topic: str) -> ServiceSpec | None:
        with self._lock:
            stale = self._clock.monotonic() - self._loaded_at > self._refresh_s
            svc = self._by_topic.get(topic)
        if stale:
            self.refresh()
            with self._lock:
                svc = self._by_topic.get(topic)
        return svc
