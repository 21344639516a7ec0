"""Time, injected. Every component that decides "is it due yet" takes a Clock, so tests drive time."""
from __future__ import annotations

import threading
import time
from typing import Protocol


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
