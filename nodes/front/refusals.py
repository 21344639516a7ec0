"""RefusalTally: the unauthenticated calls refused, counted per peer address, so that a flood of
them writes a bounded number of audit rows (delayq.nodes.front.audit). Pure: the caller gives the
time and writes what it is handed.

An address's first refusal is recorded as it comes (the call, its target, why it was refused);
the ones after it are only counted, and once `interval_ms` has passed since that first one, the
next look (`note` or `due`) hands back their count as one summary, and counts on from there. An
address quiet for a whole interval is forgotten: its next refusal is recorded as a first again.
So an address costs the audit log at most one row an interval, however fast it calls, plus its
first.

    interval 60 s; 10.0.0.7 refused at 0 s, 1 s, ... 299 s (300 calls), then silent
    rows: the first call at 0 s; "59 unauthenticated calls refused in the last 60 s" at 60 s;
          "60 ..." at 120, 180 and 240 s, and at the first look past 300 s (or at `flush`, when
          the node stops): 6 rows for 300 calls

A connection refused before it could make a call (delayq.nodes.front.handshakes: an address past
its budget of TLS handshakes) is only counted (`count`), in the same window as the address's
calls: it has no call to record, and it is counted on the server's I/O thread, which writes no row.

At most `max_addresses` are told apart: past that, new addresses share one tally (OTHERS), so
that a spread of sources costs memory and rows no more than one address more.
"""
from __future__ import annotations

from dataclasses import dataclass

OTHERS = "(other addresses)"


@dataclass(frozen=True)
class Summary:
    """`count` unauthenticated calls refused from `address` between since_ms and until_ms."""
    address: str
    count: int
    since_ms: int
    until_ms: int

    @property
    def outcome(self) -> str:
        seconds = max(1, round((self.until_ms - self.since_ms) / 1000))
        return f"{self.count} unauthenticated calls refused in the last {seconds} s"


@dataclass
class _Window:
    since_ms: int
    count: int = 0


class RefusalTally:
    """Not thread-safe: its owner (delayq.nodes.front.audit.Audit) holds a lock around it."""

    def __init__(self, interval_ms: int, max_addresses: int = 1024):
        self._interval_ms, self._max = interval_ms, max_addresses
        self._windows: dict[str, _Window] = {}
        # Every audited call looks: the windows are gone through at most once a second, so that a
        # flood from many addresses costs each call little (a summary comes up to a second late).
        self._every_ms = min(1000, interval_ms)
        self._looked_ms: int | None = None

    def note(self, address: str, now_ms: int) -> tuple[bool, list[Summary]]:
        """A refusal from address now: (whether it is to be recorded as it is, the summaries due)."""
        due = self.due(now_ms)
        if address not in self._windows and len(self._windows) >= self._max:
            address = OTHERS
        window = self._windows.get(address)
        if window is None:
            self._windows[address] = _Window(now_ms)
            return True, due
        window.count += 1
        return False, due

    def count(self, address: str, now_ms: int) -> None:
        """A refusal from address now, only counted: its summary comes at the next look past the
        interval."""
        if address not in self._windows and len(self._windows) >= self._max:
            address = OTHERS
        window = self._windows.setdefault(address, _Window(now_ms))
        window.count += 1

    def due(self, now_ms: int) -> list[Summary]:
        """The summaries of the windows an interval old by now; those with nothing counted end."""
        if self._looked_ms is not None and now_ms - self._looked_ms < self._every_ms:
            return []
        self._looked_ms = now_ms
        out = []
        for address, window in list(self._windows.items()):
            if now_ms - window.since_ms < self._interval_ms:
                continue
            if window.count:
                out.append(Summary(address, window.count, window.since_ms, now_ms))
                self._windows[address] = _Window(now_ms)
            else:
                del self._windows[address]
        return out

    def flush(self, now_ms: int) -> list[Summary]:
        """Every count not yet handed back (the node stops)."""
        out = [Summary(a, w.count, w.since_ms, now_ms) for a, w in self._windows.items() if w.count]
        self._windows.clear()
        return out
