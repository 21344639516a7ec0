"""Lateness measured from a fault's recovery point: pure arithmetic over due times, first
deliveries and the events of a fault, shared by every fault of bench.faults.

A fault is one or more events (a node stopped, a node started, a service down). Each has a start
and a recovery point: the moment the cluster can be expected to fire on time again (a SIGTERMed
node: its process exited and its ZooKeeper session closed with it; a SIGKILLed one: the kill plus
the session timeout; a start: the node answers and holds its shards; an outage: the service
answers again). A task due inside an event's [start, recovery point] cannot fire before that
recovery point, so it is judged from there: its reference time is the latest recovery point of the
events whose window holds its due time, or its due time when none does. Lateness is its first
delivery minus that reference.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from bench.measure import pct

SLOW_MS = 1000      # a task this late from its reference misses the per-task aim
# A node killed or frozen may hold claims made up to the claim lease (DELAYQ_CLAIM_LEASE_MS) before
# it stopped, not yet published: their tasks, due just before the fault, wait for it like those due
# during it. A kill's or a pause's window starts this much before the signal.
CLAIMED_BEFORE_MS = 1500


@dataclass(frozen=True)
class Event:
    what: str               # e.g. "SIGTERM n2", "start n2"
    start_ms: int
    recovered_ms: int       # the recovery point
    note: str = ""          # what did not go as planned (e.g. a node slow to balance)

    def holds(self, due_ms: int) -> bool:
        return self.start_ms <= due_ms <= self.recovered_ms


def reference_ms(due_ms: int, events: Sequence[Event]) -> int:
    """The due time, or the latest recovery point of the events whose window holds it."""
    return max([due_ms] + [e.recovered_ms for e in events if e.holds(due_ms)])


def concerned(due_ms: int, events: Sequence[Event], after_ms: int) -> bool:
    """Due during an event, or within after_ms after its recovery point."""
    return any(e.start_ms <= due_ms <= e.recovered_ms + after_ms for e in events)


def attributed(due_ms: int, events: Sequence[Event]) -> Event | None:
    """The event a task is due during or after: the last one started at or before its due time."""
    before = [e for e in events if e.start_ms <= due_ms]
    return max(before, key=lambda e: e.start_ms) if before else None


@dataclass(frozen=True)
class Slow:
    """A task more than SLOW_MS late from its reference, to look up in the node logs."""
    task_id: str
    due_ms: int
    reference_ms: int
    first_ms: float


@dataclass
class Recovery:
    """The lateness from the reference of the tasks due during or within after_ms after an event."""
    lateness_ms: list[float] = field(default_factory=list)      # delivered ones, sorted
    undelivered: int = 0
    slow: list[Slow] = field(default_factory=list)              # more than SLOW_MS late, by due time
    worst_by_event: dict[str, float] = field(default_factory=dict)   # event -> max lateness of its tasks

    @property
    def max_s(self) -> float | None:
        return self.lateness_ms[-1] / 1000 if self.lateness_ms else None

    @property
    def p99_s(self) -> float | None:
        return pct(self.lateness_ms, 0.99) / 1000 if self.lateness_ms else None

    def note(self, what: str) -> str:
        worst = ", ".join(f"{e} {ms / 1000:.2f} s" for e, ms in self.worst_by_event.items())
        return (f"{what}; {len(self.lateness_ms)} tasks due during or soon after it, {len(self.slow)} more than "
                f"{SLOW_MS / 1000:g} s late from their reference" + (f"; worst per event: {worst}" if worst else "")
                + (f"; {self.undelivered} never delivered (see lost)" if self.undelivered else ""))


def from_recovery(tasks: dict[str, int], first_ms: dict[str, float], events: Sequence[Event],
                  after_ms: int, acked: dict[str, int] | None = None) -> Recovery:
    """tasks: task id -> due ms; first_ms: task id -> first delivery ms (undelivered ones absent);
    acked: task id -> when its submit was answered. A task cannot fire before delayq has it: one
    whose submit waited on a frozen node is judged from its acknowledgement when that is later."""
    out = Recovery(worst_by_event={e.what: float("-inf") for e in events})
    for tid, due in tasks.items():
        if not concerned(due, events, after_ms):
            continue
        if tid not in first_ms:
            out.undelivered += 1
            continue
        ref = max(reference_ms(due, events), (acked or {}).get(tid, 0))
        late = first_ms[tid] - ref
        out.lateness_ms.append(late)
        if late > SLOW_MS:
            out.slow.append(Slow(tid, due, ref, first_ms[tid]))
        event = attributed(due, events)
        if event is not None:
            out.worst_by_event[event.what] = max(out.worst_by_event[event.what], late)
    out.lateness_ms.sort()
    out.slow.sort(key=lambda t: t.due_ms)
    out.worst_by_event = {e: ms for e, ms in out.worst_by_event.items() if ms != float("-inf")}
    return out
