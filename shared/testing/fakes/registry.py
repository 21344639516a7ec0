"""What the node reads of its services and clients, set by the test: the callback services and
their flow controls (`Services`, as delayq.nodes.cluster.services.ServiceRegistry answers), the
clients and grants (`Clients`, as delayq.store.clients.ClientStore), and the caller a test's
thread serves (`call_as`). delayq.testing.conformance holds them to MySQL.
"""
from __future__ import annotations

from typing import Iterable

from delayq.access.grants import Client
from delayq.errors import StoreUnavailable, UnknownTopic
from delayq.nodes.front.caller import Caller, serving
from delayq.nodes.validation import ServiceSpec
from delayq.store.controls import NONE as NO_CONTROLS, Controls
from delayq.store.tenants import Tenant


class Services:
    """delayq.nodes.cluster.services.ServiceRegistry's reads: the services, by topic, and the flow
    controls a test sets (`limits`, by topic; a registered topic without any has none)."""

    def __init__(self, *services: ServiceSpec):
        self.by_topic = {s.topic: s for s in services}
        self.limits: dict[str, Controls] = {}

    def find(self, topic: str) -> ServiceSpec | None:
        return self.by_topic.get(topic)

    def get(self, topic: str) -> ServiceSpec:
        svc = self.by_topic.get(topic)
        if svc is None or not svc.enabled:
            raise UnknownTopic(topic, disabled=svc is not None)
        return svc

    def controls(self, topic: str) -> Controls:
        return self.limits.get(topic, NO_CONTROLS)

    def all_controls(self) -> dict[str, Controls]:
        return {**{topic: NO_CONTROLS for topic in self.by_topic}, **self.limits}


class Clients:
    """delayq.store.clients.ClientStore as Access reads it: these clients, at a version a test
    bumps (with `clients` changed) to make Access load them again."""

    def __init__(self, *clients: Client):
        self.clients = {c.name: c for c in clients}
        self.version_ = "1"

    def version(self) -> str:
        return self.version_

    def load(self) -> tuple[str, dict[str, Client]]:
        return self.version_, dict(self.clients)


class Tenants:
    """delayq.store.tenants.TenantStore as the quotas read it: the tenants, the topic -> tenant of
    the topics that have one, and the live tasks of each topic (`live`); `reads` counts the reads
    of the live tasks, `down` fails every read as MySQL away does."""

    def __init__(self, tenants: Iterable[Tenant] = (), topics: dict[str, str] | None = None,
                 live: dict[str, int] | None = None):
        self.tenants = {t.name: t for t in tenants}
        self.topics, self.live = dict(topics or {}), dict(live or {})
        self.reads, self.down = 0, False

    def load(self) -> tuple[dict[str, Tenant], dict[str, str]]:
        self._check()
        return dict(self.tenants), dict(self.topics)

    def pending(self, topics: Iterable[str]) -> dict[str, int]:
        """Live tasks per topic, topics with none left out."""
        self._check()
        self.reads += 1
        return {t: self.live[t] for t in set(topics) if self.live.get(t)}

    def _check(self) -> None:
        if self.down:
            raise StoreUnavailable("MySQL unavailable: (2003, \"Can't connect\")")


def call_as(name: str | None) -> None:
    """This thread serves calls of the client `name` (None: a caller with no identity), as the
    CallPool sets its caller before each call."""
    caller = Caller(("127.0.0.1", 1))
    caller.name, caller.credential = name, "digest"
    serving(caller)
