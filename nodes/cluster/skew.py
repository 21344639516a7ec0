"""The reference clock: MySQL's, which every node of a cluster reads and which already decides
every claim. A node whose own clock runs ahead would otherwise fire its tasks early by the
difference (and a `delayMs` submitted to it would be due early too).

A `Sample` is one reading of the reference clock bracketed by this node's monotonic and wall
clocks; the reading happened somewhere within the round trip. For the offset it reports, the
midpoint is the estimate. `ReferenceClock` is the node's Clock: the reference time of the last
adopted sample, advanced by the monotonic clock, so a step of the system clock between checks
changes nothing. It takes the reading as made at the end of the round trip, the latest it can
have been: the node's time is then never ahead of the reference, only behind it by at most the
round trip (a fraction of a millisecond), so nothing fires early because of the estimate. Pure: the node's clock check (delayq.nodes.cluster.clockcheck) feeds it samples.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from delayq.clock import SYSTEM_CLOCK, Clock


@dataclass(frozen=True)
class Sample:
    sent_mono: float        # monotonic seconds just before the query
    received_mono: float    # ... and just after its answer
    sent_wall_ms: int       # the system clock just before the query
    reference_ms: float     # the reference clock's answer

    @property
    def round_trip_ms(self) -> float:
        return (self.received_mono - self.sent_mono) * 1000.0


    @property
    def offset_ms(self) -> float:
        """The system clock minus the reference clock (positive: this machine runs ahead)."""
        return self.sent_wall_ms + self.round_trip_ms / 2.0 - self.reference_ms


def best(samples: list[Sample]) -> Sample:
    """The sample with the shortest round trip: the least uncertain."""
    return min(samples, key=lambda s: s.round_trip_ms)


class ReferenceClock:
    """A Clock giving the reference clock's time; the system clock until the first sample."""

    def __init__(self, system: Clock = SYSTEM_CLOCK):
        self._system = system
        self._lock = threading.Lock()
        self._anchor: tuple[float, float] | None = None     # (reference ms, monotonic s) of one instant
        self.offset_ms: float | None = None                 # of the last sample: system minus reference

    def now_ms(self) -> int:
        anchor = self._anchor
        if anchor is None:
            return self._system.now_ms()
        return int(anchor[0] + (self._system.monotonic() - anchor[1]) * 1000.0)

    def monotonic(self) -> float:
        return self._system.monotonic()

    def adopt(self, sample: Sample) -> bool:
        """Take the sample as the new anchor when it says this clock is off by more than the sample's
        own uncertainty (or there is none yet); True when it did. Small corrections only follow
        real drift, so time does not wobble by the noise of each round trip."""
        with self._lock:
            self.offset_ms = sample.offset_ms
            if self._anchor is not None:
                predicted = self._anchor[0] + (sample.received_mono - self._anchor[1]) * 1000.0
                if abs(predicted - sample.reference_ms) <= sample.round_trip_ms + 1.0:
                    return False
            self._anchor = (sample.reference_ms, sample.received_mono)
            return True
