"""The DelayScheduler Thrift handler: converts Thrift structs to domain values, calls the store, and
maps delayq's errors to the IDL's declared exceptions in one place (`_declared`).

Runs on the Thrift server's worker threads; it holds no state of its own.
"""
from __future__ import annotations

import functools
import logging
import secrets
import time
from typing import Callable

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
        started, outcome = time.perf_counter(), "ok"
        try:
            return fn(self, *args, **kwargs)
        except errors.DelayqError as e:
            outcome = _OUTCOMES.get(type(e), "error")
            if isinstance(e, errors.Unavailable):
                self._metrics.errors.labels("rabbitmq" if isinstance(e, errors.BrokerUnavailable) else "mysql").inc()
            raise _as_declared(e) from None
        except Exception:
            outcome = "error"
            raise
        finally:
            self._metrics.thrift_requests.labels(fn.__name__, outcome).inc()
            self._metrics.thrift_seconds.labels(fn.__name__).observe(time.perf_counter() - started)
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


def new_task_id(now_ms: int) -> str:
    """Time-ordered (keeps InnoDB inserts near the end of the primary key) and unguessable."""
    return f"{now_ms:011x}{secrets.token_hex(8)}"


class Handler:
    def __init__(self, store: TaskStore, services: ServiceRegistry, queue: DelayQueue, ownership: Ownership,
                 clock: Clock, results: ResultApplier, metrics: Metrics, insert: Callable[[list[NewTask]], list[Submitted]],
                 *, limits: Limits, max_batch: int, window_ms: int, default_exchange: str,
                 declare_exchange: Callable[[str], None], cluster_info: Callable[[], ttypes.ClusterInfo]):
        self._store, self._services, self._queue = store, services, queue
        self._ownership, self._clock, self._limits = ownership, clock, limits
        self._results = results
        self._metrics = metrics
        self._insert = insert      # the group committer: concurrent submits share a commit
        self._max_batch, self._window_ms = max_batch, window_ms
        self._default_exchange = default_exchange
        self._declare_exchange = declare_exchange
        self._cluster_info = cluster_info

    # ---- tasks --------------------------------------------------------------------------------

    @_declared
    def submit(self, task: ttypes.TaskSpec) -> ttypes.TaskRef:
        return self._submit([task], batch=False)[0]

    @_declared
    def submitBatch(self, tasks: list[ttypes.TaskSpec]) -> list[ttypes.TaskRef]:
        if tasks is None or len(tasks) == 0:
            raise errors.InvalidTask("tasks", "must hold at least one task")
        if len(tasks) > self._max_batch:
            raise errors.InvalidTask("tasks", f"holds {len(tasks)} tasks, at most {self._max_batch} allowed")
        return self._submit(tasks, batch=True)

    def _submit(self, specs: list[ttypes.TaskSpec], batch: bool) -> list[ttypes.TaskRef]:
        now = self._clock.now_ms()
        new = []
        for i, spec in enumerate(specs):
            index = i if batch else None
            if spec is None:
                raise errors.InvalidTask("task", "is missing", index)
            req = TaskRequest(spec.topic, spec.taskId, spec.delayMs, spec.dueAtMs, spec.payload,
                              spec.maxRetries, spec.ttrMs)
            check_task(req, self._limits, index)
            due = due_time(req, now, self._limits, index)
            svc = self._services.get(req.topic)
            new.append(NewTask(
                task_id=req.task_id or new_task_id(now), topic=req.topic,
                shard_id=self._ownership.pick_shard(near=due < now + self._window_ms), due_ms=due,
                payload=req.payload or b"", spec_hash=spec_hash(req),
                max_retries=svc.max_retries if req.max_retries is None else req.max_retries,
                ttr_ms=svc.ttr_ms if req.ttr_ms is None else req.ttr_ms, created_ms=now,
                client_id=req.task_id is not None))
        done = self._insert(new)
        self._enqueue([d for d in done if d.created])
        topics = {t.task_id: t.topic for t in new}
        for d in done:
            if d.created:
                self._metrics.submitted.labels(topics[d.task_id]).inc()
        return [ttypes.TaskRef(taskId=d.task_id, dueAtMs=d.due_ms, created=d.created) for d in done]

    def _enqueue(self, done: list[Submitted]) -> None:
        """NetEase: a task due within the scan window goes straight into the memory queue."""
        self._queue.offer_many(Entry(d.task_id, d.shard_id, d.due_ms) for d in done
                               if self._ownership.owns(d.shard_id) and self._queue.accepts(d.due_ms))

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
        self._declare_exchange(spec.exchange)
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
