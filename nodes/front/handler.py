"""Handler: the DelayScheduler calls about written tasks — cancel, reschedule, get, reportResult,
touch — and authenticate. It converts Thrift structs to domain values and calls the store
(delayq.store.requests); delayq's errors become the IDL's declared exceptions
(delayq.nodes.front.errors). New tasks come in through delayq.nodes.front.submitpath; topics'
services and controls are delayq.nodes.front.topics'; admin calls delayq.nodes.front.admin's.

Runs on the CallPool's threads; it holds no state of its own.
"""
from __future__ import annotations

import logging
from typing import Any, Mapping

from delayq import errors
from delayq.access.grants import Permission
from delayq.client.gen.delayq_thrift import ttypes
from delayq.clock import Clock
from delayq.lifecycle import IN_FLIGHT, Result
from delayq.nodes.front.access import Access
from delayq.nodes.front.caller import current
from delayq.nodes.front.errors import CallAnswers, declared
from delayq.nodes.front.placing import Placing
from delayq.nodes.memory.delayqueue import Entry
from delayq.nodes.outcomes.results import ResultApplier
from delayq.nodes.validation import Limits, TaskRequest, check_task_id, check_touch, due_time, split_tags
from delayq.store.requests import TaskRequests
from delayq.store.values import CancelOutcome

log = logging.getLogger(__name__)

_RESULT_OF_STATUS = {ttypes.ResultStatus.SUCCESS: Result.SUCCESS, ttypes.ResultStatus.RETRY: Result.RETRY,
                     ttypes.ResultStatus.FATAL: Result.FATAL, ttypes.ResultStatus.STARTED: Result.STARTED}
CANCEL_RESULT = {CancelOutcome.CANCELLED: ttypes.CancelResult.CANCELLED,
                 CancelOutcome.ALREADY_DISPATCHED: ttypes.CancelResult.ALREADY_DISPATCHED,
                 CancelOutcome.NOT_FOUND: ttypes.CancelResult.NOT_FOUND}


class Handler:
    def __init__(self, requests: TaskRequests, results: ResultApplier, access: Access, answers: CallAnswers,
                 placing: Placing, clock: Clock, *, limits: Limits):
        self._requests, self._results, self._access = requests, results, access
        self.answers = answers
        self._placing, self._clock, self._limits = placing, clock, limits

    # ---- identity -----------------------------------------------------------------------------

    @declared
    def authenticate(self, token: str) -> str:
        if not self._access.enabled:
            return "insecure"
        return self._access.authenticate(current(), token)

    # ---- tasks --------------------------------------------------------------------------------

    @declared
    def cancel(self, taskId: str) -> int:
        check_task_id(taskId)
        try:
            self._may(Permission.CANCEL, taskId)
        except errors.NotFound:
            return ttypes.CancelResult.NOT_FOUND
        outcome, topic = self._requests.cancel(taskId, self._clock.now_ms())
        if topic is not None:
            self._placing.forget(taskId)
            self.answers.metrics.cancelled.labels(topic).inc()
        return CANCEL_RESULT[outcome]

    @declared
    def reschedule(self, taskId: str, dueAtMs: int) -> ttypes.TaskRef:
        check_task_id(taskId)
        self._may(Permission.CANCEL, taskId)
        if dueAtMs is None:
            raise errors.InvalidTask("dueAtMs", "is required")
        now = self._clock.now_ms()
        due = due_time(TaskRequest(None, due_at_ms=dueAtMs), now, self._limits)
        shard, due, topic = self._requests.reschedule(taskId, due, self._placing.moved_shard(due, now), now)
        # Memory forgets the old time; the new one goes into ours, or to the shard's owner.
        self._placing.forget(taskId)
        self._placing.offer([Entry(taskId, shard, due, topic=topic)])
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
            key=None if row.get("task_key") is None else bytes(row["task_key"]).decode(errors="replace"),
            tags=split_tags(row.get("tags")), traceparent=row.get("traceparent"),
            message=row.get("message"),         # only a backlog row has one: how the task ended
            attempts=[_attempt(row, a) for a in attempts])

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

    @declared
    def touch(self, taskId: str, attempt: int, extendMs: int, progress: bytes | None) -> ttypes.TouchResult:
        """A running attempt's heartbeat (delayq.store.heartbeats); permission: report."""
        check_task_id(taskId)
        self._may(Permission.REPORT, taskId)
        check_touch(attempt, extendMs, progress)
        t = self._requests.touch(taskId, attempt, extendMs, progress, self._clock.now_ms())
        return ttypes.TouchResult(cancelled=t.cancelled, deadlineMs=t.deadline_ms)

    def _may(self, permission: Permission, task_id: str) -> None:
        """Unauthenticated, Forbidden, or NotFound for a task the caller may not touch."""
        client = self._access.require(current(), permission)
        self._access.task(client, permission, task_id, self._requests.topic_of)


def _attempt(task: Mapping[str, Any], a: Mapping[str, Any]) -> ttypes.Attempt:
    """One execlog row; the attempt in flight also shows its deadline and a cancel asked of it."""
    running = a["attempt"] == task["attempt"] and task["status"] in IN_FLIGHT
    return ttypes.Attempt(attempt=a["attempt"], nodeId=a["node_id"], dispatchedAtMs=a["dispatched_ms"],
                          result=a["result"], resultAtMs=a["result_ms"], message=a["message"],
                          progress=None if a["progress"] is None else bytes(a["progress"]),
                          deadlineMs=task.get("deadline_ms") if running else None,
                          cancelRequestedAtMs=task.get("cancel_ms") if running else None)
