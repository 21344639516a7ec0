"""StallWatch: when the test process itself stopped running, so that a timing test that fails can
say whether the lateness it saw was the scheduler's or its own.

A test measures lateness by when its own threads receive messages; if the test process is paused
(a long garbage collection over a heap grown through a whole suite, or the machine's CPUs taken
by something else), every message in the pause is stamped late by it. The watch wakes every
TICK_S on a thread of its own and notes each wake-up that came more than MIN_STALL_MS late, and
times every full (generation 2) garbage collection.

    watch = StallWatch(); watch.start()      # the session's, stopped at its end
    watch.during(began_ms, ended_ms)         # what paused the process then, for a report
"""
from __future__ import annotations

import collections
import gc
import threading
import time
from dataclasses import dataclass

TICK_S = 0.02
MIN_STALL_MS = 200
KEPT = 1000


@dataclass(frozen=True)
class Stall:
    at_ms: int          # wall clock, when the process ran again
    ms: int             # how long it did not run (or how long the collection took)
    what: str           # "process paused", or "full garbage collection (N objects freed)" (a pause of
                        # the watch thread too, when long enough: then noted twice, once as each)


class StallWatch:
    def __init__(self) -> None:
        self._stalls: collections.deque[Stall] = collections.deque(maxlen=KEPT)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._gc_began = 0.0
        self.ticks = 0          # wake-ups of the watch thread so far

    def start(self) -> None:
        gc.callbacks.append(self._on_gc)
        self._thread = threading.Thread(target=self._run, name="stall-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        if self._thread is not None:
            self._thread.join(2)

    def during(self, began_ms: int, ended_ms: int) -> list[Stall]:
        return [s for s in list(self._stalls) if began_ms <= s.at_ms <= ended_ms]

    def _run(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(TICK_S):
            now = time.monotonic()
            late_ms = int((now - last - TICK_S) * 1000)
            if late_ms >= MIN_STALL_MS:
                self._stalls.append(Stall(time.time_ns() // 1_000_000, late_ms, "process paused"))
            last = now
            self.ticks += 1

    def _on_gc(self, phase: str, info: dict) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._gc_began = time.monotonic()
        elif self._gc_began:
            ms = int((time.monotonic() - self._gc_began) * 1000)
            if ms >= MIN_STALL_MS // 4:
                self._stalls.append(Stall(time.time_ns() // 1_000_000, ms,
                                          f"full garbage collection ({info.get('collected', 0):,} objects freed)"))
