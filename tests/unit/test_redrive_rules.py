"""Unit tests of a redrive's rules without servers (delayq.store.redrives): which FAILED tasks take
their key back and which stay FAILED, and the live rows a redrive writes."""
from __future__ import annotations

from delayq.lifecycle import Status
from delayq.store.redrives import redriven_rows, sort_out
from delayq.store.values import KeyMode

NOW = 1_000_000


def _failed(task_id: str, key: bytes | None = None, mode: KeyMode | None = None, topic: str = "t",
            shard: int = 1) -> dict:
    return {"task_id": task_id, "topic": topic, "shard_id": shard, "due_ms": 5, "status": int(Status.FAILED),
            "attempt": 3, "payload": b"p", "spec_hash": bytes(16), "max_retries": 2, "ttr_ms": 100, "created_ms": 1,
            "task_key": key, "tags": None, "traceparent": None, "key_mode": None if mode is None else mode.value}


def test_the_first_failed_task_of_a_free_key_takes_it_and_the_others_stay_failed_naming_it():
    rows = [_failed("a", b"k", KeyMode.KEEP_IF_ACTIVE), _failed("b", b"k", KeyMode.KEEP_IF_ACTIVE),
            _failed("c", b"k", KeyMode.REPLACE)]
    back, held = sort_out(rows, {})
    assert ([r["task_id"] for r in back], held) == (["a"], [("b", "a"), ("c", "a")])


def test_a_key_a_live_task_holds_leaves_its_failed_tasks_failed():
    rows = [_failed("a", b"k", KeyMode.REJECT), _failed("b", b"other", KeyMode.REJECT)]
    back, held = sort_out(rows, {("t", b"k"): "live"})
    assert ([r["task_id"] for r in back], held) == (["b"], [("a", "live")])


def test_allow_keyless_and_unknown_modes_are_redriven_whoever_holds_the_key():
    rows = [_failed("a", b"k", KeyMode.ALLOW), _failed("b", b"k"), _failed("c"),
            _failed("d", b"k", KeyMode.REPLACE, topic="u")]
    back, held = sort_out(rows, {("t", b"k"): "live"})
    assert ([r["task_id"] for r in back], held) == (["a", "b", "c", "d"], [])


def test_a_redriven_task_holds_its_key_again_under_its_mode_with_a_new_debounce_chain():
    [kept, free] = redriven_rows([_failed("a", b"k", KeyMode.KEEP_IF_ACTIVE), _failed("b", b"k", KeyMode.ALLOW)],
                                 8, NOW)
    assert (kept["held_key"], kept["key_mode"], kept["key_since_ms"]) == (b"k", KeyMode.KEEP_IF_ACTIVE.value, NOW)
    assert (free["task_key"], free["held_key"], free["key_mode"], free["key_since_ms"]) == (b"k", None, None, None)
    assert (kept["status"], kept["due_ms"], kept["attempt"], kept["max_retries"]) == (int(Status.DELAY), NOW, 3, 5)


def test_a_task_archived_before_a_shrinking_reshard_goes_to_a_shard_that_exists():
    [row] = redriven_rows([_failed("a", shard=12)], 8, NOW)
    assert 0 <= row["shard_id"] < 8


def test_tasks_left_failed_take_none_of_a_jobs_room():
    # A bulk redrive with room for two more: the held task before them does not use it up.
    rows = [_failed("a", b"k", KeyMode.REJECT), _failed("b"), _failed("c", b"j", KeyMode.REJECT), _failed("d")]
    back, held = sort_out(rows, {("t", b"k"): "live"}, most=2)
    assert ([r["task_id"] for r in back], held) == (["b", "c"], [("a", "live")])
