"""claim_keeping_one: the claim's UPDATE for tasks submitted under KEEP_IF_ACTIVE, which promises
at most one attempt of a (topic, key) in flight.

The promise is the database's, not this module's: job_delay_task.flight_key is computed by the
server as the task's key while a KEEP_IF_ACTIVE task is READY or RUNNING (sql/012), under a
unique key on (topic, flight_key). A claim that would put a second attempt of a key in flight
breaks that key, so UPDATE IGNORE leaves that row DELAY instead of failing the batch: whichever
nodes claim at once, one of them wins and the others wait on its uncommitted index entry, then
find the key taken. The wait is bounded like every lock wait of a node (delayq.db.LOCK_WAIT_S):
behind a node frozen before its commit, the claim gives up, its tasks stay DELAY and are claimed
again once the master has ended the frozen node's connections (delayq.store.connections). The row is then waiting (delayq.store.values.KeyWait), still DELAY; it can be
claimed the moment the attempt in flight ends (a result, a time-out, a release), because that
same change sets flight_key back to NULL or moves the row out.

Only these rows pay for it: the claim's one UPDATE of the other rows is unchanged, and their
flight_key stays NULL through every change of status, so the index is never written for them.
The rows are updated one by one in (topic, key) order, so two claims wait on each other's keys
in the same order and never in a cycle.
"""
from __future__ import annotations

from typing import Sequence

from sqlalchemy import Connection

from delayq.lifecycle import Status
from delayq.store.sqltext import literal_id, literal_ids

KEEP_IF_ACTIVE = 4          # delayq.store.values.KeyMode.KEEP_IF_ACTIVE, as job_delay_task.key_mode stores it


def claim_keeping_one(conn: Connection, table: str, rows: Sequence[tuple[str, str, bytes]], set_ready: str,
                      params: tuple) -> set[str]:
    """Claim these (task id, topic, key) rows, locked DELAY by the caller, with the claim's SET
    clause; returns the ids claimed (the others' key has an attempt in flight)."""
    for task_id, _, _ in sorted(rows, key=lambda r: (r[1], r[2], r[0])):
        conn.exec_driver_sql(f"UPDATE IGNORE {table} SET {set_ready} WHERE task_id = {literal_id(task_id)} "
                             "AND status = %s", (*params, int(Status.DELAY)))
    # Read back under the rows' own locks: whether an UPDATE IGNORE counts an ignored row as
    # matched depends on the driver's found-rows flag.
    return {task_id for (task_id,) in conn.exec_driver_sql(
        f"SELECT task_id FROM {table} WHERE task_id IN ({literal_ids(r[0] for r in rows)}) AND status = %s",
        (int(Status.READY),))}
