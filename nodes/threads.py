"""NodeThread: a component that owns its threads (one unless told otherwise).

    class Loader(NodeThread):
        name = "loader"
        def _run(self): ...          # loop until self._stop is set; self._wake ends a wait early

`start()` runs `_run` on `threads` new daemon threads (named `name`, then `name-2`, ...), which
then share the work: `_run` must be safe to run concurrently when threads > 1. `stop()` sets the stop event, wakes
the threads and joins them (subclasses add what else unblocks them in
`_interrupt`); `alive` is what /healthz reports.
"""
from __future__ import annotations

import threading
import time
from typing import Protocol


class Part(Protocol):
    """What NodeRuntime starts and stops in order: a NodeThread, or a part owning its threads."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


class NodeThread:
    name = "thread"

    def __init__(self, threads: int = 1) -> None:
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._count = threads
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self._threads = [threading.Thread(target=self._run, name=self.name if i == 0 else f"{self.name}-{i + 1}",
                                          daemon=True) for i in range(self._count)]
        for t in self._threads:
            t.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        self._interrupt()
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))

    def wake(self) -> None:
        self._wake.set()

    @property
    def alive(self) -> bool:
        return bool(self._threads) and all(t.is_alive() for t in self._threads)

    def _interrupt(self) -> None:
        """Unblock whatever else the thread may wait on (a queue, a connection)."""

    def _run(self) -> None:
        raise NotImplementedError
