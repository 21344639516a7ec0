"""History: this node's last hour of fire rate, lateness, retries and failures per topic, in 10 s
slots, fed from its own metrics (no Prometheus server needed), and the merge of every node's.

    ring = Ring()                          # pure: fed totals, keeps the deltas of each slot
    ring.record(slot_start_ms, totals)     # totals: topic -> Totals, the counters as they are now
    ring.snapshot()                        # what GET /history answers (JSON-ready)
    merged = merge([snapshot, ...])        # the cluster's: slots summed across nodes
    series(merged, topic=None)             # the charts' columns: times, fires/s, p50 and p99 (s)

HistoryThread samples the node's Metrics at each slot's end (thread `console-history`, owned by
the console, stopped with the node). Memory: 360 slots × topics × 19 integers.
"""
from __future__ import annotations

import collections
import math
import threading
from dataclasses import dataclass, field
from typing import Callable, Iterable

from delayq.clock import Clock
from delayq.nodes.metrics import LATENESS_BUCKETS, Metrics
from delayq.nodes.threads import NodeThread

SLOT_MS = 10_000
SLOTS = 360                                  # one hour
BOUNDS: tuple[float, ...] = (*LATENESS_BUCKETS, math.inf)


@dataclass(frozen=True)
class Totals:
    """One topic's counters as they stand (cumulative, as Prometheus keeps them)."""
    buckets: tuple[float, ...]     # cumulative count of fires at or under each of BOUNDS
    retried: float = 0.0
    failed: float = 0.0


@dataclass
class TopicSlot:
    buckets: list[int] = field(default_factory=lambda: [0] * len(BOUNDS))   # cumulative, as Totals
    retried: int = 0
    failed: int = 0

    @property
    def fired(self) -> int:
        return self.buckets[-1]

    def add(self, other: "TopicSlot") -> None:
        self.buckets = [a + b for a, b in zip(self.buckets, other.buckets)]
        self.retried += other.retried
        self.failed += other.failed

    def as_list(self) -> list:
        return [self.retried, self.failed, self.buckets]

    @classmethod
    def from_list(cls, v: list) -> "TopicSlot":
        return cls(buckets=[int(x) for x in v[2]][:len(BOUNDS)], retried=int(v[0]), failed=int(v[1]))


class Ring:
    """The last SLOTS slots of deltas. Not thread-safe by itself: HistoryThread locks around it."""

    def __init__(self, slots: int = SLOTS):
        self._slots: collections.deque[tuple[int, dict[str, TopicSlot]]] = collections.deque(maxlen=slots)
        self._last: dict[str, Totals] | None = None

    def record(self, slot_ms: int, totals: dict[str, Totals]) -> None:
        """The slot starting at slot_ms ended with these totals. The first call only sets the
        baseline (what was counted before the ring existed belongs to no slot)."""
        last, self._last = self._last, totals
        if last is None:
            return
        slot: dict[str, TopicSlot] = {}
        for topic, now in totals.items():
            before = last.get(topic, Totals((0.0,) * len(BOUNDS)))
            d = TopicSlot([max(0, int(a - b)) for a, b in zip(now.buckets, before.buckets)],
                          max(0, int(now.retried - before.retried)), max(0, int(now.failed - before.failed)))
            if d.fired or d.retried or d.failed:
                slot[topic] = d
        self._slots.append((slot_ms, slot))

    def snapshot(self) -> dict:
        return {"slot_ms": SLOT_MS, "slots": [[t, {k: v.as_list() for k, v in s.items()}] for t, s in self._slots]}


def read_totals(metrics: Metrics) -> dict[str, Totals]:
    """Each topic's lateness histogram, retries and failures, from the node's Prometheus objects."""
    buckets: dict[str, dict[float, float]] = collections.defaultdict(dict)
    for family in metrics.lateness.collect():
        for s in family.samples:
            if s.name.endswith("_bucket"):
                buckets[s.labels["topic"]][float(s.labels["le"])] = s.value
    counters = {}
    for name, counter in (("retried", metrics.retried), ("failed", metrics.failed)):
        counters[name] = {s.labels["topic"]: s.value for family in counter.collect() for s in family.samples
                          if s.name.endswith("_total")}
    topics = set(buckets) | set(counters["retried"]) | set(counters["failed"])
    return {t: Totals(tuple(buckets[t].get(b, 0.0) for b in BOUNDS), counters["retried"].get(t, 0.0),
                      counters["failed"].get(t, 0.0)) for t in topics}


Merged = dict[int, dict[str, TopicSlot]]


def merge(snapshots: Iterable[dict]) -> Merged:
    """Every node's slots summed by slot start and topic (nodes align slots on the same clock)."""
    out: Merged = {}
    for snap in snapshots:
        for t, topics in snap.get("slots", ()):
            slot = out.setdefault(int(t), {})
            for topic, values in topics.items():
                slot.setdefault(topic, TopicSlot()).add(TopicSlot.from_list(values))
    return dict(sorted(out.items()))


def quantile(q: float, buckets: list[int]) -> float | None:
    """The q-quantile (seconds) of cumulative bucket counts over BOUNDS, interpolated within its
    bucket as Prometheus' histogram_quantile does; None without observations."""
    total = buckets[-1] if buckets else 0
    if total <= 0:
        return None
    rank = q * total
    for i, count in enumerate(buckets):
        if count >= rank:
            upper = BOUNDS[i]
            lower = BOUNDS[i - 1] if i > 0 else 0.0
            if math.isinf(upper):
                return lower          # beyond the last bound: its value is the bound, as Prometheus says
            below = buckets[i - 1] if i > 0 else 0
            inside = count - below
            return lower + (upper - lower) * ((rank - below) / inside if inside else 1.0)
    return None


@dataclass(frozen=True)
class Series:
    times_s: list[int]
    rate: list[float]               # fires per second
    p50: list[float | None]         # seconds
    p99: list[float | None]

    def as_dict(self) -> dict:
        return {"t": self.times_s, "rate": self.rate, "p50": self.p50, "p99": self.p99}


def totals(merged: Merged, topic: str | None = None) -> TopicSlot:
    """Everything of the merged hour (one topic's, or every topic's)."""
    out = TopicSlot()
    for slot in merged.values():
        for name, values in slot.items():
            if topic is None or name == topic:
                out.add(values)
    return out


def series(merged: Merged, topic: str | None = None, visible: Callable[[str], bool] = lambda t: True) -> Series:
    times, rate, p50, p99 = [], [], [], []
    for t, slot in merged.items():
        acc = TopicSlot()
        for name, values in slot.items():
            if (topic is None or name == topic) and visible(name):
                acc.add(values)
        times.append(t // 1000)
        rate.append(round(acc.fired / (SLOT_MS / 1000), 3))
        p50.append(quantile(0.5, acc.buckets))
        p99.append(quantile(0.99, acc.buckets))
    return Series(times, rate, p50, p99)


class HistoryThread(NodeThread):
    """Samples the node's metrics at the end of every slot into its Ring."""
    name = "console-history"

    def __init__(self, metrics: Metrics, clock: Clock, ring: Ring | None = None):
        super().__init__()
        self._metrics, self._clock = metrics, clock
        self._ring = ring or Ring()
        self._lock = threading.Lock()

    def snapshot(self) -> dict:
        with self._lock:
            return self._ring.snapshot()

    def sample(self) -> None:
        now = self._clock.now_ms()
        with self._lock:
            self._ring.record(now - now % SLOT_MS - SLOT_MS, read_totals(self._metrics))

    def _run(self) -> None:
        self.sample()           # the baseline
        while not self._stop.is_set():
            now = self._clock.now_ms()
            # Wake just after the next slot boundary; a stop ends the wait at once.
            if self._stop.wait((SLOT_MS - now % SLOT_MS + 5) / 1000):
                return
            self.sample()
