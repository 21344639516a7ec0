"""Hand-written SQL text for the hot statements, in place of PyMySQL's parameter escaping.

What it replaces: `cursor.execute(sql, params)`, where PyMySQL escapes every value (a type lookup
and a call per value). Why: for a 1000-task submitBatch and for the recorder's execlog upserts in a
burst, escaping cost more CPU than the statement's round trip, so the values are written in (ids
and topics as they are, bytes as hex literals, numbers as numbers). The figure to watch is the
node's CPU per batched task (`python -m bench --scenario submit`, batch_1000_node_cpu in
bench/RESULTS.md; no before/after of this module alone was kept). It is safe only because task ids
and topics are restricted to
`[A-Za-z0-9._:-]` at the door (delayq.nodes.validation) and checked again here: a value with any
other character raises ValueError instead of reaching MySQL.

It relies on nothing private: the literals are standard SQL. tests/unit/test_sqltext.py checks
that each literal is what PyMySQL's own escaping makes of the same value (tested with PyMySQL 1.2.4).
"""
from __future__ import annotations

import re
from typing import Iterable, Mapping, Sequence

from delayq import tables
from delayq.store.values import NewTask


def marks(n: int) -> str:
    """n driver placeholders for an IN list."""
    return ", ".join(["%s"] * n)


# Task ids and topics hold only these (delayq.nodes.validation): never a quote, a backslash or a percent
# sign, so the hot statements write them in as they are rather than have PyMySQL escape each
# value (a lookup and a call per value: most of the recorder's time in a burst). Checked here.
_PLAIN = re.compile(r"[A-Za-z0-9._:-]+")
_PLAIN_LIST = re.compile(r"[A-Za-z0-9._:,-]*")


def literal_id(task_id: str) -> str:
    """One task id as an SQL literal."""
    if not _PLAIN.fullmatch(task_id):
        raise ValueError(f"task id {task_id!r} holds characters not allowed")
    return f"'{task_id}'"


def literal_ids(task_ids: Iterable[str]) -> str:
    """Task ids as a list of SQL literals, for an IN list."""
    task_ids = list(task_ids)
    if not _PLAIN_LIST.fullmatch(",".join(task_ids)):
        raise ValueError(f"task ids hold characters not allowed: {task_ids[:5]!r}...")
    return "'" + "','".join(task_ids) + "'"


# status, attempt, deadline_ms and node_id take the schema's defaults: DELAY, attempt 0, NULL, NULL
# (sql/001_initial.sql).
_INSERT_TASKS = (f"INSERT INTO {tables.task.name} (task_id, topic, shard_id, due_ms, payload, spec_hash, max_retries, ttr_ms, "
                "created_ms, updated_ms, task_key, tags, traceparent, held_key, key_since_ms, key_mode) VALUES ")
_TRACEPARENT = re.compile(r"[0-9a-f-]{55}")
_NO_KEY = "NULL,NULL,NULL,NULL,NULL,NULL"     # task_key, tags, traceparent, held_key, key_since_ms, key_mode


def literal_bytes(value: bytes | None) -> str:
    """Bytes (a key, tags) as an SQL hex literal, or NULL."""
    return "NULL" if value is None else f"X'{value.hex()}'"


def literal_traceparent(value: str | None) -> str:
    if value is None:
        return "NULL"
    if not _TRACEPARENT.fullmatch(value):
        raise ValueError(f"traceparent {value!r} holds characters not allowed")
    return f"'{value}'"


def insert_tasks(rows: Sequence[NewTask], holds: Mapping[str, int] | None = None) -> str:
    """One INSERT of new tasks with their values written in: ids and topics as they are (they
    hold no quote, backslash or percent sign: checked here), bytes as hex literals, numbers as
    numbers. PyMySQL's escaping, a lookup per value, cost more than the insert itself. holds:
    task id -> when its key's debounce chain began, for the tasks that hold their key."""
    values = []
    for t in rows:
        if not _PLAIN.fullmatch(t.topic):
            raise ValueError(f"topic {t.topic!r} holds characters not allowed")
        since = holds.get(t.task_id) if holds else None
        keyed = _NO_KEY if t.key is None and t.tags is None and t.traceparent is None else "%s,%s,%s,%s,%s,%s" % (
            literal_bytes(t.key), literal_bytes(t.tags), literal_traceparent(t.traceparent),
            "NULL" if since is None else literal_bytes(t.key), "NULL" if since is None else "%d" % since,
            "NULL" if since is None else "%d" % t.mode.value)
        values.append("(%s,'%s',%d,%d,X'%s',X'%s',%d,%d,%d,%d,%s)" % (
            literal_id(t.task_id), t.topic, t.shard_id, t.due_ms, t.payload.hex(), t.spec_hash.hex(), t.max_retries,
            t.ttr_ms, t.created_ms, t.created_ms, keyed))
    return _INSERT_TASKS + ",".join(values)


UPSERT_DISPATCHED = (
    f"INSERT INTO {tables.execlog.name} (task_id, attempt, due_ms, node_id, dispatched_ms, result, result_ms, task_key, "
    "tags) VALUES %s ON DUPLICATE KEY UPDATE dispatched_ms = VALUES(dispatched_ms), node_id = VALUES(node_id), "
    "task_key = VALUES(task_key), tags = VALUES(tags)")
CONFIRMED = "'CONFIRMED'"


# Rows of one INSERT at most, by size: well below MySQL's max_allowed_packet. A payload takes
# twice its size in hex; the other values less than 256 bytes.
_STATEMENT_BYTES = 1024 * 1024


def by_statement_size(rows: list[NewTask]) -> list[list[NewTask]]:
    """New tasks in parts that each make one INSERT statement."""
    parts: list[list[NewTask]] = [[]]
    size = 0
    for t in rows:
        n = 2 * len(t.payload) + 256
        if parts[-1] and size + n > _STATEMENT_BYTES:
            parts.append([])
            size = 0
        parts[-1].append(t)
        size += n
    return parts


def chunks(items: list, n: int) -> Iterable[list]:
    for i in range(0, len(items), n):
        yield items[i:i + n]
