"""How the task commands show tasks: `delayq tasks get`'s one task, and the tables of `tasks list`,
`find` and `query`. Pure: each takes what the node or MySQL answered and returns the dicts printed
under --json, or the lines printed without it.

A task's key, tags, trace context and messages come from its submitter or its consumer: printed,
each character that is not printable is escaped (delayq.ops.common.shown), so that none can move
the terminal's cursor or break a table's row, and the KEY column is as wide as its widest key."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from delayq.client.gen.delayq_thrift import ttypes
from delayq.ops.common import shown, utc_time


def stored_text(raw: bytes | None) -> str | None:
    """A key or tags column read from MySQL as a node answers it: bytes that are not UTF-8 as U+FFFD."""
    return None if raw is None else bytes(raw).decode(errors="replace")


def info_dict(info: ttypes.TaskInfo) -> dict[str, Any]:
    """`tasks get --json`: the task, its key, tags and trace context, how it ended, its attempts."""
    return {"taskId": info.taskId, "topic": info.topic, "status": ttypes.TaskStatus._VALUES_TO_NAMES[info.status],
            "attempt": info.attempt, "dueAtMs": info.dueAtMs, "shardId": info.shardId, "key": info.key,
            "tags": info.tags or [], "traceparent": info.traceparent, "message": info.message,
            "attempts": [{"attempt": a.attempt, "node": a.nodeId, "dispatchedAtMs": a.dispatchedAtMs,
                          "result": a.result, "resultAtMs": a.resultAtMs, "message": a.message,
                          # progress is the consumer's bytes: shown as text, undecodable bytes replaced
                          "progress": None if a.progress is None else a.progress.decode("utf-8", "replace"),
                          "deadlineMs": a.deadlineMs, "cancelRequestedAtMs": a.cancelRequestedAtMs}
                         for a in info.attempts]}


def info_lines(d: Mapping[str, Any]) -> list[str]:
    """`tasks get`: a line for the task, one for its key, tags and trace context (if it has any),
    one for how it ended (if it did, with a message), then its attempts."""
    lines = [f"{d['taskId']}  topic {d['topic']}  {d['status']}  attempt {d['attempt']}  "
             f"due {utc_time(d['dueAtMs'])}  shard {d['shardId']}"]
    labels = [f"{name} {shown(value)}" for name, value in
              (("key", d["key"]), ("tags", ",".join(d["tags"]) or None), ("traceparent", d["traceparent"]))
              if value is not None]
    if labels:
        lines.append("  " + "  ".join(labels))
    if d["message"] is not None:
        lines.append(f"  ended: {shown(d['message'])}")
    for a in d["attempts"]:
        message = "" if a["message"] is None else shown(a["message"])
        lines.append(f"  #{a['attempt']} on {a['node']} at {utc_time(a['dispatchedAtMs'])}: "
                     f"{a['result'] or 'pending'} {message}".rstrip())
        if a["deadlineMs"] is not None:
            cancel = f", cancel asked at {utc_time(a['cancelRequestedAtMs'])}" if a["cancelRequestedAtMs"] else ""
            lines.append(f"     running until {utc_time(a['deadlineMs'])} unless touched{cancel}")
        if a["progress"] is not None:
            lines.append(f"     progress: {shown(a['progress'])}")
    return lines


def summary_dict(t: ttypes.TaskSummary) -> dict[str, Any]:
    """A task of `tasks find` and `query` (findByKey, listTasks)."""
    return {"taskId": t.taskId, "topic": t.topic, "status": ttypes.TaskStatus._VALUES_TO_NAMES[t.status],
            "attempt": t.attempt, "dueAtMs": t.dueAtMs, "createdAtMs": t.createdAtMs, "key": t.key,
            "tags": t.tags or []}


def listed_dict(r: Mapping[str, Any]) -> dict[str, Any]:
    """A task of `tasks list` (a row of delayq.store.maintenance.list_tasks)."""
    tags = stored_text(r["tags"])
    return {"taskId": r["task_id"], "topic": r["topic"], "shardId": r["shard_id"], "status": r["status"],
            "attempt": r["attempt"], "dueAtMs": r["due_ms"], "key": stored_text(r["task_key"]),
            "tags": tags.split(",") if tags else []}


def table(rows: Sequence[Mapping[str, Any]], topic: bool) -> list[str]:
    """The tasks as a table: task id, (topic,) state, attempt, due time, key and tags."""
    keys = [shown(r["key"]) for r in rows]
    w = max([len("KEY"), *map(len, keys)])
    lines = [f"{'TASK':<34} " + (f"{'TOPIC':<24} " if topic else "") +
             f"{'STATUS':<10} {'ATTEMPT':>7}  {'DUE':<24} {'KEY':<{w}}  TAGS"]
    for r, key in zip(rows, keys):
        lines.append(f"{r['taskId']:<34} " + (f"{r['topic']:<24} " if topic else "") +
                     f"{r['status']:<10} {r['attempt']:>7}  {utc_time(r['dueAtMs']):<24} {key:<{w}}  "
                     f"{shown(','.join(r['tags']) or None)}")
    return lines
