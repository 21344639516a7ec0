"""What a Dispatcher is built from: its tunables as one frozen value, and its collaborators in four
small bundles, each the side of the pipeline it deals with:

    Claims       MySQL's side of a claim: the claim store, the shards the node holds at their
                 epochs (the fence), the claims whose answer MySQL lost, and what a claim's lease
                 is timed with (a clock that runs through pauses, and the watch that sees them)
    Memory       where due tasks come from and where what is not claimed goes back: the DelayQueue,
                 its flow gate (in-flight caps), and a re-read of the window when a claim was fenced
    Publishing   where a claimed task goes: the lane's outbox, each topic's service (its exchange
                 and routing key), the exchange guard's verdicts, the node's default exchange
    Outcomes     what follows a release: publish outcomes (the Recorder), misfires (the results),
                 the attempt's time-to-run (Deadlines), each through a port of
                 delayq.nodes.dispatch.ports, so that dispatch imports nothing of delayq.nodes.outcomes

Both lanes share every bundle but Publishing, whose outbox is the lane's own (`via`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

from delayq.config import SchedulingSettings
from delayq.nodes.cluster.ownership import Ownership
from delayq.nodes.dispatch.ports import (ClaimStore, DeadlineBook, ExchangeVerdicts, Outbox, OutcomeHandler, Results,
                                         ServiceFinder)
from delayq.nodes.dispatch.lease import NoPauses, Pauses, boottime
from delayq.nodes.dispatch.unsettled import Unsettled
from delayq.nodes.memory.delayqueue import BULK, DelayQueue
from delayq.nodes.memory.flow import Flow
from delayq.nodes.memory.keyholds import KeyHolds


@dataclass(frozen=True)
class DispatchSettings:
    lane: str = BULK
    batch: int = 100            # tasks per claim
    claimers: int = 1           # claiming threads
    lead_ms: int = 20           # how far ahead of its due time a task is claimed, at first
    lease_ms: int = 1500        # how long a claim stays publishable (delayq.nodes.dispatch.lease)

    @classmethod
    def of(cls, s: SchedulingSettings) -> DispatchSettings:
        return cls(batch=s.dispatch_batch, claimers=s.write_concurrency, lead_ms=s.claim_lead_ms,
                   lease_ms=s.claim_lease_ms)

    def for_lane(self, lane: str, *, max_batch: int, claimers: int | None = None) -> DispatchSettings:
        return dataclasses.replace(self, lane=lane, batch=min(self.batch, max_batch),
                                   claimers=self.claimers if claimers is None else claimers)


def _nothing() -> None:
    pass


@dataclass(frozen=True)
class Claims:
    store: ClaimStore
    ownership: Ownership
    unsettled: Unsettled
    pauses: Pauses = NoPauses()
    lease_clock: Callable[[], float] = boottime


@dataclass(frozen=True)
class Memory:
    queue: DelayQueue
    flow: Flow | None = None
    # A claim was fenced on some shard: if the shard is ours again at a newer epoch than we knew,
    # its tasks are in MySQL only, and the loader reads the window again.
    rescan: Callable[[], None] = _nothing
    # Where the KEEP_IF_ACTIVE tasks a claim left waiting for their key go (one of the
    # dispatcher's own when not given).
    keys: KeyHolds | None = None


@dataclass(frozen=True)
class Publishing:
    outbox: Outbox
    services: ServiceFinder
    guard: ExchangeVerdicts
    default_exchange: str

    def via(self, outbox: Outbox) -> Publishing:
        return dataclasses.replace(self, outbox=outbox)


@dataclass(frozen=True)
class Outcomes:
    recorder: OutcomeHandler
    results: Results
    deadlines: DeadlineBook
