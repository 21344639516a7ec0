"""write_keyed: one submit call holding keys, written in one transaction of its own.

A call with a task whose dedup mode is not ALLOW (delayq.store.dedup) cannot share the group's
single INSERT: each such task first locks the live task holding its key (by the unique key on
(topic, held_key)), then acts on the decision: answer the holder, cancel it (moved to the backlog
as CANCELLED, "replaced by <id>"), give it the new payload, or take the key over from it when it
has fired. The call's other tasks go in in the same transaction: all or nothing.

The unique key is the guarantee, not the look-up: two submits that both found no holder both
INSERT, and the second one's fails on the key (error 1062) once the first commits; its
transaction then runs again and finds the first's task. READ COMMITTED, so that a look-up that
finds nothing takes no gap lock (under REPEATABLE READ two of them deadlock at their INSERTs).

A holder cancelled here is gone from job_delay_task before the commit, so no claim can take it
after: a node whose memory still holds it claims nothing (delayq.store.tasks.TaskStore.claim
takes only DELAY rows). One that a claim took first is READY, and the decision sees that.
"""
from __future__ import annotations

from typing import Sequence

import sqlalchemy.exc
from sqlalchemy import Connection

from delayq import tables
from delayq.db import mysql_code
from delayq.errors import Conflict
from delayq.lifecycle import Status
from delayq.store.backlog import move_to_backlog
from delayq.store.dedup import Action, Holder, decide
from delayq.store.sqltext import by_statement_size, insert_tasks, literal_bytes, literal_id, literal_ids, literal_traceparent
from delayq.store.values import NewTask, Outcome, Submitted

TASK, BACKLOG = tables.task, tables.backlog
DUPLICATE_KEY = 1062
RUNS = 20          # a call whose key other submits keep winning is answered Unavailable (retriable) after this


class Again(Exception):
    """Another submit of the key committed first: run the call's transaction again."""


def write_keyed(conn: Connection, group: Sequence[NewTask]) -> list[Submitted] | Conflict:
    """Write one call (group) on an autocommit connection, in a transaction of its own."""
    conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
    conn.exec_driver_sql("START TRANSACTION")
    try:
        result = _write(conn, group)
        conn.exec_driver_sql("ROLLBACK" if isinstance(result, Conflict) else "COMMIT")
        return result
    except BaseException as e:
        try:
            conn.exec_driver_sql("ROLLBACK")
        except Exception:  # noqa: BLE001 - the connection is broken: the server ends the transaction
            conn.invalidate()
        if isinstance(e, sqlalchemy.exc.IntegrityError) and mysql_code(e) == DUPLICATE_KEY:
            raise Again from None
        raise


def _write(conn: Connection, group: Sequence[NewTask]) -> list[Submitted] | Conflict:
    prior = _existing(conn, [t.task_id for t in group if t.client_id])
    out: list[Submitted] = []
    plain: list[NewTask] = []
    for t in group:
        seen = prior.get(t.task_id)
        if seen is not None:
            if seen[0] != t.spec_hash:
                return Conflict(t.task_id, "exists with different content")
            out.append(Submitted(t.task_id, seen[1], seen[2], False, Outcome.DEDUPLICATED))
            continue
        prior[t.task_id] = (t.spec_hash, t.shard_id, t.due_ms)
        if not t.holds_key:
            plain.append(t)
            out.append(Submitted(t.task_id, t.shard_id, t.due_ms, True))
            continue
        out.append(_one(conn, t))
    for part in by_statement_size(plain) if plain else ():
        conn.exec_driver_sql(insert_tasks(part))
    return _after_replacements(out)


def _after_replacements(out: list[Submitted]) -> list[Submitted]:
    """A task of the call that a later task of the same call replaced (two REPLACE submits of one
    key in a batch) is answered with the one that will fire, as REPLACED."""
    by = {d.replaced: d for d in out if d.replaced is not None}
    if not by:
        return out
    final = []
    for d in out:
        last = d
        while last.task_id in by:
            last = by[last.task_id]
        final.append(d if last is d else Submitted(last.task_id, last.shard_id, last.due_ms, False,
                                                   Outcome.REPLACED))
    return final


def _one(conn: Connection, t: NewTask) -> Submitted:
    assert t.key is not None
    row = conn.exec_driver_sql(
        f"SELECT task_id, status, shard_id, due_ms, key_since_ms, attempt FROM {TASK.name} "
        f"WHERE topic = %s AND held_key = {literal_bytes(t.key)} FOR UPDATE", (t.topic,)).first()
    holder = None if row is None else Holder(row[0], Status(row[1]), row[2], row[3],
                                             row[4] if row[4] is not None else row[3], row[5])
    d = decide(t.mode, holder, t.due_ms, t.created_ms, t.max_debounce_ms)
    if holder is not None and d.action is Action.DEDUPLICATE:
        return Submitted(holder.task_id, holder.shard_id, holder.due_ms, False, Outcome.DEDUPLICATED)
    if holder is not None and d.action is Action.UPDATE_PAYLOAD:
        conn.exec_driver_sql(
            f"UPDATE {TASK.name} SET payload = {literal_bytes(t.payload)}, tags = {literal_bytes(t.tags)}, "
            f"traceparent = {literal_traceparent(t.traceparent)}, updated_ms = %s "
            f"WHERE task_id = {literal_id(holder.task_id)}", (t.created_ms,))
        return Submitted(holder.task_id, holder.shard_id, holder.due_ms, False, Outcome.REPLACED)
    replaced = None
    if holder is not None and d.action is Action.CANCEL_AND_INSERT:
        move_to_backlog(conn, [(holder.task_id, holder.attempt)], (Status.DELAY,), Status.CANCELLED, t.created_ms,
                        f"replaced by {t.task_id}")
        replaced = holder.task_id
    elif holder is not None and d.action is Action.TAKE_OVER:
        conn.exec_driver_sql(f"UPDATE {TASK.name} SET held_key = NULL WHERE task_id = {literal_id(holder.task_id)}")
    conn.exec_driver_sql(insert_tasks([t._replace(due_ms=d.due_ms)], {t.task_id: d.since_ms}))
    return Submitted(t.task_id, t.shard_id, d.due_ms, True, Outcome.REPLACED if replaced else Outcome.CREATED,
                     replaced)


def _existing(conn: Connection, ids: list[str]) -> dict[str, tuple[bytes, int, int]]:
    """Client-chosen ids that exist already (live or ended): (spec hash, shard, due)."""
    found: dict[str, tuple[bytes, int, int]] = {}
    if not ids:
        return found
    for table in (TASK, BACKLOG):
        for task_id, spec_hash, shard_id, due_ms in conn.exec_driver_sql(
                f"SELECT task_id, spec_hash, shard_id, due_ms FROM {table.name} WHERE task_id IN ({literal_ids(ids)})"):
            found.setdefault(task_id, (bytes(spec_hash), shard_id, due_ms))
    return found
