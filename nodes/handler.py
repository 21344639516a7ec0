"""The DelayScheduler Thrift handler: converts Thrift structs to domain values, calls the store, and
maps delayq's errors to the IDL's declared exceptions in one place (`_declared`, `_answer`).

Runs on the threads of the Thrift server's lanes (submits: the SubmitBatcher's, through
`submit_many`; the rest: the CallPool's); it holds no state of its own.
"""
from __future__ import annotations

import collections
import functools
import logging
import os
import time
from typing import Callable, Iterator, Sequence

from thrift.Thrift import TApplicationException

from shared import errors
from shared.clock import Clock
from shared.gen.delayq_thrift import ttypes
from shared.lifecycle import Result
from shared.metrics import Metrics
from shared.validation import (Limits, ServiceSpec, TaskRequest, check_service, check_task, check_task_id,
                               due_time, spec_hash)
from nodes.delayqueue import DelayQueue, Entry
from nodes.ownership import Ownership
from nodes.results import ResultApplier
from nodes.services import ServiceRegistry
from nodes.store import NewTask, Submitted, TaskStore

log = logging.getLogger(__name__)

_RESULTS = {ttypes.ResultStatus.SUCCESS: Result.SUCCESS, ttypes.ResultStatus.RETRY: Result.RETRY,
            ttypes.ResultStatus.FATAL: Result.FATAL, ttypes.ResultStatus.STARTED: Result.STARTED}


def _declared(fn: Callable) -> Callable:
    """Raise delayq errors as the IDL's exceptions (anything else becomes an internal error), and
    count each call by method and outcome."""
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        started, error = time.perf_counter(), None
        try:
            return fn(self, *args, **kwargs)
        except errors.DelayqError as e:
            error = e
            raise _as_declared(e) from None
        except Exception as e:
            error = e
            raise
        finally:
            self._count(fn.__name__, error, time.perf_counter() - started)
    return wrapper


_OUTCOMES = {errors.InvalidTask: "invalid", errors.InvalidService: "invalid", errors.UnknownTopic: "unknown_topic",
             errors.Conflict: "conflict", errors.NotFound: "not_found", errors.Unavailable: "unavailable",
             errors.StoreUnavailable: "unavailable", errors.BrokerUnavailable: "unavailable"}


def _as_declared(e: errors.DelayqError) -> Exception:
    """The IDL exception a client sees for one of delayq's errors."""
    if isinstance(e, errors.InvalidTask):
        return ttypes.InvalidTask(field=e.field, reason=e.reason, index=e.index)
    if isinstance(e, errors.InvalidService):
        return ttypes.InvalidService(field=e.field, reason=e.reason)
    if isinstance(e, errors.UnknownTopic):
        return ttypes.UnknownTopic(topic=e.topic)
    if isinstance(e, errors.Conflict):
        return ttypes.Conflict(taskId=e.task_id, reason=e.reason)
    if isinstance(e, errors.NotFound):
        return ttypes.NotFound(taskId=e.task_id)
    return ttypes.Unavailable(reason=str(e))     # Unavailable, or a node misconfigured: try another


def new_task_ids(now_ms: int, n: int) -> Iterator[str]:
    """Task ids for up to n tasks: time-ordered (keeps InnoDB inserts near the end of the primary
    key) and unguessable; one read of the system's random source for all of them."""
    prefix, rand = f"{now_ms:011x}", os.urandom(8 * n).hex()
    return (prefix + rand[16 * i:16 * i + 16] for i in range(n))


# A group of at least STREAM_ROWS tasks, none with an id of its client's, goes to MySQL in parts of
# STREAM_PART tasks (Handler._streamed). In-process, checking, preparing and writing a 1000-task
# submitBatch took 16-18 ms in 8 parts against 20-25 ms in one statement; through a node, one
# producer's submitBatch(1000) reached 0.50-0.77 of the MySQL insert limit against 0.48-0.59, in
# seven runs interleaved with the one-statement code. Each part costs a statement, and the
# transaction two round trips (START TRANSACTION, COMMIT), which a small group does not win back.
STREAM_ROWS = 256
STREAM_PART = 128


class _Refused(Exception):
    """A call of a streamed group failed its checks: the group goes the other way."""


def _streamable(calls: Sequence[tuple[Sequence[ttypes.TaskSpec] | None, bool]]) -> bool:
    """Whether a group of calls streams (Handler._streamed): large enough, and every task's id
    generated here, so none can exist already and no row needs looking up first."""
    if sum(len(specs) for specs, _ in calls if specs) < STREAM_ROWS:
        return False
    return all(specs and all(spec is not None and spec.taskId is None for spec in specs) for specs, _ in calls)


class Handler:
    def __init__(self, store: TaskStore, services: ServiceRegistry, queue: DelayQueue, ownership: Ownership,
                 clock: Clock, results: ResultApplier, metrics: Metrics, *, limits: Limits, max_batch: int,
                 window_ms: int, default_exchange: str,
                 check_exchange: Callable[[str], str | None], cluster_info: Callable[[], ttypes.ClusterInfo],
                 hint: Callable[[list[Entry]], None] = lambda entries: None):
        self._store, self._services, self._queue = store, services, queue
        self._ownership, self._clock, self._limits = ownership, clock, limits
        self._results = results
        self._metrics = metrics
        self._max_batch, self._window_ms = max_batch, window_ms
        self._default_exchange = default_exchange
        self._check_exchange = check_exchange
        self._hint = hint
        self._cluster_info = cluster_info
        self._call_metrics: dict[tuple[str, str], tuple] = {}

    # ---- tasks --------------------------------------------------------------------------------

    def submit_many(self, calls: Sequence[tuple[Sequence[ttypes.TaskSpec] | None, bool]]) -> list:
        """Several submit (batch False) and submitBatch (True) calls, written together (one commit
        for all). Each call is all or nothing on its own: its result is its TaskRefs or
        its own exception, a declared one or TApplicationException (internal error). Each is counted
        like any call."""
        started = time.perf_counter()
        now = self._clock.now_ms()
        out = self._streamed(calls, now) if _streamable(calls) else None
        if out is None:
            out = self._in_one(calls, now)
        elapsed = time.perf_counter() - started
        return [self._answer("submitBatch" if batch else "submit", result, elapsed)
                for (_, batch), result in zip(calls, out)]

    def _in_one(self, calls: Sequence[tuple[Sequence[ttypes.TaskSpec] | None, bool]], now: int) -> list:
        """Every call checked and prepared, then the tasks of those that passed written in one
        statement (TaskStore.insert_groups, which settles the clients' own ids)."""
        out: list = [None] * len(calls)
        prepared: list[tuple[int, list[NewTask]]] = []
        ids = new_task_ids(now, sum(len(specs) for specs, _ in calls if specs))
        for i, (specs, batch) in enumerate(calls):
            try:
                prepared.append((i, self._prepare(specs, batch, now, ids)))
            except Exception as e:  # noqa: BLE001 - this call's own failure, answered below
                out[i] = e
        if prepared:
            try:
                done = self._store.insert_groups([new for _, new in prepared])
            except Exception as e:  # noqa: BLE001 - every call of the transaction shares it
                done = [e] * len(prepared)
            committed = []
            for (i, new), result in zip(prepared, done):
                if isinstance(result, Exception):
                    out[i] = result
                else:
                    out[i] = [ttypes.TaskRef(taskId=d.task_id, dueAtMs=d.due_ms, created=d.created) for d in result]
                    committed.append((new, result))
            self._accepted(committed)
        return out

    def _streamed(self, calls: Sequence[tuple[Sequence[ttypes.TaskSpec], bool]], now: int) -> list | None:
        """The calls' tasks checked, prepared and written part by part in one transaction
        (TaskStore.inserting): MySQL writes one part while the next is checked and prepared; small
        calls share a part. None when a call is refused or MySQL ran into a lock conflict: nothing
        is written then, and _in_one answers each call. A refusal late in a large batch costs
        MySQL the parts already sent, written and rolled back: no more than the batch itself would.
        When MySQL fails, every call gets that failure, also calls not yet checked."""
        ids = new_task_ids(now, sum(len(specs) for specs, _ in calls))
        prepared: list[list[NewTask]] = []
        try:
            with self._store.inserting() as send:
                waiting: list[NewTask] = []
                for specs, batch in calls:
                    new: list[NewTask] = []
                    for first in range(0, len(specs), STREAM_PART):
                        try:
                            part = self._prepare(specs, batch, now, ids, first, first + STREAM_PART)
                        except Exception as e:  # noqa: BLE001 - answered by _in_one, which checks again
                            raise _Refused from e
                        new += part
                        waiting += part
                        if len(waiting) >= STREAM_PART:
                            send(waiting)
                            waiting = []
                    prepared.append(new)
                if waiting:
                    send(waiting)
        except _Refused:
            return None
        except errors.StoreUnavailable as e:
            if e.code in errors.LOCK_CONFLICTS:
                return None          # rolled back; insert_groups runs it again
            return [e] * len(calls)
        except Exception as e:  # noqa: BLE001 - every call of the transaction shares it
            return [e] * len(calls)
        done = [[Submitted(t.task_id, t.shard_id, t.due_ms, True) for t in new] for new in prepared]
        self._accepted(list(zip(prepared, done)))
        return [[ttypes.TaskRef(taskId=t.task_id, dueAtMs=t.due_ms, created=True) for t in new] for new in prepared]

    def _prepare(self, specs: Sequence[ttypes.TaskSpec] | None, batch: bool, now: int,
                 ids: Iterator[str], first: int = 0, end: int | None = None) -> list[NewTask]:
        """The new tasks of specs[first:end], checked (a call's own failure raised)."""
        if batch:
            if not specs:
                raise errors.InvalidTask("tasks", "must hold at least one task")
            if len(specs) > self._max_batch:
                raise errors.InvalidTask("tasks", f"holds {len(specs)} tasks, at most {self._max_batch} allowed")
        near_before = now + self._window_ms
        services: dict[str, ServiceSpec] = {}      # per topic, looked up once per call
        checked = []
        for i, spec in enumerate(specs[first:end], first):
            index = i if batch else None
            if spec is None:
                raise errors.InvalidTask("task", "is missing", index)
            req = TaskRequest(spec.topic, spec.taskId, spec.delayMs, spec.dueAtMs, spec.payload,
                              spec.maxRetries, spec.ttrMs)
            check_task(req, self._limits, index)
            due = due_time(req, now, self._limits, index)
            svc = services.get(req.topic)
            if svc is None:
                svc = services[req.topic] = self._services.get(req.topic)
            checked.append((req, due, svc))
        shards = self._ownership.pick_shards([due < near_before for _, due, _ in checked])
        return [NewTask(task_id=req.task_id or next(ids), topic=req.topic, shard_id=shard, due_ms=due,
                        payload=req.payload or b"", spec_hash=spec_hash(req),
                        max_retries=svc.max_retries if req.max_retries is None else req.max_retries,
                        ttr_ms=svc.ttr_ms if req.ttr_ms is None else req.ttr_ms, created_ms=now,
                        client_id=req.task_id is not None)
                for (req, due, svc), shard in zip(checked, shards)]

    def _accepted(self, committed: list[tuple[list[NewTask], list[Submitted]]]) -> None:
        """After the commit: offer the created tasks to memory and count them, for every call of
        the group at once. A failure here is logged, not answered: the tasks are committed, the
        clients must hear so, and memory is a cache (a task the queue did not get, the loader
        reads)."""
        try:
            created = [(t, d) for new, done in committed for t, d in zip(new, done) if d.created]
            self._enqueue([d for _, d in created])
            for topic, n in collections.Counter(t.topic for t, _ in created).items():
                self._metrics.submitted.labels(topic).inc(n)
        except Exception:  # noqa: BLE001 - see above
            log.exception("committed tasks not offered to memory; the loader will read them")

    def _answer(self, method: str, result, elapsed: float):
        """A call's result as its client sees it (a delayq error as the declared exception), counted."""
        error = result if isinstance(result, Exception) else None
        self._count(method, error, elapsed)
        if isinstance(error, errors.DelayqError):
            return _as_declared(error)
        if error is not None:
            log.error("%s failed", method, exc_info=error)
            return TApplicationException(TApplicationException.INTERNAL_ERROR, "Internal error")
        return result

    def _count(self, method: str, error: Exception | None, elapsed: float) -> None:
        if error is None:
            outcome = "ok"
        else:
            outcome = _OUTCOMES.get(type(error), "error")
            if isinstance(error, errors.Unavailable):
                self._metrics.errors.labels("rabbitmq" if isinstance(error, errors.BrokerUnavailable)
                                            else "mysql").inc()
        pair = self._call_metrics.get((method, outcome))
        if pair is None:       # prometheus' labels() costs more than the count: looked up once
            pair = self._call_metrics[method, outcome] = (self._metrics.thrift_requests.labels(method, outcome),
                                                          self._metrics.thrift_seconds.labels(method))
        pair[0].inc()
        pair[1].observe(elapsed)

    def _enqueue(self, done: list[Submitted]) -> None:
        """A task due within the window goes straight into memory: ours, or its shard owner's
        through a hint (nodes/hints.py) when this node had no shard to put it on."""
        owned = self._ownership.shards()
        entries = [Entry(d.task_id, d.shard_id, d.due_ms) for d in done]
        self._queue.offer_written(entries, owned)
        near = self._clock.now_ms() + self._window_ms
        others = [e for e in entries if e.shard_id not in owned and e.due_ms < near]
        if others:
            self._hint(others)

    @_declared
    def cancel(self, taskId: str) -> int:
        check_task_id(taskId)
        outcome, topic = self._store.cancel(taskId, self._clock.now_ms())
        if topic is not None:
            self._queue.remove(taskId)
            self._metrics.cancelled.labels(topic).inc()
        return getattr(ttypes.CancelResult, outcome)

    @_declared
    def reschedule(self, taskId: str, dueAtMs: int) -> ttypes.TaskRef:
        check_task_id(taskId)
        if dueAtMs is None:
            raise errors.InvalidTask("dueAtMs", "is required")
        now = self._clock.now_ms()
        due = due_time(TaskRequest(None, due_at_ms=dueAtMs), now, self._limits)
        near = due < now + self._window_ms
        # Moving a soon-due task onto one of our shards lets it go straight into our memory queue.
        shard = self._ownership.pick_shard(near=True) if near and self._ownership.shards() else None
        shard, due = self._store.reschedule(taskId, due, shard, now)
        if self._ownership.owns(shard) and self._queue.accepts(due):
            self._queue.offer(Entry(taskId, shard, due))
        else:
            self._queue.remove(taskId)
        return ttypes.TaskRef(taskId=taskId, dueAtMs=due, created=False)

    @_declared
    def get(self, taskId: str) -> ttypes.TaskInfo:
        check_task_id(taskId)
        row, attempts = self._store.get(taskId)
        return ttypes.TaskInfo(
            taskId=row["task_id"], topic=row["topic"], status=int(row["status"]), attempt=row["attempt"],
            dueAtMs=row["due_ms"], shardId=row["shard_id"], maxRetries=row["max_retries"], ttrMs=row["ttr_ms"],
            createdAtMs=row["created_ms"], updatedAtMs=row.get("updated_ms") or row.get("finished_ms"),
            payload=bytes(row["payload"]),
            attempts=[ttypes.Attempt(attempt=a["attempt"], nodeId=a["node_id"], dispatchedAtMs=a["dispatched_ms"],
                                     result=a["result"], resultAtMs=a["result_ms"], message=a["message"])
                      for a in attempts])

    @_declared
    def reportResult(self, taskId: str, attempt: int, status: int, message: str | None) -> int:
        check_task_id(taskId)
        result = _RESULTS.get(status)
        if result is None:
            raise errors.InvalidTask("status", f"unknown result status {status}")
        if attempt is None or attempt < 1:
            raise errors.InvalidTask("attempt", "must be 1 or more")
        t = self._results.apply(taskId, attempt, result, message, move_retry=True)
        return ttypes.ReportOutcome.APPLIED if t.applied else ttypes.ReportOutcome.STALE

    # ---- services and cluster -----------------------------------------------------------------

    @_declared
    def registerService(self, svc: ttypes.CallbackService) -> None:
        if svc is None or not svc.topic:
            raise errors.InvalidService("topic", "is required")
        defaults = ttypes.CallbackService()
        pick = lambda name: getattr(defaults, name) if getattr(svc, name) is None else getattr(svc, name)  # noqa: E731
        spec = ServiceSpec(
            topic=svc.topic, exchange=svc.exchange or self._default_exchange, routing_key=svc.routingKey or svc.topic,
            max_retries=pick("maxRetries"), backoff=pick("backoff"), retry_backoff_ms=pick("retryBackoffMs"),
            retry_backoff_max_ms=pick("retryBackoffMaxMs"), ttr_ms=pick("ttrMs"), enabled=bool(pick("enabled")),
            dead_letter_exchange=svc.deadLetterExchange, misfire_threshold_ms=svc.misfireThresholdMs,
            misfire_policy=pick("misfirePolicy"))
        check_service(spec)
        # Checked now, on a connection of its own: a missing exchange is created (durable topic), an
        # existing one is never changed, and one delayq cannot publish to is refused here rather
        # than found out at the first due task.
        for field, exchange in (("exchange", spec.exchange), ("deadLetterExchange", spec.dead_letter_exchange)):
            reason = self._check_exchange(exchange) if exchange else None
            if reason is not None:
                raise errors.InvalidService(field, f"exchange {exchange!r}: {reason}")
        self._services.upsert(spec)
        log.info("service %s registered: exchange %s, routing key %s", spec.topic, spec.exchange, spec.routing_key)

    @_declared
    def listServices(self) -> list[ttypes.CallbackService]:
        return [ttypes.CallbackService(
            topic=s.topic, exchange=s.exchange, routingKey=s.routing_key, maxRetries=s.max_retries,
            backoff=s.backoff, retryBackoffMs=s.retry_backoff_ms, retryBackoffMaxMs=s.retry_backoff_max_ms,
            ttrMs=s.ttr_ms, enabled=s.enabled, deadLetterExchange=s.dead_letter_exchange,
            misfireThresholdMs=s.misfire_threshold_ms, misfirePolicy=s.misfire_policy)
            for s in self._services.all()]

    @_declared
    def cluster(self) -> ttypes.ClusterInfo:
        return self._cluster_info()
