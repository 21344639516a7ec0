"""ResultApplier: applies a result (or a time-out, a misfire, an unroutable publish) to one attempt
of a task, and does what follows on this node: a retry goes back into memory, a task that ended
FAILED wakes the dead-letterer. Thrift reportResult, the results queue, the loader's time-outs and
the dispatch path all go through here. Thread-safe: it holds no state of its own."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from delayq.clock import Clock
from delayq.lifecycle import Result, Status
from delayq.nodes.memory.delayqueue import DelayQueue, Entry
from delayq.nodes.metrics import Metrics
from delayq.nodes.cluster.ownership import Ownership
from delayq.nodes.cluster.services import ServiceRegistry
from delayq.store.tasks import TaskStore
from delayq.store.values import Transition


@dataclass(frozen=True)
class Followers:
    """Who is told what an applied result freed."""
    failed: Callable[[], None] = lambda: None
    """A task ended FAILED: it has a dead letter to publish."""
    ended: Callable[[str], None] = lambda topic: None
    """An attempt of the topic ended (retry, finished, failed): a slot of its maxInFlight is free."""
    key_freed: Callable[[str, bytes], None] = lambda topic, key: None
    """The attempt of a KEEP_IF_ACTIVE key in flight ended: the key's waiting task may be claimed."""


class ResultApplier:
    def __init__(self, store: TaskStore, queue: DelayQueue, ownership: Ownership, services: ServiceRegistry,
                 clock: Clock, metrics: Metrics, followers: Followers = Followers()):
        self._store, self._queue, self._ownership = store, queue, ownership
        self._metrics, self._followers = metrics, followers
        self._services, self._clock = services, clock

    def ended(self, topic: str, key: bytes | None = None) -> None:
        """An attempt of the topic ended here (a result, a time-out, a confirm that finishes it).
        With its key: a task of the key held back for it may go (none is held for a key whose
        tasks are not KEEP_IF_ACTIVE, so telling of any key is harmless)."""
        self._followers.ended(topic)
        if key is not None:
            self._followers.key_freed(topic, key)

    def apply(self, task_id: str, attempt: int, result: Result, message: str | None,
              move_retry: bool = False) -> Transition:
        """move_retry: put a retry on one of our shards (the task may be another node's), so it
        waits in our memory rather than for its owner's next scan."""
        retry_shard = self._ownership.pick_shard(near=True) if move_retry and self._ownership.shards() else None
        t = self._store.apply_result(task_id, attempt, result, message, self._clock.now_ms(),
                                     self._services.policy, self._ownership.node_id, retry_shard)
        if not t.applied:
            return t
        if t.status is not Status.RUNNING:
            self.ended(t.topic, t.freed_key)
        if t.status is Status.DELAY and t.due_ms is not None:
            self._metrics.retried.labels(t.topic).inc()
            self._queue.offer_written([Entry(task_id, t.shard_id, t.due_ms, topic=t.topic)])
        elif t.status is Status.FAILED:
            self._metrics.failed.labels(t.topic).inc()
            self._followers.failed()
        elif t.status is Status.FINISHED:
            self._metrics.finished.labels(t.topic).inc()
        elif t.status is Status.CANCELLED:       # a cancel asked while the attempt ran
            self._metrics.cancelled.labels(t.topic).inc()
        return t
