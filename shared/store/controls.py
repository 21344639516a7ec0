"""A topic's flow controls: columns of its callback service row (job_callback_service), changed
through setTopicControls or `delayq topics`, read by every node with the services.

Every change bumps services_version (delayq.store.versions), which nodes poll, so a pause or a new
limit holds on every node within a second. registerService replaces a service's own fields and
leaves these alone.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Mapping, Sequence

from sqlalchemy import Engine, func, select, tuple_, update

from delayq import tables
from delayq.clock import SYSTEM_CLOCK, Clock
from delayq.db import unavailable_on_failure
from delayq.errors import InvalidService, UnknownTopic
from delayq.lifecycle import Status
from delayq.store import versions

SERVICE, TASK = tables.callback_service, tables.task
MIN_RATE, MAX_RATE = 0.01, 1_000_000.0
MAX_COUNT = 10_000_000
MAX_WEIGHT = 1000
# Setting name -> (column, the IDL's field name).
FIELDS = {"max_fire_rate": "maxFireRate", "fire_burst": "fireBurst", "max_in_flight": "maxInFlight",
          "paused": "paused", "weight": "weight"}


@dataclass(frozen=True)
class Controls:
    max_fire_rate: float | None = None     # tasks/s across the cluster; None: no limit
    fire_burst: int | None = None          # None: max_fire_rate / 20, at least 1
    max_in_flight: int | None = None       # None: no cap
    paused: bool = False
    weight: int = 1
    tenant: str | None = None

    @property
    def burst(self) -> float:
        """Tasks the topic may fire at once above its rate, across the cluster."""
        if self.fire_burst:
            return float(self.fire_burst)
        return max(1.0, (self.max_fire_rate or 0.0) / 20.0)

    @property
    def limited(self) -> bool:
        """True when anything but the weight holds the topic back."""
        return self.paused or self.max_fire_rate is not None or self.max_in_flight is not None


NONE = Controls()


def from_row(row: Mapping[Any, Any]) -> Controls:
    return Controls(row["max_fire_rate"], row["fire_burst"], row["max_in_flight"], bool(row["paused"]),
                    row["weight"] or 1, row["tenant"])


def checked(changes: Mapping[str, Any]) -> dict[str, Any]:
    """Validated changes (InvalidService naming the IDL's field); 0 clears a limit (None)."""
    out: dict[str, Any] = {}
    for name, value in changes.items():
        if name not in FIELDS:
            raise InvalidService(name, "is not a flow control")
        if value is None:
            continue
        field = FIELDS[name]
        if name == "paused":
            out[name] = bool(value)
        elif name == "max_fire_rate":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or not (value == 0 or MIN_RATE <= value <= MAX_RATE):
                raise InvalidService(field, f"must be 0 (no limit) or a number of tasks/s from {MIN_RATE:g} "
                                            f"to {MAX_RATE:g}")
            out[name] = float(value) or None
        elif name == "weight":
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WEIGHT:
                raise InvalidService(field, f"must be between 1 and {MAX_WEIGHT}")
            out[name] = value
        else:
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
                raise InvalidService(field, f"must be between 0 (no limit) and {MAX_COUNT}")
            out[name] = value or None
    return out


class ControlStore:
    def __init__(self, engine: Engine, clock: Clock = SYSTEM_CLOCK):
        self._engine, self._clock = engine, clock

    def all(self) -> dict[str, Controls]:
        """Every registered topic's controls."""
        with unavailable_on_failure(), self._engine.connect() as conn:
            return {r["topic"]: from_row(r) for r in conn.execute(select(SERVICE)).mappings()}

    def in_flight(self, topics: Sequence[str]) -> dict[str, int]:
        """Attempts in flight (READY, RUNNING) per topic across the cluster (through the topic index)."""
        if not topics:
            return {}
        pairs = [(t, int(s)) for t in topics for s in (Status.READY, Status.RUNNING)]
        with unavailable_on_failure(), self._engine.connect() as conn:
            counted: dict[str, int] = dict(conn.execute(select(TASK.c.topic, func.count()).where(
                tuple_(TASK.c.topic, TASK.c.status).in_(pairs)).group_by(TASK.c.topic)).all())
        return {t: counted.get(t, 0) for t in topics}

    def change(self, topic: str, changes: Mapping[str, Any]) -> Controls:
        """Apply the given controls (unset ones stay); UnknownTopic when no service has the topic."""
        values = checked(changes)
        with versions.bumping(self._engine, versions.SERVICES) as conn:
            row = conn.execute(select(SERVICE).where(SERVICE.c.topic == topic).with_for_update()).mappings().first()
            if row is None:
                raise UnknownTopic(topic)
            now = replace(from_row(row), **values)
            if values:
                conn.execute(update(SERVICE).where(SERVICE.c.topic == topic)
                             .values(**values, updated_ms=self._clock.now_ms()))
        return now
