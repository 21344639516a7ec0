"""Flow: the DelayQueue's gate, which holds each topic to its controls (delayq.store.controls).

- maxFireRate: a token bucket per topic. The cluster-wide rate and burst are split between nodes
  by their share of the shards (tasks spread evenly over shards, so each node's share of a topic's
  due tasks is its share of the shards): no coordination per task, and a new split the moment the
  assignment changes. While shards move, an old and a new owner may both count a shard for a
  moment; a node that owns no shard fires nothing.
- maxInFlight: counted in MySQL, in the claim itself (delayq.store.tasks: the service row is locked
  and the topic's READY/RUNNING attempts counted), so it holds across nodes, node kills and
  reshards exactly. Here only an estimate of the room left keeps a node from taking what the claim
  would refuse: the room the last claim saw, less what was taken since, plus a slot for each
  result applied on this node; when it is used up the topic is looked at again every
  `recheck_ms` (results applied on other nodes free slots too).
- paused: the queue holds none of the topic's tasks (DelayQueue.pause); resuming makes memory read
  them again, and the loader paces those late by more than the catch-up grace at the catch-up rate.
- weight: the topic's share when several have tasks due (DelayQueue's round robin).

Thread-safe; called under the queue's lock, so it takes no other lock than its own.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from delayq.nodes.memory.delayqueue import DelayQueue
from delayq.nodes.metrics import Metrics
from delayq.nodes.cluster.ownership import Ownership
from delayq.nodes.cluster.services import ServiceRegistry
from delayq.nodes.cluster.watch import ServicesWatch
from delayq.store.controls import NONE, Controls

log = logging.getLogger(__name__)

UNLIMITED = 1 << 30
BUDGET_S, BUDGET_PER_SLOT, MIN_BUDGET, MAX_BUDGET = 30, 50, 1000, 100_000
STEP_S = 0.02     # a rate-limited topic goes on once it has this much of its rate in tokens: a claim per 20 ms, not per task


class Bucket:
    """Tokens at `rate` per second up to `burst`, starting full."""
    def __init__(self, rate: float, burst: float, now_ms: int):
        self.rate, self.burst = rate, burst
        self.tokens, self._at = burst, now_ms

    def available(self, now_ms: int) -> float:
        if now_ms > self._at:
            self.tokens = min(self.burst, self.tokens + (now_ms - self._at) * self.rate / 1000.0)
            self._at = now_ms
        return self.tokens

    def when(self, tokens: float) -> int:
        """When the bucket holds `tokens` (ms), if nothing is taken meanwhile (an hour at most)."""
        missing = min(tokens, self.burst) - self.tokens
        if missing <= 0:
            return self._at
        return self._at + max(1, min(3_600_000, int(missing * 1000.0 / self.rate) + 1))

    def resize(self, rate: float, burst: float) -> None:
        self.rate, self.burst = rate, burst
        self.tokens = min(self.tokens, burst)


class Flow:
    def __init__(self, ownership: Ownership, *, recheck_ms: int = 100,
                 now_ms: Callable[[], int] = lambda: int(time.monotonic() * 1000)):
        self._ownership = ownership
        self._recheck_ms = recheck_ms
        self._now_ms = now_ms
        self._lock = threading.Lock()
        self._controls: dict[str, Controls] = {}
        self._buckets: dict[str, Bucket] = {}
        self._room: dict[str, int] = {}           # topic -> in-flight slots the last claim left
        self._look_at: dict[str, int] = {}        # topic -> when to try a claim again with no room
        self._in_flight: dict[str, int] = {}      # topic -> attempts in flight at the last claim
        self._fired: dict[str, tuple[int, int, int]] = {}   # topic -> (second, taken in it, taken the one before)
        self._share = 0.0
        self._listeners: list[Callable[[], None]] = []     # the queue's kick, which subscribes itself

    def on_change(self, listener: Callable[[], None]) -> None:
        """listener() after each change that may let held-back tasks go: new controls, a new split
        of the rates, a slot freed. Called on the changer's thread, outside the flow's lock."""
        self._listeners.append(listener)

    def _changed(self) -> None:
        for listener in self._listeners:
            listener()

    # ---- settings -----------------------------------------------------------------------------

    def apply(self, controls: dict[str, Controls]) -> None:
        """New controls (every topic's, as ServicesWatch read them)."""
        with self._lock:
            self._controls = {t: c for t, c in controls.items() if c != NONE}
            self._resplit()
            for topic in list(self._room):
                if self._controls.get(topic, NONE).max_in_flight is None:
                    del self._room[topic]
        self._changed()

    def ownership_changes(self) -> None:
        """Split the rates again whenever the node's shards change."""
        self._ownership.on_change(lambda gained, lost: self.reshare())

    def reshare(self) -> None:
        """The node's shards changed: split the rates again."""
        with self._lock:
            self._resplit()
        self._changed()

    def _resplit(self) -> None:
        total = self._ownership.assigned      # draining shards of a reshard included: their owners fire too
        self._share = len(self._ownership.shards()) / total if total else 0.0
        now = self._now_ms()
        for topic in list(self._buckets):
            if self._controls.get(topic, NONE).max_fire_rate is None:
                del self._buckets[topic]
        for topic, c in self._controls.items():
            if c.max_fire_rate is None:
                continue
            rate, burst = c.max_fire_rate * self._share, max(1.0, c.burst * self._share)
            bucket = self._buckets.get(topic)
            if bucket is None:
                self._buckets[topic] = Bucket(rate, burst, now)
            else:
                bucket.resize(rate, burst)

    def limited(self) -> dict[str, int]:
        """Topics held to a rate or an in-flight cap (not paused) -> how many of their tasks memory
        keeps at most (BUDGET_S of their rate, or BUDGET_PER_SLOT per slot of their cap): a
        backlog they fire slowly must not take the memory other topics' tasks need."""
        with self._lock:
            out = {}
            for topic, c in self._controls.items():
                if c.paused:
                    continue
                if c.max_fire_rate is not None:
                    want = c.max_fire_rate * BUDGET_S
                elif c.max_in_flight is not None:
                    want = c.max_in_flight * BUDGET_PER_SLOT
                else:
                    continue
                out[topic] = int(min(MAX_BUDGET, max(MIN_BUDGET, want)))
            return out

    def caps(self) -> dict[str, int]:
        """topic -> maxInFlight, for the topics that have one."""
        with self._lock:
            return {t: c.max_in_flight for t, c in self._controls.items() if c.max_in_flight is not None}

    # ---- the gate (delayq.nodes.memory.delayqueue.Gate) ----------------------------------------------

    def weight(self, topic: str) -> int:
        c = self._controls.get(topic)
        return 1 if c is None else c.weight

    def allowance(self, topic: str, now_ms: int) -> tuple[int, int | None]:
        if topic not in self._controls:
            return UNLIMITED, None
        with self._lock:
            c = self._controls.get(topic)       # read again: apply() may have dropped it meanwhile
            if c is None:
                return UNLIMITED, None
            now = self._now_ms()
            n = UNLIMITED
            bucket = self._buckets.get(topic)
            if bucket is not None:
                if bucket.rate <= 0:
                    return 0, now_ms + 1000         # no shard here: nothing to fire, look again later
                step = max(1.0, min(bucket.burst, bucket.rate * STEP_S))
                tokens = bucket.available(now)
                if tokens < step:
                    return 0, now_ms + (bucket.when(step) - now)
                n = int(tokens)
            cap = c.max_in_flight
            room = self._room.get(topic, cap)       # not claimed yet: at most the cap, the claim says how many
            if room is not None and room <= 0:
                look_at = self._look_at.get(topic, 0)
                if now < look_at:
                    return 0, now_ms + (look_at - now)
                room = cap      # a probe: results on other nodes may have freed slots
            if room is not None:
                n = min(n, room)
            return n, None

    def took(self, topic: str, n: int, now_ms: int) -> None:
        with self._lock:
            now = self._now_ms()
            bucket = self._buckets.get(topic)
            if bucket is not None:
                bucket.available(now)
                bucket.tokens -= n
            if topic in self._room:
                self._room[topic] -= n
            second = now // 1000
            at, count, before = self._fired.get(topic, (second, 0, 0))
            if at != second:
                at, count, before = second, 0, count if at == second - 1 else 0
            self._fired[topic] = (at, count + n, before)

    # ---- in flight ----------------------------------------------------------------------------

    def claimed(self, topic: str, in_flight: int, room: int) -> None:
        """A claim counted the topic's attempts in flight (after it): `room` slots are left."""
        with self._lock:
            self._in_flight[topic] = in_flight
            self._room[topic] = room
            if room <= 0:
                self._look_at[topic] = self._now_ms() + self._recheck_ms

    def released(self, topic: str) -> None:
        """An attempt of the topic ended on this node (a result, a time-out): a slot is free."""
        with self._lock:
            if topic not in self._room:
                return
            self._room[topic] = max(1, self._room[topic] + 1)
            self._in_flight[topic] = max(0, self._in_flight.get(topic, 1) - 1)
        self._changed()

    # ---- figures ------------------------------------------------------------------------------

    def figures(self) -> dict[str, dict[str, float]]:
        """Per limited topic: paused, maxInFlight and the attempts in flight at the last claim,
        tasks taken in the last whole second (this node)."""
        with self._lock:
            second = self._now_ms() // 1000
            out = {}
            for topic, c in self._controls.items():
                at, count, before = self._fired.get(topic, (second, 0, 0))
                rate = count if at == second - 1 else before if at == second else 0
                out[topic] = {"paused": float(c.paused), "in_flight": float(self._in_flight.get(topic, 0)),
                              "max_in_flight": float(c.max_in_flight or 0), "fire_rate": float(rate),
                              "max_fire_rate": float(c.max_fire_rate or 0)}
            return out


def follow(watch: ServicesWatch, services: ServiceRegistry, flow: Flow, queue: DelayQueue,
           rescan: Callable[[], None], metrics: Metrics, spread: Callable[[str], int] = lambda topic: 0) -> None:
    """Apply every re-read of the services to the flow and the queue: paused topics leave memory,
    resumed ones are read again (rescan), topics that got a rate limit spread over every shard
    (delayq.nodes.memory.spread); per-topic figures go to the metrics."""
    rated: set[str] | None = None           # until the first read: a node starting spreads nothing

    def apply() -> None:
        nonlocal rated
        controls = services.all_controls()
        limited = set(flow.limited())
        flow.apply(controls)
        now_rated = {t for t, c in controls.items() if c.max_fire_rate is not None}
        for topic in sorted(now_rated - (rated if rated is not None else now_rated)):
            spread(topic)
        rated = now_rated
        dropped, resumed = queue.pause(t for t, c in controls.items() if c.paused)
        if dropped:
            log.info("paused topics: %d queued tasks left to MySQL until they resume", dropped)
        if resumed:
            log.info("topics resumed: %s; reading their tasks again", ", ".join(sorted(resumed)))
        if resumed or limited - set(flow.limited()):
            rescan()        # memory holds only some of these topics' tasks: read the window again

    def figures() -> dict[str, dict[str, float]]:
        out = flow.figures()
        limited = [t for t, c in out.items() if c["max_in_flight"] or c["max_fire_rate"]]
        for topic, n in queue.due_now(limited).items():
            out[topic]["held_back"] = float(n)
        return out

    watch.on_change(apply)
    flow.ownership_changes()
    metrics.topic_gauges(figures)
