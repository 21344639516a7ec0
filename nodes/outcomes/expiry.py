"""Expiry: the backstop for attempts whose node died before their result or time-out.

After each window scan (on the loader's thread, delayq.nodes.memory.loader), the READY and RUNNING
tasks of this node's shards whose time-to-run has passed are timed out (retried or failed by their
service's policy), except fire-and-forget ones this node claimed itself, which it settles when the
broker answers. The node's own attempts are timed out on time by delayq.nodes.outcomes.deadlines;
this catches those a dead node dispatched, within a scan interval. Like those, it applies nothing
during an outage of delayq's own dependencies and for the grace after it
(delayq.nodes.outcomes.outages), to which it reports what each scan found of MySQL.

No thread of its own; the loader's calls it (delayq.nodes.memory.loader.ScanWatcher).
"""
from __future__ import annotations

import logging

from delayq.errors import DelayqError, Unavailable
from delayq.lifecycle import Result
from delayq.nodes.cluster.ownership import Ownership
from delayq.nodes.outcomes.outages import OutageGrace
from delayq.nodes.outcomes.results import ResultApplier
from delayq.store.overdue import OverdueRows

log = logging.getLogger(__name__)

BATCH = 1000        # expired attempts timed out per scan, at most


class Expiry:
    def __init__(self, store: OverdueRows, results: ResultApplier, ownership: Ownership, grace: OutageGrace):
        self._store, self._results, self._ownership, self._grace = store, results, ownership, grace

    def scanned(self, shards: set[int], now_ms: int) -> None:
        if self._grace.hold_until() is not None:
            return
        for task_id, attempt in self._store.expired(shards, now_ms, BATCH, self._ownership.fence()[0]):
            # Shards moved away meanwhile, or the node stops (it gave them all up): their new owners
            # time these out. Going on, a stopping node spent seconds on them, one transaction each.
            if not self._ownership.shards() >= shards:
                break
            try:
                self._results.apply(task_id, attempt, Result.TIMEOUT, "no result within the time-to-run")
            except Unavailable:
                raise
            except DelayqError as e:
                log.warning("time-out of %s attempt %d not applied: %s", task_id, attempt, e)

    def mysql(self, up: bool) -> None:
        self._grace.observe("mysql", up)
