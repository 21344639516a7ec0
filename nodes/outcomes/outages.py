"""OutageGrace: delayq's own outages must not use up consumers' time-to-run.

While MySQL, RabbitMQ or ZooKeeper is unreachable, a consumer that did its work may be unable to
report it (its result waits in its own retries, or in the results queue). Timing its attempt out
then would dispatch it again, and a task could end FAILED although every consumer succeeded. So
no time-out is applied while a dependency is down, nor for `grace_ms` after the last one came
back: the results waiting to be applied get that long to arrive first. A deadline that passed in
the meantime is enforced at the end of the grace.

States per dependency are fed two ways: `observe(name, up)` by the code that just talked to it
(MySQL: the deadline checker and the loader's sweep), and `probes` (name -> is it up now) read
at each `hold_until`, for what the node already tracks (the publisher's channel, the ZooKeeper
session). Thread-safe.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable

from delayq.clock import Clock

log = logging.getLogger(__name__)


class OutageGrace:
    def __init__(self, clock: Clock, grace_ms: int, probes: dict[str, Callable[[], bool]] | None = None):
        self._clock, self._grace_ms = clock, grace_ms
        self._probes = probes or {}
        self._lock = threading.Lock()
        self._down: set[str] = set()
        self._seen_up: set[str] = set()       # not up yet at start is not an outage
        self._back_ms = -grace_ms              # when the last outage ended

    def observe(self, name: str, up: bool) -> None:
        with self._lock:
            self._note(name, up)

    def hold_until(self) -> int | None:
        """None when time-outs may be applied now; else the earliest moment they may."""
        now = self._clock.now_ms()
        with self._lock:
            for name, probe in self._probes.items():
                self._note(name, probe())
            if self._down:
                return now + self._grace_ms
            end = self._back_ms + self._grace_ms
            return end if now < end else None

    def _note(self, name: str, up: bool) -> None:
        if up:
            self._seen_up.add(name)
        if up and name in self._down:
            self._down.discard(name)
            if not self._down:
                self._back_ms = self._clock.now_ms()
                log.info("%s is back: time-outs wait %d ms more for the results held up meanwhile",
                         name, self._grace_ms)
        elif not up and name not in self._down and name in self._seen_up:
            self._down.add(name)
            log.info("%s unreachable: no attempt is timed out until it is back", name)
