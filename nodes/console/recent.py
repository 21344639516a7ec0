"""Recent: counts the console shares between its viewers for a few seconds.

The Topics and Upcoming load pages count MySQL rows per topic (delayq.nodes.console.reads, each
count capped). Five operators refreshing those pages every few seconds would each count again;
here a count begun less than `ttl_s` ago is answered from memory with its age (the pages say how
old), and viewers asking for a count under way join it and get its outcome, its error included,
instead of starting their own one after another. A failed count is not kept: the next viewer
after it tries again.

Thread-safe: called from the HTTP server's request threads. Bounded: at most `most` values, the
oldest dropped first; a viewer waits for a count under way at most `wait_s` (a count's statements
have their own time limit, delayq.statementlimits).
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Generic, Hashable, TypeVar

from delayq import errors

V = TypeVar("V")


class _Count:
    """One count under way, and its outcome for those who joined it."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.done = threading.Event()
        self.joined = 0
        self.value: object = None
        self.error: BaseException | None = None


class Recent(Generic[V]):
    def __init__(self, ttl_s: float, now: Callable[[], float] = time.monotonic, most: int = 4096,
                 wait_s: float = 30.0):
        self._ttl_s, self._now, self._most, self._wait_s = ttl_s, now, most, wait_s
        self._lock = threading.Lock()
        self._values: dict[Hashable, tuple[float, V]] = {}      # key -> (when its count began, value)
        self._counting: dict[Hashable, _Count] = {}

    def get(self, key: Hashable, count: Callable[[], V]) -> tuple[V, float]:
        """The value of `key` and its age in seconds: counted now, by a count under way, or by one
        begun less than ttl_s ago. A count's error is raised to it and to those who joined it."""
        with self._lock:
            held = self._fresh(key)
            if held is not None:
                return held
            under_way = self._counting.get(key)
            if under_way is None:
                mine = self._counting[key] = _Count(self._now())
            else:
                under_way.joined += 1
        if under_way is not None:
            return self._join(under_way)
        try:
            value = count()
        except BaseException as e:
            mine.error = e
            raise
        else:
            mine.value = value
            with self._lock:
                if len(self._values) >= self._most and key not in self._values:
                    del self._values[min(self._values, key=lambda k: self._values[k][0])]
                self._values[key] = (mine.started, value)
            return value, self._now() - mine.started
        finally:
            with self._lock:
                self._counting.pop(key, None)
            mine.done.set()

    def joined(self, key: Hashable) -> int:
        """How many viewers wait for the count of `key` under way (0: none is)."""
        with self._lock:
            under_way = self._counting.get(key)
            return 0 if under_way is None else under_way.joined

    def _join(self, under_way: _Count) -> tuple[V, float]:
        if not under_way.done.wait(self._wait_s):
            raise errors.Unavailable(f"a count under way took more than {self._wait_s:.0f} s")
        if under_way.error is not None:
            raise under_way.error
        return under_way.value, self._now() - under_way.started      # type: ignore[return-value]

    def _fresh(self, key: Hashable) -> tuple[V, float] | None:
        held = self._values.get(key)
        if held is None:
            return None
        age = self._now() - held[0]
        return (held[1], age) if age < self._ttl_s else None
