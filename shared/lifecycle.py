"""The task state machine and the retry rule: pure, no I/O.

    DELAY ──claim──> READY ──STARTED──> RUNNING
      ^                │                   │
      │                ├──SUCCESS──────────┴──> FINISHED
      └───RETRY/ttr────┤                   │
                       ├──FATAL/last retry─┴──> FAILED
                       └──any end but SUCCESS, after a cancel asked while it ran──> CANCELLED
    DELAY ──cancel──> CANCELLED

READY and RUNNING go back to DELAY (with attempt kept and a new due time) on a RETRY report or an
expired time-to-run while retries remain. A cancel asked while an attempt runs cannot stop it (the
consumer hears of it at its next touch), but it ends the task at that attempt's end: CANCELLED,
unless the attempt reports SUCCESS (its work was done). FINISHED, FAILED and CANCELLED are final:
the row moves to the backlog. Every transition in the store is a conditional UPDATE on (status,
attempt), so a late or duplicate report changes nothing.
"""
from __future__ import annotations

import enum
import random
from dataclasses import dataclass


class Status(enum.IntEnum):
    DELAY = 0
    READY = 1
    RUNNING = 2
    FINISHED = 3
    FAILED = 4
    CANCELLED = 5


LIVE = frozenset({Status.DELAY, Status.READY, Status.RUNNING})
FINAL = frozenset({Status.FINISHED, Status.FAILED, Status.CANCELLED})
IN_FLIGHT = frozenset({Status.READY, Status.RUNNING})

TRANSITIONS: dict[Status, frozenset[Status]] = {
    Status.DELAY: frozenset({Status.READY, Status.CANCELLED}),
    Status.READY: frozenset({Status.RUNNING, Status.FINISHED, Status.FAILED, Status.DELAY, Status.CANCELLED}),
    Status.RUNNING: frozenset({Status.FINISHED, Status.FAILED, Status.DELAY, Status.CANCELLED}),
    Status.FINISHED: frozenset(),
    Status.FAILED: frozenset(),
    Status.CANCELLED: frozenset(),
}


def can_move(src: Status, dst: Status) -> bool:
    return dst in TRANSITIONS[src]


class Result(enum.Enum):
    """What a consumer (or the time-to-run clock) says about one attempt."""
    SUCCESS = "SUCCESS"
    RETRY = "RETRY"
    FATAL = "FATAL"
    STARTED = "STARTED"
    TIMEOUT = "TIMEOUT"        # no result within the time-to-run
    UNROUTABLE = "UNROUTABLE"  # the broker had no queue for the message
    MISFIRED = "MISFIRED"      # later than the service's misfire threshold, and its policy is fail


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int          # dispatches allowed = max_retries + 1
    backoff: str              # "fixed" or "exponential"
    base_ms: int
    max_ms: int

    def delay_ms(self, attempt: int, rng: random.Random | None = None) -> int:
        """Wait before dispatching again after failed attempt number `attempt` (1-based).

        Exponential doubles per attempt up to max_ms, with "equal jitter" (half fixed, half random)
        so that tasks failing together do not retry together.
        """
        if self.backoff == "fixed":
            return min(self.base_ms, self.max_ms)
        full = min(self.max_ms, self.base_ms * (2 ** max(0, min(attempt - 1, 30))))
        half = full // 2
        return half + (rng or random).randint(0, full - half)


@dataclass(frozen=True)
class Decision:
    status: Status
    due_ms: int | None = None   # set when status is DELAY: when to dispatch again


def on_result(status: Status, result: Result, attempt: int, policy: RetryPolicy, now_ms: int,
              rng: random.Random | None = None, unsent: bool = False, cancelled: bool = False) -> Decision | None:
    """The next state of a task given a result for its current attempt; None: no change.

    unsent: the attempt timed out with no publish ever recorded (the node that claimed it died
    first): no consumer failed it, so a further attempt goes at once, without the back-off.
    cancelled: a cancel was asked while the attempt ran: it ends the task, CANCELLED, whatever
    the attempt's end but SUCCESS."""
    decision = _next(status, result, attempt, policy, now_ms, rng, unsent)
    if cancelled and status in IN_FLIGHT and decision is not None \
            and decision.status in (Status.DELAY, Status.FAILED):
        return Decision(Status.CANCELLED)
    return decision


def _next(status: Status, result: Result, attempt: int, policy: RetryPolicy, now_ms: int,
          rng: random.Random | None, unsent: bool) -> Decision | None:
    if status is Status.DELAY:
        # Back in DELAY with this attempt number: its confirm was lost, or its time-to-run ran out,
        # and it waits to be sent again. The consumer that did get it may still settle it.
        return {Result.SUCCESS: Decision(Status.FINISHED), Result.FATAL: Decision(Status.FAILED)}.get(result)
    if status not in IN_FLIGHT:
        return None
    if result is Result.STARTED:
        return Decision(Status.RUNNING) if status is Status.READY else None
    if result is Result.SUCCESS:
        return Decision(Status.FINISHED)
    if result in (Result.FATAL, Result.MISFIRED):
        return Decision(Status.FAILED)
    # RETRY, TIMEOUT, UNROUTABLE: another attempt while retries remain.
    if attempt > policy.max_retries:
        return Decision(Status.FAILED)
    if unsent and result is Result.TIMEOUT:
        return Decision(Status.DELAY, now_ms)
    return Decision(Status.DELAY, now_ms + policy.delay_ms(attempt, rng))
