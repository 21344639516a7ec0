"""The messages a node publishes, built in one place: a fired task and a dead letter.

The contract (names in delayq.topology, read by delayq.client.consumer): body = the payload;
message_id = <taskId>:<attempt> (a dead letter: <taskId>:<attempt>:dead); headers x-delayq-task-id,
-topic, -attempt, -due-at and -dispatched-at (a dead letter: the last attempt's, when recorded),
x-delayq-ttr on a fired task (its time-to-run, ms),
x-delayq-key, x-delayq-tags (comma-separated) and traceparent when the task has them, and on a
dead letter x-delayq-status: FAILED and x-delayq-reason (the last result's message). Every value
is a string or an integer, so the publisher's own frame encoder writes them (nodes/amqp/frames.py).
"""
from __future__ import annotations

from typing import Any, Mapping

from delayq import topology
from delayq.nodes.amqp.frames import Outgoing
from delayq.store.values import Claimed

REASON_CHARS = 1024      # of a dead letter's reason header


def _headers(task_id: str, topic: str, attempt: int, due_ms: int, dispatched_ms: int | None,
             key: bytes | None = None, tags: bytes | None = None, traceparent: str | None = None) -> dict:
    headers = {topology.HEADER_TASK_ID: task_id, topology.HEADER_TOPIC: topic, topology.HEADER_ATTEMPT: attempt,
               topology.HEADER_DUE_AT: due_ms}
    if dispatched_ms is not None:
        headers[topology.HEADER_DISPATCHED_AT] = dispatched_ms
    if key is not None:
        headers[topology.HEADER_KEY] = bytes(key).decode()
    if tags:
        headers[topology.HEADER_TAGS] = bytes(tags).decode()
    if traceparent is not None:
        headers[topology.HEADER_TRACEPARENT] = traceparent
    return headers


def fired(c: Claimed, exchange: str, routing_key: str, dispatched_ms: int, ref: Any = None) -> Outgoing:
    """The message of a claimed attempt; `ref` (the dispatcher's Attempt) comes back with the outcome."""
    headers = _headers(c.task_id, c.topic, c.attempt, c.due_ms, dispatched_ms, c.key, c.tags, c.traceparent)
    headers[topology.HEADER_TTR] = c.ttr_ms
    return Outgoing(exchange, routing_key, c.payload, topology.message_id(c.task_id, c.attempt), headers, ref=ref)


def dead_letter(row: Mapping[str, Any], exchange: str, ref: Any) -> Outgoing:
    """The dead letter of a FAILED task (a row of DeadLetterRows.pending), routed by topic."""
    headers = _headers(row["task_id"], row["topic"], row["attempt"], row["due_ms"], row["dispatched_ms"],
                       row.get("task_key"), row.get("tags"), row.get("traceparent"))
    headers[topology.HEADER_STATUS] = "FAILED"
    headers[topology.HEADER_REASON] = (row["message"] or "")[:REASON_CHARS]
    return Outgoing(exchange, row["topic"], bytes(row["payload"]),
                    f"{topology.message_id(row['task_id'], row['attempt'])}:dead", headers, ref=ref)
