"""OfferTimes: when the DelayQueue's entries were offered, to a tenth of a second, without a time
per entry: the queue numbers its offers in order, and this keeps a mark (time, next number) at
most every MARK_EVERY_S, for twice the handover's look-back. A shard's loss hands over the entries
offered since a moment (delayq.nodes.memory.delayqueue, "Handover"): those numbered from `since(t)` on.

Not thread-safe: the DelayQueue calls it with its lock held.
"""
from __future__ import annotations

import collections

MARK_EVERY_S = 0.1      # how finely the offers' times are kept


class OfferTimes:
    def __init__(self, keep_s: float):
        self._keep_s = keep_s
        self._marks: collections.deque[tuple[float, int]] = collections.deque()   # (monotonic s, first seq)

    def offering(self, now: float, seq: int) -> None:
        """Offers are about to be numbered from `seq` on, at `now`."""
        if not self._marks or now - self._marks[-1][0] >= MARK_EVERY_S:
            self._marks.append((now, seq))
            while len(self._marks) > 1 and self._marks[1][0] < now - self._keep_s:
                self._marks.popleft()

    def since(self, t: float, next_seq: int) -> int:
        """The first number an entry offered at t or later can have. Each offer leaves a mark
        unless one was left less than MARK_EVERY_S before it, so the entries offered from t on
        are those from the first mark left after t - MARK_EVERY_S (next_seq: none since)."""
        for at, seq in self._marks:
            if at >= t - MARK_EVERY_S:
                return seq
        return next_seq
