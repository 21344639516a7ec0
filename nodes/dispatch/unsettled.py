"""Unsettled: claims whose outcome the node does not know, undone as soon as MySQL answers.

A claim that fails as MySQL goes down (the connection drops, the server shuts down) may still have
committed: its tasks are then READY, their attempt taken, claimed by this node at that instant,
and never published. The dispatcher puts them back into memory as DELAY, but its next claim would
skip them (they are not DELAY in MySQL), leaving them to their time-to-run and the outage grace:
they fired as a second attempt up to 16.5 s after MariaDB came back. So each such claim is noted
here, and before the next claim of either lane it is undone in MySQL where it did commit
(TaskStore.unclaim: only rows still exactly as that claim left them), so its tasks are claimed
again and fire as the same attempt the moment MySQL answers.

Thread-safe: every claiming thread notes and settles; one settles at a time.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from delayq.clock import Clock
from delayq.nodes.dispatch.ports import ClaimStore
from delayq.store.values import Entry

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class UnknownClaim:
    task_ids: tuple[str, ...]
    owner: str              # the name the claim wrote into node_id
    claimed_ms: int         # the instant it wrote into updated_ms


class Unsettled:
    def __init__(self, store: ClaimStore, clock: Clock):
        self._store, self._clock = store, clock
        self._lock = threading.Lock()
        self._claims: list[UnknownClaim] = []

    def note(self, entries: list[Entry], owner: str, claimed_ms: int) -> None:
        with self._lock:
            self._claims.append(UnknownClaim(tuple(e.task_id for e in entries), owner, claimed_ms))

    @property
    def pending(self) -> bool:
        return bool(self._claims)

    def settle(self) -> int:
        """Undo every noted claim that committed; returns the tasks given back. Raises Unavailable
        while MySQL does not answer (the claims stay noted)."""
        with self._lock:
            undone = 0
            while self._claims:
                claim = self._claims[0]
                undone += self._store.unclaim(claim.task_ids, claim.owner, claim.claimed_ms, self._clock.now_ms())
                self._claims.pop(0)
        if undone:
            log.info("%d tasks whose claim committed as MySQL went away, never published, are DELAY "
                     "again with their attempt number", undone)
        return undone
