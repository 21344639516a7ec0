"""What other processes change in MySQL, noticed: the clients (delayq.nodes.front.access) and the
services with their flow controls and the tenants (ServicesWatch here).

Each such set of rows has a change counter in delayq_meta (delayq.store.versions). A Watch thread
reads one counter every `poll_ms`, in one autocommit statement on a connection it keeps, and hands
the value to its follower, which re-reads its rows when the value is not the one it read them at.
A pause, a new limit, a quota, a grant or a revocation holds on every node within a second,
without a restart. Each counter has its own Watch, so a slow re-read of the services (moving a
topic's tasks, recounting quotas) never holds back a revocation.

Threads: one per Watch (`clients-watch`, `services-watch`), owned there; `stop()` ends it.
"""
from __future__ import annotations

import logging
from typing import Callable

from sqlalchemy import Engine

from delayq import errors
from delayq.db import HeldConnection
from delayq.nodes.cluster.services import ServiceRegistry
from delayq.nodes.threads import NodeThread
from delayq.store import versions

log = logging.getLogger(__name__)


class Watch(NodeThread):
    def __init__(self, engine: Engine, counter: str, what: str, seen: Callable[[str], None], *,
                 poll_ms: int = 250):
        """engine: an autocommit engine (no ROLLBACK after each read); it keeps one of its
        connections. seen(value) is called on this thread after each read of `counter`, and re-reads
        `what` when the value moved (if it raises, the rows stay as they were until a later read)."""
        super().__init__()
        versions.check(counter)
        self.name = f"{what}-watch"
        self._engine, self._counter, self._what, self._seen = engine, counter, what, seen
        self._poll_s = poll_ms / 1000.0

    def _run(self) -> None:
        held, failing = HeldConnection(self._engine), False
        try:
            while not self._stop.wait(self._poll_s):
                try:
                    with held.use() as conn:
                        value = versions.read(conn, self._counter)
                    self._seen(value)
                except Exception as e:  # noqa: BLE001 - logged once; the next read tries again
                    if not failing:
                        log.warning("could not look for changes to the %s (%s): keeping what was read "
                                    "before, trying again every %g s", self._what, e, self._poll_s,
                                    exc_info=not isinstance(e, errors.DelayqError))
                    failing = True
                    continue
                if failing:
                    log.info("the %s are read again", self._what)
                    failing = False
        finally:
            held.close()


class ServicesWatch:
    """The services (with their flow controls) and the tenants as last read, and who is told when
    they change."""

    def __init__(self, engine: Engine, services: ServiceRegistry):
        self._engine, self._services = engine, services
        self._version: str | None = None
        self._listeners: list[Callable[[], None]] = []

    def on_change(self, listener: Callable[[], None]) -> None:
        """Called after each re-read (on its Watch's thread) and once by load(); must not block long."""
        self._listeners.append(listener)

    def load(self, version: str | None = None) -> None:
        """Read everything now (at start, inside the node's wait for MySQL), at `version` of the
        services' counter when the caller has just read it."""
        if version is None:
            version = versions.current(self._engine, versions.SERVICES)
        self._services.refresh()
        self._version = version
        for listener in self._listeners:
            try:
                listener()
            except Exception:  # noqa: BLE001 - one listener's bug must not keep the change from the others
                log.exception("applying changed services failed")

    def seen(self, version: str) -> None:
        """The services' counter as the Watch read it (before the rows: a change made between is
        seen at the next read)."""
        if version != self._version:
            self.load(version)
