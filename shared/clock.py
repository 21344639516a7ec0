"""Time, injected. Every component that decides "is it due yet" takes a Clock, so tests drive time."""
from __future__ import annotations

import threading
import time
from typing import Protocol

# The latest instant ISO 8601 can say (9999-12-31T23:59:59.999Z): the bound of every time and
# duration the delayq command and the console take; past it a value would not fit a Thrift i64
# (or a due time added to it would not), and a call would fail in the client's encoder.
LATEST_MS = 253_402_300_799_999


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock time in epoch milliseconds: what due times are measured against."""

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin; only for intervals and timeouts."""


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()


SYSTEM_CLOCK = SystemClock()


def pause(seconds: float) -> None:
    """Wait this long, as a timed wait (the node's threads all wait that way): time.sleep raises
    EINVAL under libfaketime, which the clock test runs a node with (tests/integration/test_clock.py)."""
    threading.Event().wait(seconds)
