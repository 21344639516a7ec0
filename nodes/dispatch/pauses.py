"""PauseWatch: when the node's process did not run at all (SIGSTOP, a frozen VM, a stop-the-world
garbage collection), told apart from a node that ran but was slow (busy CPUs, a long queue of its
own work), so that a claim lease that runs out is blamed on the right one (delayq.nodes.dispatch.lease).

    watch = PauseWatch(); watch.start()
    watch.paused_between(taken, now)     # seconds of CLOCK_BOOTTIME in that span the process was stopped
    watch.stop()

A thread of its own wakes every TICK_S; a wake that comes MIN_PAUSE_S or more after it was due is
a pause: CLOCK_BOOTTIME (which runs through a stopped process and a suspended machine) jumped while
the thread made no progress. On a machine merely busy, a thread that sleeps gets the CPU (and the
GIL) back within milliseconds; half a second is a stop. Each pause is logged once, with its length.

Thread: `pause-watch`, owned here (start/stop); it only sleeps and reads the clock.
"""
from __future__ import annotations

import collections
import logging
import threading
from typing import Callable

from delayq.nodes.dispatch.lease import boottime
from delayq.nodes.threads import NodeThread

log = logging.getLogger(__name__)

TICK_S = 0.05
MIN_PAUSE_S = 0.5
KEPT = 64           # pauses remembered: a lease looks back at most its own length


class PauseWatch(NodeThread):
    name = "pause-watch"

    def __init__(self, clock: Callable[[], float] = boottime) -> None:
        super().__init__()
        self._clock = clock
        self._lock = threading.Lock()
        self._pauses: collections.deque[tuple[float, float]] = collections.deque(maxlen=KEPT)
        self._last: float | None = None      # the watch's last wake-up (None: not running)

    def paused_between(self, began: float, ended: float) -> float:
        """Seconds within [began, ended] (boottime) during which the process did not run. A pause
        the watch's thread has not woken from yet counts too: after SIGCONT, whichever thread runs
        first may ask before the watch has noted it."""
        with self._lock:
            spans = list(self._pauses)
            if self._last is not None and ended - self._last - TICK_S >= MIN_PAUSE_S:
                spans.append((self._last + TICK_S, ended))
        return sum(max(0.0, min(e, ended) - max(b, began)) for b, e in spans)

    def woke(self, now: float) -> None:
        """The watch's thread ran at `now`: a gap since its last wake-up is a pause."""
        with self._lock:
            last, self._last = self._last, now
        if last is not None and now - last - TICK_S >= MIN_PAUSE_S:
            self.noted(last + TICK_S, now)

    def noted(self, began: float, ended: float) -> None:
        """A pause from `began` to `ended` (boottime seconds): what the thread saw, or a test's."""
        with self._lock:
            self._pauses.append((began, ended))
        log.warning("the node did not run for %.1f s (stopped or frozen)", ended - began)

    def _run(self) -> None:
        self.woke(self._clock())
        while not self._stop.wait(TICK_S):
            self.woke(self._clock())
