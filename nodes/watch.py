"""ServicesWatch: re-reads the services (with their flow controls) and the tenants whenever their
version in MySQL moves (delayq.store.versions), polled every `poll_ms`, and tells whoever
subscribed. A pause, a new limit or a quota change holds on every node within a second.

Thread: one, owned here; `stop()` ends it.
"""
from __future__ import annotations

import logging
from typing import Callable

from sqlalchemy import Engine

from delayq import errors
from delayq.nodes.services import ServiceRegistry
from delayq.nodes.threads import NodeThread
from delayq.store import versions

log = logging.getLogger(__name__)


class ServicesWatch(NodeThread):
    name = "services-watch"

    def __init__(self, engine: Engine, services: ServiceRegistry, poll_ms: int = 250):
        super().__init__()
        self._engine, self._services = engine, services
        self._poll_s = poll_ms / 1000.0
        self._version: str | None = None
        self._listeners: list[Callable[[], None]] = []

    def on_change(self, listener: Callable[[], None]) -> None:
        """Called on this thread after each re-read (and once by load()); must not block long."""
        self._listeners.append(listener)

    def load(self) -> None:
        """Read everything now (at start, inside the node's wait for MySQL)."""
        version = versions.current(self._engine, versions.SERVICES)
        self._services.refresh()
        self._version = version
        for listener in self._listeners:
            try:
                listener()
            except Exception:  # noqa: BLE001 - one listener's bug must not keep the change from the others
                log.exception("applying changed services failed")

    def _run(self) -> None:
        while not self._stop.wait(self._poll_s):
            try:
                if versions.current(self._engine, versions.SERVICES) != self._version:
                    self.load()
            except errors.DelayqError as e:
                log.warning("could not re-read the services (%s): keeping the ones read before", e)
