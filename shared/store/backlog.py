"""move_to_backlog and move_locked: the end of a task's life in MySQL (docs/ARCHITECTURE.md, invariant 7).

A finished, failed or cancelled task leaves job_delay_task for job_delay_task_backlog in the
transaction that finishes it, so scans and claims only ever touch live tasks. A FAILED task is
marked for its dead letter (dead_letter = 1) in the same statement: nothing is lost if the node
dies before publishing it (delayq.nodes.amqp.deadletters).
"""
from __future__ import annotations

from typing import Iterable, Sequence

from sqlalchemy import Connection

from delayq import tables
from delayq.lifecycle import Status
from delayq.store.sqltext import literal_ids

TASK, BACKLOG = tables.task, tables.backlog
BY_ID = "FORCE INDEX (PRIMARY)"


def move_to_backlog(conn: Connection, pairs: Sequence[tuple[str, int]], statuses: Iterable[Status],
                    final: Status, now_ms: int, message: str | None) -> set[str]:
    """Move live tasks, each at its attempt and in one of `statuses`, to the backlog with their
    final status, in three statements whatever their number. Returns the ids moved."""
    if not pairs:
        return set()
    wanted = dict(pairs)
    codes = {int(s) for s in statuses}
    # Lock first: INSERT ... SELECT takes a shared lock that the DELETE would have to upgrade,
    # which deadlocks against a concurrent result for the same task. Locked, the rows cannot
    # change under the two statements that follow, so those need only the ids that matched.
    locked = [task_id for task_id, attempt, status in conn.exec_driver_sql(
        f"SELECT task_id, attempt, status FROM {TASK.name} {BY_ID} WHERE task_id IN ({literal_ids(wanted)}) FOR UPDATE")
        if attempt == wanted[task_id] and status in codes]
    move_locked(conn, locked, final, now_ms, message)
    return set(locked)


def move_locked(conn: Connection, task_ids: Sequence[str], final: Status, now_ms: int, message: str | None) -> None:
    """Move these live tasks to the backlog as they are: the caller has locked their rows in this
    transaction and checked their state (a bulk batch's locking read does both: a second locking
    read cost it a ninth of its time)."""
    if not task_ids:
        return
    ids = f"task_id IN ({literal_ids(task_ids)})"
    # By primary key, named: on a table of a few hundred rows MariaDB would rather scan it whole,
    # locking every row it passes — a claim's, or another bulk lane's — until the commit.
    conn.exec_driver_sql(
        f"INSERT INTO {BACKLOG.name} (task_id, topic, shard_id, due_ms, status, attempt, payload, spec_hash, "
        "max_retries, ttr_ms, created_ms, finished_ms, message, dead_letter, task_key, tags, traceparent, key_mode) "
        "SELECT task_id, topic, shard_id, due_ms, %s, attempt, payload, spec_hash, max_retries, ttr_ms, "
        f"created_ms, %s, %s, %s, task_key, tags, traceparent, key_mode FROM {TASK.name} {BY_ID} WHERE {ids}",
        (int(final), now_ms, message, 1 if final is Status.FAILED else 0))
    # A DELETE takes an index hint only in its multi-table form.
    conn.exec_driver_sql(f"DELETE t FROM {TASK.name} t {BY_ID} WHERE t.{ids}")


