"""redrive_locked: FAILED tasks back to DELAY under the dedup promise they were submitted with.

Used by the operators' redrive (delayq.store.maintenance) and a bulk redrive's batch
(delayq.store.bulkbatch), inside their transactions, on backlog rows they have locked.

A FAILED task that held its key (the backlog's key_mode, sql/014: REJECT, REPLACE,
REPLACE_PAYLOAD_KEEP_DUE or KEEP_IF_ACTIVE) comes back holding it again under that mode, so the
key still has at most one task waiting and, under KEEP_IF_ACTIVE, at most one attempt in flight
(flight_key is computed from key_mode, sql/012). While another live task holds the key — a newer
submit's, or a task of the key redriven first — the task stays FAILED in the backlog and the
answer names that holder. A redrive is no newer submit: it neither replaces the holder nor is
folded into it; redriven once the holder has ended, the task takes the key.

The unique key on (topic, held_key) is the guarantee, as for submits (delayq.store.keyed): the
holders are found by a locking read, and a submit or another redrive that takes the key after
that read makes this INSERT fail on the key (1062) once it commits. That is KeyTaken: the caller
runs its transaction again, which then finds the holder. Callers run READ COMMITTED, so the look-up
of a key nobody holds takes no gap lock that a submit's INSERT would wait for.

Tasks without a key, submitted with ALLOW, or ended before schema version 14 (no key_mode kept)
come back as before: holding no key.
"""
from __future__ import annotations

import zlib
from collections import defaultdict
from dataclasses import dataclass
from typing import Mapping, Sequence

import sqlalchemy.exc
from sqlalchemy import Connection, and_, delete, insert, or_, select

from delayq import tables
from delayq.lifecycle import Status
from delayq.db import mysql_code
from delayq.schema import shard_count
from delayq.store.keyed import DUPLICATE_KEY
from delayq.store.values import KeyMode

TASK, BACKLOG = tables.task, tables.backlog
RUNS = 5            # a batch whose keys other writers keep taking is answered Unavailable (retriable)


class KeyTaken(Exception):
    """A key this batch was to take was taken by a transaction that committed first: run it again."""


@dataclass(frozen=True)
class Redrove:
    """What redrive_locked did with the rows it was given."""
    rows: tuple[dict, ...]                  # the live rows written: DELAY, due now
    held: tuple[tuple[str, str], ...] = ()  # (task id, the live task holding its key): left FAILED


def redrive_locked(conn: Connection, rows: Sequence[Mapping], now_ms: int, most: int | None = None) -> Redrove:
    """Move these FAILED backlog rows, locked by the caller in this transaction, back to DELAY,
    but for those whose key another live task holds; at most `most` of them (a bulk job's room),
    the rest left as they are. Raises KeyTaken (see the module docstring)."""
    back, held = sort_out(rows, _holders(conn, [r for r in rows if _holds_key(r)]), most)
    if not back:
        return Redrove((), tuple(held))
    new = redriven_rows(back, shard_count(conn), now_ms)
    try:
        conn.execute(insert(TASK), new)
    except sqlalchemy.exc.IntegrityError as e:
        if mysql_code(e) == DUPLICATE_KEY:
            raise KeyTaken from None
        raise
    # A single-table DELETE takes no index hint; the rows are few and locked by the caller.
    conn.execute(delete(BACKLOG).where(BACKLOG.c.task_id.in_([r["task_id"] for r in back]),
                                       BACKLOG.c.status == int(Status.FAILED)))
    return Redrove(tuple(new), tuple(held))


def sort_out(rows: Sequence[Mapping], holders: Mapping[tuple[str, bytes], str], most: int | None = None
             ) -> tuple[list[Mapping], list[tuple[str, str]]]:
    """The rows to redrive, and (task id, holder) for those left FAILED, given the live holders of
    their keys by (topic, key): the first row of a key nobody holds takes it, in the rows' order.
    Once `most` are to be redriven, the rows after are neither."""
    taken = dict(holders)
    back: list[Mapping] = []
    held: list[tuple[str, str]] = []
    for r in rows:
        if most is not None and len(back) == most:
            break
        if _holds_key(r):
            key = (r["topic"], bytes(r["task_key"]))
            if key in taken:
                held.append((r["task_id"], taken[key]))
                continue
            taken[key] = r["task_id"]
        back.append(r)
    return back, held


def redriven_rows(rows: Sequence[Mapping], shards: int, now_ms: int) -> list[dict]:
    """Archived FAILED rows (mappings) as live DELAY rows, due now, with a fresh set of retries;
    a task that held its key holds it again, under its mode, its debounce chain beginning now."""
    # A task archived before a reshard shrank the cluster goes where the reshard put its peers.
    return [{"task_id": r["task_id"], "topic": r["topic"], "due_ms": now_ms,
             "shard_id": r["shard_id"] if r["shard_id"] < shards else zlib.crc32(r["task_id"].encode()) % shards,
             "status": int(Status.DELAY), "attempt": r["attempt"], "payload": r["payload"],
             "spec_hash": r["spec_hash"], "max_retries": r["attempt"] + r["max_retries"], "ttr_ms": r["ttr_ms"],
             "deadline_ms": None, "node_id": None, "created_ms": r["created_ms"], "updated_ms": now_ms,
             "task_key": r["task_key"], "tags": r["tags"], "traceparent": r["traceparent"],
             **({"held_key": r["task_key"], "key_since_ms": now_ms, "key_mode": r["key_mode"]} if _holds_key(r)
                else {"held_key": None, "key_since_ms": None, "key_mode": None})} for r in rows]


def _holds_key(row: Mapping) -> bool:
    return row["task_key"] is not None and row.get("key_mode") not in (None, KeyMode.ALLOW.value)


def _holders(conn: Connection, rows: Sequence[Mapping]) -> dict[tuple[str, bytes], str]:
    """(topic, key) -> the live task holding it, for these rows' keys, locked (by the unique key)."""
    if not rows:
        return {}
    keys: dict[str, set[bytes]] = defaultdict(set)
    for r in rows:
        keys[r["topic"]].add(bytes(r["task_key"]))
    found = conn.execute(select(TASK.c.topic, TASK.c.held_key, TASK.c.task_id).where(or_(
        *(and_(TASK.c.topic == topic, TASK.c.held_key.in_(sorted(ks))) for topic, ks in keys.items())))
        .with_for_update())
    return {(topic, bytes(key)): task_id for topic, key, task_id in found}
