"""The read of a bulk job lane's next tasks, in the order of its walk (delayq.bulk.first_cursor).

- By key (a filter with a key prefix): the index (topic, task_key, created_ms, task_id), from the
  lane's place on, so a batch reads the entries of the prefix and the rows of those it keeps. No
  action changes a task's key, so a lane meets each task once whatever the batches change. The
  index is named: a range from the lane's place, where MariaDB might read the prefix from its
  start and sort it. It holds the task id after its columns (InnoDB's key extension), so the
  lane's share (crc32(task_id) % n = k) and the snapshot's highest id are checked on it.
- By task id (every other job, and every job of an earlier version): the primary key, the one
  order nothing changes: a reschedule moves due times, and a redriven task that fails again
  comes back to the backlog. MySQL reads every row after the cursor until the batch is full, so
  a filter few of the table's tasks match reads many rows for each: by key prefix, such a job
  read the whole table for a prefix of a hundred tasks among millions (bench/RESULTS-large.md).
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from sqlalchemy import Connection, and_, or_, select

from delayq.bulk import PAST_END, WALK_BY_KEY

_BY_KEY_INDEX = "idx_topic_key"


@dataclass(frozen=True)
class Step:
    """What a lane's read found: the task ids, in its walk's order, and the lane's cursor past them."""
    ids: list[str]
    cursor: str


def next_ids(conn: Connection, t, where: list, cursor: str, size: int, upto: str) -> Step:
    """At most `size` ids of the tasks matching `where` after the lane's cursor, in its walk's order;
    the cursor moves past them, or to the walk's end when fewer were left."""
    if cursor.startswith(WALK_BY_KEY):
        return _by_key(conn, t, where, cursor, size)
    ids = [r.task_id for r in conn.execute(select(t.c.task_id).where(*where, t.c.task_id > cursor)
                                           .order_by(t.c.task_id).limit(size))]
    return Step(ids, upto if len(ids) < size else ids[-1])


def _by_key(conn: Connection, t, where: list, cursor: str, size: int) -> Step:
    cols = [t.c.task_key, t.c.created_ms, t.c.task_id]
    q = select(*cols).with_hint(t, f"FORCE INDEX ({_BY_KEY_INDEX})").where(*where)
    if cursor != WALK_BY_KEY:
        key_hex, created_ms, task_id = json.loads(cursor[len(WALK_BY_KEY):])
        q = q.where(*after(cols, [bytes.fromhex(key_hex), created_ms, task_id]))
    rows = conn.execute(q.order_by(*cols).limit(size)).all()
    if len(rows) < size:
        return Step([r.task_id for r in rows], PAST_END)
    last = rows[-1]
    place = json.dumps([bytes(last.task_key).hex(), last.created_ms, last.task_id], separators=(",", ":"))
    return Step([r.task_id for r in rows], WALK_BY_KEY + place)


def after(cols: list, values: list) -> list:
    """(cols) > (values), in the order of the columns, written so that the index's range starts at
    the first column's value."""
    cond = cols[-1] > values[-1]
    for col, value in zip(reversed(cols[:-1]), reversed(values[:-1])):
        cond = or_(col > value, and_(col == value, cond))
    return [cols[0] >= values[0], cond]
