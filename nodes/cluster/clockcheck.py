"""ClockCheck: keeps the node's ReferenceClock on MySQL's clock and says how far off its own is.

Every `interval_ms` it reads MySQL's clock a few times, adopts the reading with the shortest round
trip (delayq.nodes.cluster.skew), and publishes the system clock's offset: the gauge
delayq_clock_offset_seconds, a WARNING when it crosses `max_offset_ms` (and an INFO when it is back
within), and `describe()` for /readyz and `delayq status`. Due times follow the reference clock
either way, so a node whose clock is 30 s ahead fires nothing early; the warning is for the
operator, whose other software on that machine is still wrong.

Thread: one, owned here; `check_now()` runs one check on the caller's thread (at start, before any
task is dispatched).
"""
from __future__ import annotations

import logging
import time

from sqlalchemy import Engine

from delayq.db import unavailable_on_failure
from delayq.errors import Unavailable
from delayq.nodes.metrics import Metrics
from delayq.nodes.cluster.skew import ReferenceClock, Sample, best
from delayq.nodes.threads import NodeThread

log = logging.getLogger(__name__)

SAMPLES = 3


class ClockCheck(NodeThread):
    name = "clock-check"

    def __init__(self, engine: Engine, clock: ReferenceClock, metrics: Metrics, *, interval_ms: int,
                 max_offset_ms: int):
        super().__init__()
        self._engine, self._clock, self._metrics = engine, clock, metrics
        self._interval_s, self._max_ms = interval_ms / 1000.0, max_offset_ms
        self._off = False

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self.check_now()
            except Unavailable as e:
                log.debug("clock check skipped: %s", e)    # MySQL's outage is reported where it matters

    def check_now(self) -> None:
        with unavailable_on_failure(), self._engine.connect() as conn:
            samples = []
            for _ in range(SAMPLES):
                sent_mono, sent_wall = time.monotonic(), time.time_ns() // 1_000_000
                # Microseconds: NOW(3) would truncate, putting the node half a millisecond behind.
                reference = float(conn.exec_driver_sql("SELECT UNIX_TIMESTAMP(NOW(6)) * 1000").scalar_one())
                samples.append(Sample(sent_mono, time.monotonic(), sent_wall, reference))
        sample = best(samples)
        self._clock.adopt(sample)
        offset = sample.offset_ms
        self._metrics.clock_offset.set(offset / 1000.0)
        off = abs(offset) > self._max_ms
        if off and not self._off:
            log.warning("this machine's clock is %s MySQL's: due times follow MySQL's clock; fix the "
                        "machine's time synchronisation", self.describe())
        elif self._off and not off:
            log.info("this machine's clock is back within %d ms of MySQL's (%+.0f ms)", self._max_ms, offset)
        self._off = off

    @property
    def offset_ms(self) -> float | None:
        return self._clock.offset_ms

    def describe(self) -> str | None:
        """None while within the bound, else e.g. '30.0 s ahead of'."""
        offset = self._clock.offset_ms
        if offset is None or abs(offset) <= self._max_ms:
            return None
        return f"{abs(offset) / 1000:.1f} s {'ahead of' if offset > 0 else 'behind'}"
