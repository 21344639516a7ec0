"""ClaimLead: how far ahead of their due time the prompt lane claims tasks.

A claim must be committed by the due instant for the task to go out on time. On a quiet machine a
claim of a few tasks takes 2-3 ms and DELAYQ_CLAIM_LEAD_MS (20 ms) is ample; while MySQL is busy
(a burst being claimed and recorded beside it) the same claim was measured at 5-60 ms, with some
past 100 ms, and a fixed 20 ms lead published on-time topics' tasks tens of milliseconds late.
So the lead follows the claims: the configured lead, or one and a half times the slowest of the
last RECENT claims if that is more, at most `max_ms`. From the claim on, a cancel answers
ALREADY_DISPATCHED: the window in which that happens widens with the lead, only while claims are slow.
"""
from __future__ import annotations

import collections
import threading

RECENT = 32


class ClaimLead:
    def __init__(self, base_ms: int, max_ms: int):
        self.base_ms, self.max_ms = base_ms, max(base_ms, max_ms)
        self._recent: collections.deque[float] = collections.deque(maxlen=RECENT)
        self._lock = threading.Lock()

    def claimed(self, took_ms: float) -> None:
        with self._lock:
            self._recent.append(took_ms)

    @property
    def ms(self) -> int:
        with self._lock:
            slowest = max(self._recent, default=0.0)
        return min(self.max_ms, max(self.base_ms, int(1.5 * slowest)))
