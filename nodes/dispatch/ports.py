"""What the node's dispatch core needs of MySQL and RabbitMQ, and of what follows a release, as
small interfaces: the Dispatcher and the Recorder are written against these, delayq.store.tasks.TaskStore,
delayq.nodes.amqp.publisher.ConfirmedPublisher, delayq.nodes.cluster.services.ServiceRegistry and
delayq.nodes.amqp.exchanges.ExchangeGuard implement them, and delayq.testing.fakes has in-memory
ones for unit tests.

Threading contract: every method may be called from any thread; `Outbox.publish` returns at once
and calls `on_outcome(ref, outcome, reason)` exactly once per message, later, on the outbox's own
thread, where the handler must not block (delayq.nodes.amqp.confirms lists the outcomes).
"""
from __future__ import annotations

from typing import Callable, Iterable, Mapping, Protocol, Sequence

from delayq.lifecycle import Result
from delayq.nodes.amqp.confirms import Outcome
from delayq.nodes.amqp.frames import Outgoing
from delayq.nodes.dispatch.attempts import Attempt, Settled
from delayq.nodes.validation import ServiceSpec
from delayq.store.values import Claim, Claimed, Entry, Transition


class ClaimStore(Protocol):
    def claim(self, entries: Sequence[Entry], owner: str, fence: Mapping[int, int], now_ms: int,
              caps: Mapping[str, int] | None = None) -> Claim:
        """DELAY -> READY, attempt + 1, for the entries of shards `owner` holds at `fence`'s epochs."""

    def unclaim(self, task_ids: Sequence[str], owner: str, claimed_ms: int, now_ms: int) -> int:
        """Undo a claim whose answer was lost, where nothing touched its rows since."""


class RecordStore(Protocol):
    def record_dispatched(self, confirmed: Sequence[tuple[Claimed, int]], node_id: str) -> list[Claimed]:
        """Execlog rows of confirmed publishes; returns the tasks that finished with them (ttr 0)."""

    def release(self, claimed: Sequence[Claimed], due_ms: int, sent: bool, node_id: str, now_ms: int) -> int:
        """Back to DELAY, due at due_ms; sent=False gives the attempt number back."""


class Outbox(Protocol):
    @property
    def ready(self) -> bool:
        """Connected: a publish may go out now."""

    def publish(self, batch: list[Outgoing], on_outcome: Outcome, veto: Callable[[], str | None] | None = None) -> None:
        """Send the batch (veto asked just before the write); each message's outcome to on_outcome."""


class ServiceFinder(Protocol):
    def find(self, topic: str) -> ServiceSpec | None:
        """The topic's callback service (its exchange, routing key, misfire policy), or None."""


class ExchangeVerdicts(Protocol):
    """The exchange guard as the dispatch core asks it (delayq.nodes.amqp.exchanges)."""

    def verdict(self, exchange: str) -> str | None:
        """Why the exchange may not be published to now, or None."""

    def retry_in(self, exchange: str) -> float:
        """Seconds until an unusable exchange is checked again."""

    def unusable(self) -> dict[str, str]:
        """Exchange -> why, for every exchange known to be unusable now."""


# ---- what follows a release (delayq.nodes.outcomes) ------------------------------------------


class OutcomeHandler(Protocol):
    """delayq.nodes.outcomes.recorder.Recorder: it records what became of each attempt."""

    def on_outcome(self, attempt: Attempt, outcome: str, reason: str | None) -> None:
        """A published attempt's outcome, on the outbox's thread: must not block."""

    def put(self, settled: list[Settled]) -> None:
        """Attempts not published (HELD, RETURNED): back to DELAY."""


class Results(Protocol):
    """delayq.nodes.outcomes.results.ResultApplier, as the dispatcher applies a misfire."""

    def apply(self, task_id: str, attempt: int, result: Result, message: str | None) -> Transition: ...


class DeadlineBook(Protocol):
    """delayq.nodes.outcomes.deadlines.Deadlines: the node times its own attempts out."""

    def add(self, deadlines: Iterable[tuple[int, str, int]]) -> None:
        """(deadline ms, task id, attempt) of attempts just claimed."""
