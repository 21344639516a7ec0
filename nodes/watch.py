"""What other processes change in MySQL, noticed: the clients (delayq.nodes.front.access) and the
services with their flow controls and the tenants (ServicesWatch here).

Each such set of rows has a change counter in delayq_meta (delayq.store.versions). The Watch
thread reads every counter in one statement every `poll_ms`, on an autocommit connection it keeps
(one round trip), and hands each follower its counter's value; a follower re-reads its rows when the
value is not the one it read them at. A pause, a new limit, a quota, a grant or a revocation
holds on every node within a second, without a restart.

Thread: one (Watch), owned here; `stop()` ends it.
"""
from __future__ import annotations

import logging
from typing import Callable

from sqlalchemy import Engine

from delayq import errors
from delayq.db import HeldConnection
from delayq.nodes.services import ServiceRegistry
from delayq.nodes.threads import NodeThread
from delayq.store import versions

log = logging.getLogger(__name__)


class Watch(NodeThread):
    name = "watch"

    def __init__(self, engine: Engine, poll_ms: int = 250):
        """engine: an autocommit engine (no ROLLBACK after each read)."""
        super().__init__()
        self._engine, self._poll_s = engine, poll_ms / 1000.0
        self._followers: list[tuple[str, str, Callable[[str], None]]] = []

    def follow(self, counter: str, what: str, seen: Callable[[str], None]) -> None:
        """seen(value) is called on this thread after each read of `counter`; it re-reads `what`
        when the value moved (errors.DelayqError: kept as it was, tried again at the next read)."""
        if counter not in versions.COUNTERS:
            raise ValueError(f"no such change counter: {counter!r}")
        self._followers.append((counter, what, seen))

    def _run(self) -> None:
        held, failing = HeldConnection(self._engine), False
        try:
            while not self._stop.wait(self._poll_s):
                try:
                    with held.use() as conn:
                        values = versions.read_many(conn, [counter for counter, _, _ in self._followers])
                except errors.DelayqError as e:
                    if not failing:
                        log.warning("could not look for changes in MySQL (%s): keeping what was read before", e)
                    failing = True
                    continue
                if failing:
                    log.info("looking for changes in MySQL again")
                    failing = False
                self._tell(values)
        finally:
            held.close()

    def _tell(self, values: dict[str, str]) -> None:
        for counter, what, seen in self._followers:
            try:
                seen(values[counter])
            except errors.DelayqError as e:
                log.warning("could not re-read %s (%s): keeping what was read before", what, e)
            except Exception:  # noqa: BLE001 - one follower's bug must not keep the others stale
                log.exception("re-reading %s failed", what)


class ServicesWatch:
    """The services (with their flow controls) and the tenants as last read, and who is told when
    they change."""

    def __init__(self, engine: Engine, services: ServiceRegistry):
        self._engine, self._services = engine, services
        self._version: str | None = None
        self._listeners: list[Callable[[], None]] = []

    def on_change(self, listener: Callable[[], None]) -> None:
        """Called after each re-read (on the Watch thread) and once by load(); must not block long."""
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
