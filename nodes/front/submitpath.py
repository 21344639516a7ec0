"""SubmitPath: the one place a group of submit and submitBatch calls is served, from the
SubmitBatcher's decoded calls to each call's answer:

    gate (SubmitGate)       may this client submit to these topics, within its tenants' quotas?
    convert (NewTasks)      TaskSpec -> checked NewTask (delayq.nodes.front.newtasks)
    write (SubmitWrites)    one statement, or streamed in parts (delayq.nodes.front.writes)
    accept (Placing)        after the commit: into memory, counted
    answer (CallAnswers)    TaskRefs, or the call's own declared exception

Each call is all or nothing on its own; the group shares one commit. Runs on the thread serving
the SubmitBatcher (delayq.nodes.front.submits); holds no state of its own.
"""
from __future__ import annotations

import collections
import logging
import time
from typing import Sequence

from delayq import errors
from delayq.access.grants import Permission
from delayq.client.gen.delayq_thrift import ttypes
from delayq.clock import Clock
from delayq.nodes.front.access import Access
from delayq.nodes.front.caller import Caller
from delayq.nodes.front.errors import CallAnswers
from delayq.nodes.front.newtasks import NewTasks
from delayq.nodes.front.placing import Placing
from delayq.nodes.front.quotas import Charge, Quotas
from delayq.nodes.front.writes import Committed, SubmitWrites
from delayq.nodes.memory.delayqueue import Entry
from delayq.store.submits import TaskWriter
from delayq.store.values import Outcome

log = logging.getLogger(__name__)

_OUTCOME = {Outcome.CREATED: ttypes.SubmitOutcome.CREATED, Outcome.REPLACED: ttypes.SubmitOutcome.REPLACED,
            Outcome.DEDUPLICATED: ttypes.SubmitOutcome.DEDUPLICATED}
SubmitCall = tuple[Sequence[ttypes.TaskSpec] | None, bool, Caller | None]     # (specs, batch, caller)


class SubmitGate:
    """Who may submit what: the caller's submit grant on every topic of its call
    (delayq.nodes.front.access), then its tenants' quotas (delayq.nodes.front.quotas)."""

    def __init__(self, access: Access, quotas: Quotas | None = None):
        self._access, self._quotas = access, quotas

    def admit(self, specs: Sequence[ttypes.TaskSpec] | None, batch: bool, caller: Caller | None,
              now_ms: int) -> tuple[Exception | None, Charge | None]:
        """(why the call is refused whole, or None; what it was charged, to refund if not written)."""
        refusal = self._refusal(specs, caller)
        if refusal is not None or self._quotas is None:
            return refusal, None
        try:
            return None, self._quotas.charge(specs, batch, now_ms)
        except errors.QuotaExceeded as e:
            return e, None

    def refund(self, charge: Charge | None) -> None:
        if charge is not None and self._quotas is not None:
            self._quotas.refund(charge)         # not written: its tasks do not count

    def _refusal(self, specs: Sequence[ttypes.TaskSpec] | None, caller: Caller | None) -> Exception | None:
        if not self._access.enabled:
            return None
        try:
            client = self._access.require(caller, Permission.SUBMIT)
            self._access.topics(client, Permission.SUBMIT,
                                dict.fromkeys(s.topic for s in specs or () if s is not None and s.topic))
        except errors.DelayqError as e:
            return e
        return None


class SubmitPath:
    def __init__(self, gate: SubmitGate, new_tasks: NewTasks, writer: TaskWriter, placing: Placing,
                 answers: CallAnswers, clock: Clock):
        self._gate, self._placing, self._answers, self._clock = gate, placing, answers, clock
        self._writes = SubmitWrites(writer, new_tasks)

    def submit_many(self, calls: Sequence[SubmitCall]) -> list:
        """Several submit (batch False) and submitBatch (True) calls, written together (one commit
        for all). Each call's result is its TaskRefs or its own exception, a declared one or
        TApplicationException (internal error); a call with a task its client may not submit, or
        over a quota of its topics' tenants, is refused whole before anything is written. Each is
        counted like any call."""
        started = time.perf_counter()
        now = self._clock.now_ms()
        admitted = [self._gate.admit(specs, batch, caller, now) for specs, batch, caller in calls]
        allowed = [(specs, batch) for (specs, batch, _), (refusal, _) in zip(calls, admitted) if refusal is None]
        out, committed = self._writes.write(allowed, now) if allowed else ([], [])
        written = iter(out)
        results = [refusal if refusal is not None else next(written) for refusal, _ in admitted]
        for (refusal, charge), result in zip(admitted, results):
            if refusal is None and isinstance(result, Exception):
                self._gate.refund(charge)
        self._accepted(committed)
        elapsed = time.perf_counter() - started
        return [self._answers.answer("submitBatch" if batch else "submit", result if isinstance(result, Exception)
                                     else [ttypes.TaskRef(taskId=d.task_id, dueAtMs=d.due_ms, created=d.created,
                                                          outcome=_OUTCOME[d.outcome]) for d in result], elapsed)
                for (_, batch, _), result in zip(calls, results)]

    def _accepted(self, committed: Committed) -> None:
        """After the commit: offer the created tasks to memory and count them, for every call of
        the group at once. A failure here is logged, not answered: the tasks are committed, the
        clients must hear so, and memory is a cache (a task the queue did not get, the loader
        reads)."""
        try:
            created = [(t, d) for new, done in committed for t, d in zip(new, done) if d.created]
            for _, d in created:
                if d.replaced is not None:
                    self._placing.forget(d.replaced)        # cancelled in MySQL: no claim takes it
            self._placing.offer(Entry(d.task_id, d.shard_id, d.due_ms, topic=t.topic) for t, d in created)
            for topic, n in collections.Counter(t.topic for t, _ in created).items():
                self._answers.metrics.submitted.labels(topic).inc(n)
        except Exception:  # noqa: BLE001 - see above
            log.exception("committed tasks not offered to memory; the loader will read them")
