"""Loader: keeps the DelayQueue filled with the window of the node's shards.

Every scan interval it loads the DELAY tasks due before now + window, earliest first, up to the
memory cap, and moves the queue's horizon to what it knows is complete. Below the horizon the
queue holds every DELAY task of the node's shards (submits, retries and reschedules below it add
themselves), so a scan reads only from the horizon on: in steady operation that is the few tasks
that have come into the window, not the tens of thousands already in memory. The whole window is
read again (overdue tasks included, so a task a crash left behind is found again) when the horizon
was reset (start, shards gained, a claim or scan that failed, memory dropped). As a safety net for
rows written to MySQL by other means (`delayq tasks redrive`), each scan also re-reads the loaded
part of the window for a rolling share of the shards, so that every shard's is re-read within
full_scan_ms: the cost of a whole-window read, spread evenly over the scans instead of landing on
the dispatcher all at once. The re-read pauses while memory holds a backlog of overdue tasks.
After each scan its watcher times out the attempts of these shards past their deadline, the
backstop for attempts a dead node dispatched (delayq.nodes.outcomes.expiry), and hears whether
MySQL answered.
A failed scan is retried within a second, so the node is back to firing within a second of MySQL
answering again.

Thread: one, owned here; `stop()` ends it.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Protocol

from delayq.clock import Clock
from delayq.config import SchedulingSettings
from delayq.errors import Unavailable
from delayq.nodes.cluster.ownership import Ownership
from delayq.nodes.memory.delayqueue import DelayQueue, Entry
from delayq.nodes.threads import NodeThread
from delayq.store.tasks import TaskStore

log = logging.getLogger(__name__)

DRAINING_MS = 1000


@dataclass(frozen=True)
class ScanSettings:
    window_ms: int                  # how far ahead memory holds the shards' tasks
    interval_ms: int                # between two scans
    cap: int                        # tasks memory holds at most
    full_scan_ms: int = 15_000      # every shard's loaded window re-read within this
    catchup_rate: int = 2000        # tasks per second a backlog of late tasks is fired at
    catchup_grace_ms: int = 2000    # late by more than this is a backlog

    @classmethod
    def of(cls, s: SchedulingSettings) -> ScanSettings:
        return cls(window_ms=s.window_ms, interval_ms=s.scan_interval_ms, cap=s.memory_cap,
                   full_scan_ms=s.full_scan_ms, catchup_rate=s.catchup_rate, catchup_grace_ms=s.catchup_grace_ms)


class ScanWatcher(Protocol):
    """Told of each window scan, on the loader's thread (delayq.nodes.outcomes.expiry.Expiry)."""

    def scanned(self, shards: set[int], now_ms: int) -> None:
        """A scan of these shards is done: time out what expired among them (may raise Unavailable)."""

    def mysql(self, up: bool) -> None:
        """A scan found MySQL answering, or not."""


class Loader(NodeThread):
    """watcher hears of each scan (the time-outs of attempts a dead node dispatched); limited() names
    the topics held to a rate or a cap, with how many of their tasks memory keeps
    (delayq.nodes.memory.flow.Flow.limited)."""
    name = "loader"

    def __init__(self, store: TaskStore, queue: DelayQueue, ownership: Ownership, clock: Clock,
                 settings: ScanSettings, *, watcher: ScanWatcher | None = None,
                 limited: Callable[[], dict[str, int]] = dict):
        super().__init__()
        self._store, self._queue, self._ownership, self._clock = store, queue, ownership, clock
        self._window_ms, self._interval_ms, self._cap = settings.window_ms, settings.interval_ms, settings.cap
        self.scans = 0
        self._full_scan_ms = settings.full_scan_ms
        self._roll = 0                  # where the rolling re-read goes on in the sorted shard list
        self.caught_up = 0
        self._catchup_rate, self._catchup_grace_ms = settings.catchup_rate, settings.catchup_grace_ms
        self._next_slot_ms = 0.0
        self._watcher = watcher
        self._limited = limited
        ownership.on_change(lambda gained, lost: self._on_change(gained, lost))

    def rescan(self) -> None:
        """Read the whole window now: memory may lack tasks below the horizon (shards gained,
        entries a fenced claim took from memory). A horizon of 0 says memory is not known to hold
        anything; the next scan sees it in its atomic swap, however the two threads interleave."""
        self._queue.set_horizon(0)
        self._wake.set()

    def _on_change(self, gained: set[int], lost: set[int]) -> None:
        # The queue holds the shards owned now, and hands over what the new owners may lack.
        dropped = self._queue.own(self._ownership.shards())
        if lost:
            log.info("dropped %d queued tasks of lost shards %s", dropped, sorted(lost))
        if gained:
            self.rescan()   # their tasks below the horizon are not in memory

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                self.scan_once()
                if failures:
                    log.info("window scan works again after %d failed attempts", failures)
                failures = 0
                wait = self._interval_ms / 1000.0
                if self._watcher is not None:
                    self._watcher.mysql(True)
            except Exception as e:  # noqa: BLE001 - the loader must outlive any failure
                failures += 1
                # Short, so that firing resumes within a second of MySQL answering again.
                wait = min(1.0, 0.25 * 2 ** min(failures - 1, 2))
                if isinstance(e, Unavailable):
                    if self._watcher is not None:
                        self._watcher.mysql(False)
                    log.log(logging.WARNING if failures == 1 else logging.DEBUG,
                            "window scan failed: %s; retrying every %.1f s", e, wait)
                else:
                    log.exception("window scan failed; retrying in %.1f s", wait)
            self._wake.wait(wait)
            self._wake.clear()

    def scan_once(self) -> int:
        """One pass: load the window, then time out expired attempts. Returns tasks loaded."""
        now = self._clock.now_ms()
        shards = self._ownership.shards()
        if not shards or not self._ownership.claimable:
            self._queue.set_horizon(0)
            return 0
        end = now + self._window_ms
        room = max(1, self._cap)
        # Raise the horizon before reading: a submit committed before the read is in the result,
        # one that sees the new horizon adds itself to memory. The swap is atomic, so a reset to 0
        # (a rescan request, a failed claim dropping its batch) is seen here and makes this scan a
        # full one; a reset made while it runs survives it (lower_horizon) for the next.
        start = self._queue.raise_horizon(end)
        try:
            # Paused topics' tasks wait in MySQL until they resume; limited ones are read apart.
            limited = self._limited()
            paused = self._queue.paused | set(limited)
            entries = self._store.scan_due(shards, end, room, from_ms=start, skip=paused)
            if len(entries) >= room:
                # The window did not fit: only what precedes the last due time is complete.
                self._queue.lower_horizon(entries[-1].due_ms)
            entries += self._top_up(shards, limited, end)
            if start and not self._draining(now, limited):
                again = self._store.scan_due(self._rolling(shards), start, room, skip=paused)
                if len(again) >= room:
                    self._queue.lower_horizon(again[-1].due_ms)
                entries += again
        except Exception:
            self._queue.set_horizon(0)  # what lies between the old and the new horizon is unread
            raise
        # The queue drops entries of shards lost meanwhile. The filter runs outside the queue's lock
        # (each holds() takes it briefly), so the dispatcher is not kept waiting behind a whole window.
        owned = self._ownership.shards()
        fresh = [e for e in entries if not self._queue.holds(e.task_id, e.due_ms)]
        # A limited topic is paced by its own limits, and must not take the catch-up's slots.
        self._queue.offer_many([e if e.topic in limited else self._pace(e, now) for e in fresh])
        self.scans += 1
        if self._watcher is not None:
            self._watcher.scanned(owned, now)
        return len(entries)

    def _top_up(self, shards: set[int], limited: dict[str, int], end: int) -> list[Entry]:
        """A topic held to a rate or an in-flight cap keeps at most its budget of tasks in memory
        (delayq.nodes.memory.flow.Flow.limited), its earliest, read apart from the others' whenever memory
        holds less than half of it: a backlog it fires slowly never takes the memory the other
        topics' tasks need, nor pushes their horizon back. Memory is not complete below the
        horizon for these topics; a topic whose limits are lifted makes the window read again."""
        out = []
        for topic, budget in limited.items():
            if self._queue.count(topic) < budget // 2:
                out += self._store.scan_topic(shards, topic, end, budget)
        return out

    def _draining(self, now: int, limited: dict[str, int]) -> bool:
        """Memory holds tasks overdue by more than DRAINING_MS: the dispatcher is working through a
        backlog (a burst, a broker outage). The rolling re-read would only read back what memory
        holds and take the CPU the dispatcher needs; it goes on where it stopped once the backlog
        is gone. A limited topic's backlog, fired at its own pace, does not count."""
        head = self._queue.next_due_ms(skip=limited)
        return head is not None and head < now - DRAINING_MS

    def _rolling(self, shards: set[int]) -> list[int]:
        """The next share of the shards whose loaded window is read again: enough per scan that
        one pass over all of them takes at most full_scan_ms (plus the time paused draining)."""
        ordered = sorted(shards)
        count = min(len(ordered), -(-len(ordered) * self._interval_ms // self._full_scan_ms))
        first = self._roll % len(ordered)
        self._roll = first + count
        return (ordered + ordered)[first:first + count]

    def _pace(self, e: Entry, now: int) -> Entry:
        """A task found already late by more than the grace (after downtime, a failover, a lost
        window) is caught up at catchup_rate per second, in due order, so that a backlog of late
        tasks cannot delay the tasks due now. Its due time is kept for the claim's check."""
        if self._catchup_rate <= 0 or e.due_ms >= now - self._catchup_grace_ms:
            return e
        slot = max(float(now), self._next_slot_ms)
        self._next_slot_ms = slot + 1000.0 / self._catchup_rate
        self.caught_up += 1
        return e._replace(fire_ms=int(slot))
