"""Recent: counts the console shares between its viewers for a few seconds.

The Topics and Upcoming load pages count MySQL rows per topic (delayq.nodes.console.reads, each
count capped). Five operators refreshing those pages every few seconds would each count again;
here a count made less than `ttl_s` ago is answered from memory with its age (the page says how
old), and viewers asking for the same count at once wait for the one under way instead of
starting their own. A count that failed is not kept: the next viewer tries again.

Thread-safe: called from the HTTP server's request threads. Bounded: at most `most` keys, the
oldest dropped first.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, Generic, Hashable, TypeVar

V = TypeVar("V")


class Recent(Generic[V]):
    def __init__(self, ttl_s: float, now: Callable[[], float] = time.monotonic, most: int = 4096):
        self._ttl_s, self._now, self._most = ttl_s, now, most
        self._lock = threading.Lock()
        self._values: dict[Hashable, tuple[float, V]] = {}
        self._counting: dict[Hashable, threading.Lock] = {}

    def get(self, key: Hashable, count: Callable[[], V]) -> tuple[V, float]:
        """The value of `key`, counted now or less than ttl_s ago, and its age in seconds."""
        with self._lock:
            held = self._fresh(key)
            if held is not None:
                return held
            mine = self._counting.setdefault(key, threading.Lock())
        with mine:                 # one count per key at a time: the others wait for it, then read it
            with self._lock:
                held = self._fresh(key)
                if held is not None:
                    return held
            value = count()
            with self._lock:
                if len(self._values) >= self._most and key not in self._values:
                    del self._values[min(self._values, key=lambda k: self._values[k][0])]
                self._values[key] = (self._now(), value)
                self._counting.pop(key, None)
            return value, 0.0

    def _fresh(self, key: Hashable) -> tuple[V, float] | None:
        held = self._values.get(key)
        if held is None:
            return None
        age = self._now() - held[0]
        return (held[1], age) if age < self._ttl_s else None
