"""LoginThrottle: failed console logins, counted per peer address and interval, and summarised.

    throttle = LoginThrottle(clock, report=write_audit_row)
    if not throttle.allows(peer):       # FAILURES failed already in this interval
        ...refuse, without checking the token
    ...on a bad token or certificate: throttle.failed(peer)

A peer's interval starts at its first failure and lasts INTERVAL_S; in it, FAILURES failed logins
are checked and any further attempt is refused unchecked, so guessing tokens through the console
costs as much as the interval allows and nothing of the node's token lookups. Each interval with
failures is handed to `report` once, as one Summary, after it ended (at the next request the
console serves, `report_ended()`, or at `flush()` when it stops): the audit log gets one row per
peer and interval, however many attempts there were. At most MAX_PEERS intervals are kept; past that the
oldest is reported early.

Thread-safe (the HTTP server's request threads); `report` runs outside the lock.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable

from delayq.clock import Clock

FAILURES = 10               # failed logins checked per peer and interval
INTERVAL_S = 60.0
MAX_PEERS = 10_000


@dataclass(frozen=True)
class Summary:
    """One peer's failed logins of one interval."""
    peer: str
    began_ms: int
    failed: int             # tokens or certificates checked and refused
    refused: int            # attempts refused unchecked, past FAILURES

    @property
    def outcome(self) -> str:
        return f"refused: {self.failed} failed" + (f", {self.refused} throttled" if self.refused else "")


@dataclass
class _Interval:
    began_ms: int
    failed: int = 0
    refused: int = 0


class LoginThrottle:
    def __init__(self, clock: Clock, report: Callable[[Summary], None]):
        self._clock, self._report = clock, report
        self._lock = threading.Lock()
        self._by_peer: dict[str, _Interval] = {}

    def allows(self, peer: str) -> bool:
        """May this peer's login be checked now? A refusal is counted in its summary."""
        ended = self._take_ended()
        with self._lock:
            current = self._by_peer.get(peer)
            refuse = current is not None and current.failed >= FAILURES
            if refuse and current is not None:
                current.refused += 1
        self._send(ended)
        return not refuse

    def failed(self, peer: str) -> None:
        ended: list[Summary] = []
        with self._lock:
            current = self._by_peer.get(peer)
            if current is None:
                if len(self._by_peer) >= MAX_PEERS:
                    oldest = min(self._by_peer, key=lambda p: self._by_peer[p].began_ms)
                    ended.append(_summary(oldest, self._by_peer.pop(oldest)))
                current = self._by_peer[peer] = _Interval(self._clock.now_ms())
            current.failed += 1
        self._send(ended)

    def report_ended(self) -> None:
        """Report the intervals that ended (cheap when none did)."""
        self._send(self._take_ended())

    def flush(self) -> None:
        """Report every interval now, ended or not (the console stops)."""
        with self._lock:
            ended = [_summary(p, i) for p, i in self._by_peer.items()]
            self._by_peer.clear()
        self._send(ended)

    def _take_ended(self) -> list[Summary]:
        since = self._clock.now_ms() - int(INTERVAL_S * 1000)
        with self._lock:
            gone = [p for p, i in self._by_peer.items() if i.began_ms <= since]
            return [_summary(p, self._by_peer.pop(p)) for p in gone]

    def _send(self, summaries: list[Summary]) -> None:
        for s in summaries:
            self._report(s)


def _summary(peer: str, interval: _Interval) -> Summary:
    return Summary(peer, interval.began_ms, interval.failed, interval.refused)
