"""KeyCalls: the DelayScheduler calls by business key — findByKey, cancelByKey, rescheduleByKey —
and listTasks, over delayq.store.bykey.KeyRequests.

Permissions are those of the single-task calls, on the topic the call names (front.access):
read for findByKey and listTasks, cancel for cancelByKey and rescheduleByKey (as for cancel and
reschedule). A change answers each live task of the key with what happened to it; memory
(front.placing) forgets a cancelled or moved task and gets a moved one at its new time, ours or
its shard owner's. Pages are keyset-paged with checked tokens (front.pages).

Runs on the CallPool's threads; holds no state of its own.
"""
from __future__ import annotations

from typing import Callable

from delayq import errors
from delayq.access.grants import Permission
from delayq.client.gen.delayq_thrift import ttypes
from delayq.clock import Clock
from delayq.lifecycle import Status
from delayq.nodes.front import pages
from delayq.nodes.front.access import Access
from delayq.nodes.front.caller import current
from delayq.nodes.front.errors import CallAnswers, declared
from delayq.nodes.front.placing import Placing
from delayq.nodes.memory.delayqueue import Entry
from delayq.nodes.validation import (Limits, TaskRequest, check_key, check_tag, check_topic, due_time,
                                     split_tags)
from delayq.store.bykey import LIST_STATEMENT_S, Changed, Found, KeyRequests, KeyResult
from delayq.store.maintenance import TaskFilter

FIND_PAGE = 100                 # tasks per findByKey page
LIST_DEFAULT, LIST_MAX = 100, 500
CHANGE_MAX = 1000               # live tasks a cancelByKey or rescheduleByKey changes per call

_RESULT = {KeyResult.CANCELLED: ttypes.KeyedResult.CANCELLED, KeyResult.RESCHEDULED: ttypes.KeyedResult.RESCHEDULED,
           KeyResult.ALREADY_DISPATCHED: ttypes.KeyedResult.ALREADY_DISPATCHED}


def summary(f: Found) -> ttypes.TaskSummary:
    return ttypes.TaskSummary(taskId=f.task_id, topic=f.topic, status=int(f.status), attempt=f.attempt,
                              dueAtMs=f.due_ms, createdAtMs=f.created_ms,
                              key=None if f.key is None else f.key.decode(errors="replace"), tags=split_tags(f.tags))


def task_filter(f: ttypes.TaskFilter | None) -> TaskFilter:
    """The IDL's filter as the store's, checked: InvalidTask names the field."""
    if f is None:
        raise errors.InvalidTask("filter", "is required")
    topic = check_topic(f.topic)
    if f.status is not None and f.status not in ttypes.TaskStatus._VALUES_TO_NAMES:
        raise errors.InvalidTask("status", f"unknown task status {f.status}")
    if f.tag is not None:
        check_tag(f.tag, field="tag")
    for field, value in (("dueFromMs", f.dueFromMs), ("dueBeforeMs", f.dueBeforeMs)):
        if value is not None and value < 0:
            raise errors.InvalidTask(field, f"must not be negative, got {value}")
    return TaskFilter(topic=topic, since_ms=f.dueFromMs, until_ms=f.dueBeforeMs,
                      status=None if f.status is None else Status(f.status),
                      key_prefix=check_key(f.keyPrefix, field="keyPrefix"), tag=f.tag)


class KeyCalls:
    def __init__(self, requests: KeyRequests, access: Access, answers: CallAnswers, placing: Placing, clock: Clock,
                 *, limits: Limits, page_key: Callable[[], bytes]):
        """`page_key`: the MAC key of page tokens (the cluster key's, delayq.store.clusterkey)."""
        self._requests, self._access, self.answers = requests, access, answers
        self._placing, self._clock, self._limits = placing, clock, limits
        self._page_key = page_key

    @declared
    def findByKey(self, topic: str, key: str, pageToken: str | None) -> ttypes.TaskPage:
        topic, raw = self._topic_key(topic, key, Permission.READ)
        query = pages.query_of("findByKey", topic, raw)
        found = self._requests.find(topic, raw, pages.decode(self._page_key(), query, pageToken), FIND_PAGE + 1)
        return self._page(query, found, FIND_PAGE, by_due=False)

    @declared
    def listTasks(self, filter: ttypes.TaskFilter, pageToken: str | None, limit: int | None) -> ttypes.TaskPage:
        f = task_filter(filter)
        self._access.topics(self._access.require(current(), Permission.READ), Permission.READ, [f.topic])
        if limit is not None and not 1 <= limit <= LIST_MAX:
            raise errors.InvalidTask("limit", f"must be between 1 and {LIST_MAX}, got {limit}")
        n = limit or LIST_DEFAULT
        query = pages.query_of("listTasks", f)
        try:
            found = self._requests.matching(f, pages.decode(self._page_key(), query, pageToken), n + 1)
        except errors.StatementStopped:
            raise errors.InvalidTask("filter", "too few tasks match it to fill a page within "
                                     f"{LIST_STATEMENT_S:g} s: narrow it with a due range, a state or a key prefix") from None
        return self._page(query, found, n, by_due=True)

    @declared
    def cancelByKey(self, topic: str, key: str) -> ttypes.KeyedOutcomes:
        topic, raw = self._topic_key(topic, key, Permission.CANCEL)
        changed, more = self._requests.cancel(topic, raw, self._clock.now_ms(), CHANGE_MAX)
        cancelled = [c for c in changed if c.result is KeyResult.CANCELLED]
        for c in cancelled:
            self._placing.forget(c.task_id)
        if cancelled:
            self.answers.metrics.cancelled.labels(topic).inc(len(cancelled))
        return _outcomes(changed, more)

    @declared
    def rescheduleByKey(self, topic: str, key: str, dueAtMs: int) -> ttypes.KeyedOutcomes:
        topic, raw = self._topic_key(topic, key, Permission.CANCEL)
        if dueAtMs is None:
            raise errors.InvalidTask("dueAtMs", "is required")
        now = self._clock.now_ms()
        due = due_time(TaskRequest(None, due_at_ms=dueAtMs), now, self._limits)
        changed, more = self._requests.reschedule(topic, raw, due, self._placing.moved_shard(due, now), now, CHANGE_MAX)
        moved = [c for c in changed if c.result is KeyResult.RESCHEDULED]
        # Memory forgets the old times; the new one goes into ours, or to the shard's owner.
        for c in moved:
            self._placing.forget(c.task_id)
        self._placing.offer(Entry(c.task_id, c.shard_id, c.due_ms, topic=topic) for c in moved)
        return _outcomes(changed, more)

    def _topic_key(self, topic: str, key: str, permission: Permission) -> tuple[str, bytes]:
        topic = check_topic(topic)
        raw = check_key(key)
        if raw is None:
            raise errors.InvalidTask("key", "is required")
        self._access.topics(self._access.require(current(), permission), permission, [topic])
        return topic, raw

    def _page(self, query: bytes, found: list[Found], n: int, by_due: bool) -> ttypes.TaskPage:
        page = found[:n]
        token = None
        if len(found) > n:
            last = page[-1]
            token = pages.encode(self._page_key(), query, (last.due_ms if by_due else last.created_ms, last.task_id))
        return ttypes.TaskPage(tasks=[summary(f) for f in page], nextPageToken=token)


def _outcomes(changed: list[Changed], more: bool) -> ttypes.KeyedOutcomes:
    return ttypes.KeyedOutcomes(tasks=[ttypes.KeyedOutcome(taskId=c.task_id, result=_RESULT[c.result], dueAtMs=c.due_ms)
                                       for c in changed], more=more)
