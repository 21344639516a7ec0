"""TenantStore: tenants and their quotas (job_tenant), and what belongs to each: topics
(job_callback_service.tenant) and clients (job_client.tenant). Written by `delayq tenants` with an
admin account; the nodes read it (`load`, `pending`) and check submits against it
(delayq.nodes.front.quotas).

Quotas follow the topic: a submit counts against the tenant of its topic, whoever sends it. A
client's tenant groups it with its tenant's topics for operators (`delayq tenants show`).

Every change bumps services_version (delayq.store.versions) in its own transaction, so a new
quota holds on every node within a second, without a restart.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any, Iterable, Mapping

from sqlalchemy import Connection, Engine, func, select, update

from delayq import tables
from delayq.clock import SYSTEM_CLOCK, Clock
from delayq.db import unavailable_on_failure
from delayq.errors import UnknownTopic
from delayq.store import versions

TENANT, SERVICE, CLIENT, TASK = tables.tenant, tables.callback_service, tables.client, tables.task
NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
# Quota column -> its name in QuotaExceeded and in messages, and the largest value that makes sense.
QUOTAS = {"max_pending": "pending", "max_submit_rate": "submitRate", "max_horizon_ms": "horizon",
          "max_payload_bytes": "payloadSize"}
MAX = {"max_pending": 10**12, "max_submit_rate": 1_000_000.0, "max_horizon_ms": 100 * 365 * 86_400_000,
       "max_payload_bytes": 1 << 30}
MIN_RATE = 0.01         # one task per 100 s; below that a rate is a typo, not a quota
UNITS = {"max_pending": "tasks", "max_submit_rate": "tasks/s", "max_horizon_ms": "ms", "max_payload_bytes": "bytes"}


class NoSuchTenant(LookupError):
    pass


@dataclass(frozen=True)
class Tenant:
    """A tenant's quotas; None: no limit beyond the node's own."""
    name: str
    max_pending: int | None = None
    max_submit_rate: float | None = None
    max_horizon_ms: int | None = None
    max_payload_bytes: int | None = None

    @property
    def limited(self) -> bool:
        return any(getattr(self, column) is not None for column in QUOTAS)

    def quotas(self) -> dict[str, Any]:
        """Quota name (pending, submitRate, ...) -> limit, the limits set only."""
        return {QUOTAS[c]: getattr(self, c) for c in QUOTAS if getattr(self, c) is not None}


@dataclass(frozen=True)
class Shown:
    tenant: Tenant
    topics: tuple[str, ...]
    clients: tuple[str, ...]
    pending: int            # live tasks of its topics now


def check_name(name: str) -> str:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ValueError(f"tenant name must be 1-64 of a-z, 0-9, '_' or '-', starting with a letter or digit: "
                         f"{name!r}")
    return name


def checked(quotas: Mapping[str, Any]) -> dict[str, Any]:
    """Validated quotas (ValueError naming the quota); a value of None clears it."""
    out: dict[str, Any] = {}
    for column, value in quotas.items():
        if column not in QUOTAS:
            raise ValueError(f"{column!r} is not a quota (quotas: {', '.join(QUOTAS)})")
        if value is None:
            out[column] = None
            continue
        top, name, unit = MAX[column], QUOTAS[column], UNITS[column]
        if column == "max_submit_rate":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or not MIN_RATE <= value <= top:
                raise ValueError(f"{name} quota must be between {MIN_RATE:g} and {top:.10g} {unit}, got {value!r}")
            out[column] = float(value)
        else:
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
                raise ValueError(f"{name} quota must be a whole number between 1 and {top} {unit}, got {value!r}")
            out[column] = value
    return out


def _tenant(row: Mapping[Any, Any]) -> Tenant:
    return Tenant(row["name"], *(row[c] for c in QUOTAS))


class TenantStore:
    def __init__(self, engine: Engine, clock: Clock = SYSTEM_CLOCK):
        self._engine, self._clock = engine, clock

    # ---- read by the nodes --------------------------------------------------------------------

    def load(self) -> tuple[dict[str, Tenant], dict[str, str]]:
        """(every tenant by name, topic -> tenant for the topics that have one), read together."""
        with unavailable_on_failure(), self._engine.connect() as conn:
            tenants = {r["name"]: _tenant(r) for r in conn.execute(select(TENANT)).mappings()}
            topics = dict(conn.execute(select(SERVICE.c.topic, SERVICE.c.tenant)
                                       .where(SERVICE.c.tenant.is_not(None))).all())
        return tenants, topics

    def pending(self, topics: Iterable[str]) -> dict[str, int]:
        """Live tasks per topic (topics with none left out), in one statement on (topic, status)."""
        topics = sorted(set(topics))
        if not topics:
            return {}
        with unavailable_on_failure(), self._engine.connect() as conn:
            return _pending(conn, topics)

    # ---- written by operators -----------------------------------------------------------------

    def create(self, name: str, quotas: Mapping[str, Any] | None = None) -> Tenant:
        check_name(name)
        values = checked(quotas or {})
        now = self._clock.now_ms()
        with versions.bumping(self._engine, versions.SERVICES) as conn:
            if conn.execute(select(TENANT.c.name).where(TENANT.c.name == name)).first() is not None:
                raise ValueError(f"tenant {name!r} exists already (update its quotas instead)")
            conn.execute(TENANT.insert().values(name=name, **values, created_ms=now, updated_ms=now))
        return replace(Tenant(name), **values)

    def update(self, name: str, quotas: Mapping[str, Any]) -> Tenant:
        """Change the given quotas (None clears one); the others stay."""
        values = checked(quotas)
        if not values:
            raise ValueError("nothing to change: give at least one quota")
        with versions.bumping(self._engine, versions.SERVICES) as conn:
            tenant = self._existing(conn, name)
            conn.execute(update(TENANT).where(TENANT.c.name == name)
                         .values(**values, updated_ms=self._clock.now_ms()))
        return replace(tenant, **values)

    def delete(self, name: str) -> None:
        """Remove a tenant that has no topic and no client left (ValueError naming them otherwise)."""
        with versions.bumping(self._engine, versions.SERVICES) as conn:
            self._existing(conn, name)
            topics, clients = self._members(conn, name)
            if topics or clients:
                held = " and ".join(f"{kind} {', '.join(items)}" for kind, items in
                                    (("topics", topics), ("clients", clients)) if items)
                raise ValueError(f"tenant {name!r} still has {held}: unassign them first")
            conn.execute(TENANT.delete().where(TENANT.c.name == name))

    def assign(self, name: str, topics: Iterable[str] = (), clients: Iterable[str] = ()) -> dict[str, str | None]:
        """Put topics and clients in tenant `name`; returns what each belonged to before (a topic
        or client may move from another tenant). UnknownTopic, NoSuchTenant, ValueError for an
        unknown client: nothing changes then."""
        return self._set(name, name, topics, clients)

    def unassign(self, name: str, topics: Iterable[str] = (), clients: Iterable[str] = ()) -> None:
        """Take topics and clients out of tenant `name` (ValueError for one that is not in it)."""
        self._set(name, None, topics, clients)

    def list(self) -> list[Shown]:
        """Every tenant with its topics, clients and pending tasks (one count for all)."""
        with unavailable_on_failure(), self._engine.connect() as conn:
            tenants = [_tenant(r) for r in conn.execute(select(TENANT).order_by(TENANT.c.name)).mappings()]
            topics = conn.execute(select(SERVICE.c.tenant, SERVICE.c.topic).where(SERVICE.c.tenant.is_not(None))
                                  .order_by(SERVICE.c.topic)).all()
            clients = conn.execute(select(CLIENT.c.tenant, CLIENT.c.name).where(CLIENT.c.tenant.is_not(None))
                                   .order_by(CLIENT.c.name)).all()
            counts = _pending(conn, sorted(t for _, t in topics)) if topics else {}
        return [Shown(t, tuple(topic for owner, topic in topics if owner == t.name),
                      tuple(c for owner, c in clients if owner == t.name),
                      sum(counts.get(topic, 0) for owner, topic in topics if owner == t.name)) for t in tenants]

    def get(self, name: str) -> Shown:
        with unavailable_on_failure(), self._engine.connect() as conn:
            tenant = self._existing(conn, name, lock=False)
            topics, clients = self._members(conn, name)
            pending = sum(_pending(conn, list(topics)).values()) if topics else 0
        return Shown(tenant, topics, clients, pending)

    # ---- helpers ------------------------------------------------------------------------------

    @staticmethod
    def _existing(conn: Connection, name: str, lock: bool = True) -> Tenant:
        query = select(TENANT).where(TENANT.c.name == name)
        row = conn.execute(query.with_for_update() if lock else query).mappings().first()
        if row is None:
            raise NoSuchTenant(f"no tenant {name!r}")
        return _tenant(row)

    @staticmethod
    def _members(conn: Connection, name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        topics = conn.execute(select(SERVICE.c.topic).where(SERVICE.c.tenant == name)
                              .order_by(SERVICE.c.topic)).scalars().all()
        clients = conn.execute(select(CLIENT.c.name).where(CLIENT.c.tenant == name)
                               .order_by(CLIENT.c.name)).scalars().all()
        return tuple(topics), tuple(clients)

    def _set(self, name: str, to: str | None, topics: Iterable[str], clients: Iterable[str]) -> dict[str, str | None]:
        topics, clients = list(dict.fromkeys(topics)), list(dict.fromkeys(clients))
        if not topics and not clients:
            raise ValueError("give at least one topic or client")
        now, before = self._clock.now_ms(), {}
        with versions.bumping(self._engine, versions.SERVICES) as conn:
            self._existing(conn, name)          # locked: a delete waits for this to commit
            for table, key, kind, items in ((SERVICE, SERVICE.c.topic, "topic", topics),
                                            (CLIENT, CLIENT.c.name, "client", clients)):
                for item in items:
                    was = conn.execute(select(key, table.c.tenant).where(key == item).with_for_update()).first()
                    if was is None:
                        if kind == "topic":
                            raise UnknownTopic(item)
                        raise ValueError(f"no client {item!r}")
                    if to is None and was.tenant != name:
                        raise ValueError(f"{kind} {item!r} is not in tenant {name!r}"
                                         + (f" (it is in {was.tenant!r})" if was.tenant else ""))
                    before[item] = was.tenant
                    conn.execute(update(table).where(key == item).values(tenant=to, updated_ms=now))
        return before


def _pending(conn: Connection, topics: list[str]) -> dict[str, int]:
    # The hot table holds only live tasks (DELAY, READY, RUNNING; invariant 7), so counting a
    # topic's rows is its pending count, read from the (topic, status) index alone.
    return dict(conn.execute(select(TASK.c.topic, func.count()).where(TASK.c.topic.in_(topics))
                             .group_by(TASK.c.topic)).all())
