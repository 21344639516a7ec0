"""Time that moves only when the test moves it."""
from __future__ import annotations


class ManualClock:
    """delayq.clock.Clock, set by the test: `now` in epoch ms; monotonic() follows it."""

    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def now_ms(self) -> int:
        return self.now

    def monotonic(self) -> float:
        return self.now / 1000.0
