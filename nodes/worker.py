"""Worker: a component that owns one thread.

    class Loader(Worker):
        name = "loader"
        def _run(self): ...          # loop until self._stop is set; self._wake ends a wait early

`start()` runs `_run` on a new daemon thread named `name`; `stop()` sets the stop event, wakes the
thread and joins it (subclasses add what else unblocks them in `_interrupt`); `alive` is what
/healthz reports.
"""
from __future__ import annotations

import threading


class Worker:
    name = "worker"

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        self._interrupt()
        if self._thread is not None:
            self._thread.join(timeout)

    def wake(self) -> None:
        self._wake.set()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _interrupt(self) -> None:
        """Unblock whatever else the thread may wait on (a queue, a connection)."""

    def _run(self) -> None:
        raise NotImplementedError
