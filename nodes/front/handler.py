"""The DelayScheduler Thrift handler: converts Thrift structs to domain values and calls the store
(new tasks through delayq.nodes.front.writes); delayq's errors become the IDL's declared
exceptions in delayq.nodes.front.errors.

Runs on the threads of the Thrift server's inboxes (submits: the SubmitBatcher's, through
`submit_many`; the rest: the CallPool's); it holds no state of its own.
"""
from __future__ import annotations

import collections
import logging
import time
from typing import Callable, Iterator, Sequence

from delayq import errors
from delayq.access.grants import Permission
from delayq.client.gen.delayq_thrift import ttypes
from delayq.clock import Clock
from delayq.lifecycle import Result
from delayq.nodes.memory.delayqueue import DelayQueue, Entry
from delayq.nodes.front import topics
from delayq.nodes.front.access import Access
from delayq.nodes.front.audit import Audit
from delayq.nodes.front.caller import Caller, current
from delayq.nodes.front.errors import CallAnswers, declared
from delayq.nodes.front.quotas import Quotas
from delayq.nodes.front.writes import SubmitWrites
from delayq.nodes.metrics import Metrics
from delayq.nodes.cluster.ownership import Ownership
from delayq.nodes.outcomes.results import ResultApplier
from delayq.nodes.cluster.services import ServiceRegistry
from delayq.store.controls import ControlStore
from delayq.store.requests import TaskRequests
from delayq.store.submits import TaskWriter
from delayq.store.values import CancelOutcome, NewTask, Submitted
from delayq.nodes.validation import (Limits, ServiceSpec, TaskRequest, check_service, check_task, check_task_id,
                               due_time, spec_hash)

log = logging.getLogger(__name__)

_RESULT_OF_STATUS = {ttypes.ResultStatus.SUCCESS: Result.SUCCESS, ttypes.ResultStatus.RETRY: Result.RETRY,
                     ttypes.ResultStatus.FATAL: Result.FATAL, ttypes.ResultStatus.STARTED: Result.STARTED}
_CANCEL_RESULT = {CancelOutcome.CANCELLED: ttypes.CancelResult.CANCELLED,
                  CancelOutcome.ALREADY_DISPATCHED: ttypes.CancelResult.ALREADY_DISPATCHED,
                  CancelOutcome.NOT_FOUND: ttypes.CancelResult.NOT_FOUND}


class Handler:
    def __init__(self, requests: TaskRequests, writer: TaskWriter, services: ServiceRegistry, queue: DelayQueue, ownership: Ownership,
                 clock: Clock, results: ResultApplier, metrics: Metrics, access: Access, *, limits: Limits,
                 max_batch: int,
                 window_ms: int, default_exchange: str,
                 check_exchange: Callable[[str], str | None], cluster_info: Callable[[], ttypes.ClusterInfo],
                 audit: Audit | None = None,
                 controls: ControlStore,
                 quotas: Quotas | None = None):
        self._requests, self._services, self._queue = requests, services, queue
        self._ownership, self._clock, self._limits = ownership, clock, limits
        self._results = results
        self._metrics = metrics
        self._access = access
        self._max_batch, self._window_ms = max_batch, window_ms
        self._default_exchange = default_exchange
        self._check_exchange = check_exchange
        self._cluster_info = cluster_info
        self.answers = CallAnswers(metrics, audit.call) if audit is not None else CallAnswers(metrics)
        self._writes = SubmitWrites(writer, self._prepare)
        self._controls = controls
        self._quotas = quotas

    # ---- identity -----------------------------------------------------------------------------

    @declared
    def authenticate(self, token: str) -> str:
        if not self._access.enabled:
            return "insecure"
        return self._access.authenticate(current(), token)

    # ---- tasks --------------------------------------------------------------------------------

    def submit_many(self, calls: Sequence[tuple[Sequence[ttypes.TaskSpec] | None, bool, Caller | None]]) -> list:
        """Several submit (batch False) and submitBatch (True) calls, written together (one commit
        for all; delayq.nodes.front.writes). Each call is all or nothing on its own: its result is
        its TaskRefs or its own exception, a declared one or TApplicationException (internal
        error); a call with a task its client may not submit, or over a quota of its topics'
        tenants (delayq.nodes.front.quotas), is refused whole before anything is written. Each is
        counted like any call."""
        started = time.perf_counter()
        now = self._clock.now_ms()
        refused, charges = [], []
        for specs, batch, caller in calls:
            refusal, charge = self._refusal(specs, caller), None
            if refusal is None and self._quotas is not None:
                try:
                    charge = self._quotas.charge(specs, batch, now)
                except errors.QuotaExceeded as e:
                    refusal = e
            refused.append(refusal)
            if refusal is None:
                charges.append(charge)
        allowed = [(specs, batch) for (specs, batch, _), refusal in zip(calls, refused) if refusal is None]
        out, committed = self._writes.write(allowed, now) if allowed else ([], [])
        for charge, result in zip(charges, out):
            if charge is not None and self._quotas is not None and isinstance(result, Exception):
                self._quotas.refund(charge)         # not written: its tasks do not count
        written = iter(out)
        self._accepted(committed)
        elapsed = time.perf_counter() - started
        return [self.answers.answer("submitBatch" if batch else "submit", result if isinstance(result, Exception)
                                    else [ttypes.TaskRef(taskId=d.task_id, dueAtMs=d.due_ms, created=d.created)
                                          for d in result], elapsed)
                for (_, batch, _), result in zip(calls, (r if r is not None else next(written) for r in refused))]

    def _refusal(self, specs: Sequence[ttypes.TaskSpec] | None, caller: Caller | None) -> Exception | None:
        """Why this caller may not submit these tasks, or None."""
        if not self._access.enabled:
            return None
        try:
            client = self._access.require(caller, Permission.SUBMIT)
            self._access.topics(client, Permission.SUBMIT,
                                dict.fromkeys(s.topic for s in specs or () if s is not None and s.topic))
        except errors.DelayqError as e:
            return e
        return None

    def _prepare(self, specs: Sequence[ttypes.TaskSpec] | None, batch: bool, now: int,
                 ids: Iterator[str], first: int, end: int | None) -> list[NewTask]:
        """The new tasks of specs[first:end], checked (a call's own failure raised)."""
        if batch:
            if not specs:
                raise errors.InvalidTask("tasks", "must hold at least one task")
            if len(specs) > self._max_batch:
                raise errors.InvalidTask("tasks", f"holds {len(specs)} tasks, at most {self._max_batch} allowed")
        near_before = now + self._window_ms
        services: dict[str, ServiceSpec] = {}      # per topic, looked up once per call
        assert specs is not None        # a single submit comes as [task]; a batch of None was refused above
        checked = []
        for i, spec in enumerate(specs[first:end], first):
            index = i if batch else None
            if spec is None:
                raise errors.InvalidTask("task", "is missing", index)
            req = TaskRequest(spec.topic, spec.taskId, spec.delayMs, spec.dueAtMs, spec.payload,
                              spec.maxRetries, spec.ttrMs)
            check_task(req, self._limits, index)
            topic = req.topic
            assert topic is not None        # check_task refuses a task without one
            due = due_time(req, now, self._limits, index)
            svc = services.get(topic)
            if svc is None:
                svc = services[topic] = self._services.get(topic)
            checked.append((req, topic, due, svc))
        # A near task goes to one of this node's shards (straight into its memory), but for a topic
        # with a rate limit: each node fires its share of the rate, so its tasks must spread over
        # every shard.
        rated = {t for t in services if self._services.controls(t).max_fire_rate is not None}
        shards = self._ownership.pick_shards([due < near_before and topic not in rated
                                              for _, topic, due, _ in checked])
        return [NewTask(task_id=req.task_id or next(ids), topic=topic, shard_id=shard, due_ms=due,
                        payload=req.payload or b"", spec_hash=spec_hash(req),
                        max_retries=svc.max_retries if req.max_retries is None else req.max_retries,
                        ttr_ms=svc.ttr_ms if req.ttr_ms is None else req.ttr_ms, created_ms=now,
                        client_id=req.task_id is not None)
                for (req, topic, due, svc), shard in zip(checked, shards)]

    def _accepted(self, committed: list[tuple[list[NewTask], list[Submitted]]]) -> None:
        """After the commit: offer the created tasks to memory and count them, for every call of
        the group at once. A failure here is logged, not answered: the tasks are committed, the
        clients must hear so, and memory is a cache (a task the queue did not get, the loader
        reads)."""
        try:
            created = [(t, d) for new, done in committed for t, d in zip(new, done) if d.created]
            self._enqueue(created)
            for topic, n in collections.Counter(t.topic for t, _ in created).items():
                self._metrics.submitted.labels(topic).inc(n)
        except Exception:  # noqa: BLE001 - see above
            log.exception("committed tasks not offered to memory; the loader will read them")

    def _enqueue(self, done: list[tuple[NewTask, Submitted]]) -> None:
        """A task due within the window goes straight into memory: ours, or its shard owner's
        through a hint (delayq.nodes.memory.hints) when this node had no shard to put it on."""
        self._queue.offer_written(Entry(d.task_id, d.shard_id, d.due_ms, topic=t.topic) for t, d in done)

    @declared
    def cancel(self, taskId: str) -> int:
        check_task_id(taskId)
        try:
            self._may(Permission.CANCEL, taskId)
        except errors.NotFound:
            return ttypes.CancelResult.NOT_FOUND
        outcome, topic = self._requests.cancel(taskId, self._clock.now_ms())
        if topic is not None:
            self._queue.remove(taskId)
            self._metrics.cancelled.labels(topic).inc()
        return _CANCEL_RESULT[outcome]

    @declared
    def reschedule(self, taskId: str, dueAtMs: int) -> ttypes.TaskRef:
        check_task_id(taskId)
        self._may(Permission.CANCEL, taskId)
        if dueAtMs is None:
            raise errors.InvalidTask("dueAtMs", "is required")
        now = self._clock.now_ms()
        due = due_time(TaskRequest(None, due_at_ms=dueAtMs), now, self._limits)
        near = due < now + self._window_ms
        # Moving a soon-due task onto one of our shards lets it go straight into our memory queue.
        shard = self._ownership.pick_shard(near=True) if near and self._ownership.shards() else None
        shard, due, topic = self._requests.reschedule(taskId, due, shard, now)
        # Memory forgets the old time; the new one goes into ours, or to the shard's owner.
        self._queue.remove(taskId)
        self._queue.offer_written([Entry(taskId, shard, due, topic=topic)])
        return ttypes.TaskRef(taskId=taskId, dueAtMs=due, created=False)

    @declared
    def get(self, taskId: str) -> ttypes.TaskInfo:
        check_task_id(taskId)
        client = self._access.require(current(), Permission.READ)
        row, attempts = self._requests.get(taskId)
        self._access.task(client, Permission.READ, taskId, lambda _: row["topic"])
        return ttypes.TaskInfo(
            taskId=row["task_id"], topic=row["topic"], status=int(row["status"]), attempt=row["attempt"],
            dueAtMs=row["due_ms"], shardId=row["shard_id"], maxRetries=row["max_retries"], ttrMs=row["ttr_ms"],
            createdAtMs=row["created_ms"], updatedAtMs=row.get("updated_ms") or row.get("finished_ms"),
            payload=bytes(row["payload"]),
            attempts=[ttypes.Attempt(attempt=a["attempt"], nodeId=a["node_id"], dispatchedAtMs=a["dispatched_ms"],
                                     result=a["result"], resultAtMs=a["result_ms"], message=a["message"])
                      for a in attempts])

    @declared
    def reportResult(self, taskId: str, attempt: int, status: int, message: str | None) -> int:
        check_task_id(taskId)
        self._may(Permission.REPORT, taskId)
        result = _RESULT_OF_STATUS.get(status)
        if result is None:
            raise errors.InvalidTask("status", f"unknown result status {status}")
        if attempt is None or attempt < 1:
            raise errors.InvalidTask("attempt", "must be 1 or more")
        t = self._results.apply(taskId, attempt, result, message, move_retry=True)
        return ttypes.ReportOutcome.APPLIED if t.applied else ttypes.ReportOutcome.STALE

    def _may(self, permission: Permission, task_id: str) -> None:
        """Unauthenticated, Forbidden, or NotFound for a task the caller may not touch."""
        client = self._access.require(current(), permission)
        self._access.task(client, permission, task_id, self._requests.topic_of)

    # ---- services and cluster -----------------------------------------------------------------

    @declared
    def registerService(self, svc: ttypes.CallbackService) -> None:
        self._access.require(current(), Permission.ADMIN)
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

    @declared
    def listServices(self) -> list[ttypes.CallbackService]:
        """The services of the topics the caller may read (every one for an admin)."""
        client = self._access.client(current())
        admin = client.holds(Permission.ADMIN)
        return [ttypes.CallbackService(
            topic=s.topic, exchange=s.exchange, routingKey=s.routing_key, maxRetries=s.max_retries,
            backoff=s.backoff, retryBackoffMs=s.retry_backoff_ms, retryBackoffMaxMs=s.retry_backoff_max_ms,
            ttrMs=s.ttr_ms, enabled=s.enabled, deadLetterExchange=s.dead_letter_exchange,
            misfireThresholdMs=s.misfire_threshold_ms, misfirePolicy=s.misfire_policy)
            for s in self._services.all() if admin or client.allows(Permission.READ, s.topic)]

    @declared
    def setTopicControls(self, controls: ttypes.TopicControls) -> ttypes.TopicControls:
        self._access.require(current(), Permission.ADMIN)
        if controls is None or not controls.topic:
            raise errors.InvalidService("topic", "is required")
        # Applied by every node (this one included) when it sees the services' version move.
        return topics.as_thrift(controls.topic, self._controls.change(controls.topic, topics.changes(controls)))

    @declared
    def listTopicControls(self) -> list[ttypes.TopicControls]:
        """The controls of the topics the caller may read (every one for an admin)."""
        client = self._access.client(current())
        admin = client.holds(Permission.ADMIN)
        shown = {t: c for t, c in sorted(self._controls.all().items()) if admin or client.allows(Permission.READ, t)}
        in_flight = self._controls.in_flight(list(shown))
        return [topics.as_thrift(t, c, in_flight[t]) for t, c in shown.items()]

    @declared
    def cluster(self) -> ttypes.ClusterInfo:
        self._access.require(current(), Permission.ADMIN)
        return self._cluster_info()
