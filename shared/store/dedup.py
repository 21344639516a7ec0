"""decide: what a submit with a key and a dedup mode does, given the live task holding its key.

Pure; delayq.store.keyed runs it inside the submit's transaction, with the holder's row locked,
and the database's unique key on (topic, held_key) guarantees that at most one live task of a
topic holds a key whatever races (two submits that both find no holder: one INSERT fails on the
key and its transaction runs again, finding the other's task).

    holder          REJECT        REPLACE             REPLACE_PAYLOAD_KEEP_DUE   KEEP_IF_ACTIVE
    none            INSERT        INSERT              INSERT                     INSERT
    waiting (DELAY) DEDUPLICATE   CANCEL_AND_INSERT   UPDATE_PAYLOAD             DEDUPLICATE
    fired           DEDUPLICATE   TAKE_OVER           TAKE_OVER                  TAKE_OVER

TAKE_OVER: the fired holder (READY or RUNNING) keeps running but gives up the key, and the new
task, inserted, holds it: so at most one task of the key waits and one is in flight.

REPLACE keeps pushing the key's due time back, but with maxDebounceMs never past the first submit
of the chain (the holder's key_since_ms) plus maxDebounceMs. Worked example, maxDebounceMs 60 s:
submits at 0 s, 20 s, 40 s, 70 s, each with delay 30 s -> due 30 s, 50 s, 60 s (not 70 s), and
the one at 70 s finds its chain's limit passed: due 70 s, now. The submit that starts a chain (no
holder, or a fired one) is its first submit, so it too is due at most maxDebounceMs from now: with
delay 90 s and maxDebounceMs 60 s, the first submit is due at 60 s.
"""
from __future__ import annotations

import enum
from typing import NamedTuple

from delayq.lifecycle import Status
from delayq.store.values import KeyMode


class Holder(NamedTuple):
    """The live task holding a key, as its locked row says."""
    task_id: str
    status: Status
    shard_id: int
    due_ms: int
    since_ms: int
    attempt: int = 0


class Action(enum.Enum):
    INSERT = "insert"                       # CREATED
    DEDUPLICATE = "deduplicate"             # DEDUPLICATED: answer the holder
    CANCEL_AND_INSERT = "cancel_and_insert"     # REPLACED: the holder is cancelled
    UPDATE_PAYLOAD = "update_payload"       # REPLACED: the holder keeps its due time and id
    TAKE_OVER = "take_over"                 # CREATED: the fired holder gives up the key


class Decision(NamedTuple):
    action: Action
    due_ms: int         # the new task's due time (INSERT, CANCEL_AND_INSERT, TAKE_OVER)
    since_ms: int       # when the new task's debounce chain began


def decide(mode: KeyMode, holder: Holder | None, due_ms: int, now_ms: int,
           max_debounce_ms: int | None = None) -> Decision:
    assert mode is not KeyMode.ALLOW, "ALLOW holds no key"
    if holder is None:
        return Decision(Action.INSERT, _bounded(due_ms, now_ms, now_ms, max_debounce_ms), now_ms)
    waiting = holder.status is Status.DELAY
    if mode is KeyMode.REJECT or (mode is KeyMode.KEEP_IF_ACTIVE and waiting):
        return Decision(Action.DEDUPLICATE, holder.due_ms, holder.since_ms)
    if not waiting:
        return Decision(Action.TAKE_OVER, _bounded(due_ms, now_ms, now_ms, max_debounce_ms), now_ms)
    if mode is KeyMode.REPLACE_PAYLOAD_KEEP_DUE:
        return Decision(Action.UPDATE_PAYLOAD, holder.due_ms, holder.since_ms)
    return Decision(Action.CANCEL_AND_INSERT, _bounded(due_ms, holder.since_ms, now_ms, max_debounce_ms),
                    holder.since_ms)


def _bounded(due_ms: int, since_ms: int, now_ms: int, max_debounce_ms: int | None) -> int:
    """The due time of a chain that began at since_ms: at most maxDebounceMs after it, never before now."""
    if max_debounce_ms is None:
        return due_ms
    return min(due_ms, max(now_ms, since_ms + max_debounce_ms))
