"""The console's fields: every refusal names the field and says what it takes, never a message of
Python's own; and the pure rules of the forms (a reschedule's due time, a dead-letter group's count,
a topic's controls change)."""
from __future__ import annotations

import pytest

from delayq.nodes.console.fields import MAX_MS, ActionRefused, decimal, instant, one_of, page_mark, whole
from delayq.nodes.console.pages_tasks import chosen, due_of
from delayq.nodes.console.pages_topics import change_of


def refusal(f, *args) -> str:
    with pytest.raises(ActionRefused) as e:
        f(*args)
    return str(e.value)


def test_a_whole_number_blank_is_none_and_a_bad_one_names_the_field():
    assert whole("", "count") is None and whole("  ", "count") is None and whole(" 12 ", "count") == 12
    assert refusal(whole, "garbage", "count") == "count: not a whole number: 'garbage'"
    assert refusal(whole, "1e3", "burst") == "burst: not a whole number: '1e3'"
    assert refusal(whole, "١٢", "burst").startswith("burst: not a whole number")     # digits of another script
    assert refusal(whole, "-5", "in minutes", 0) == "in minutes: must be 0 or more, not -5"
    assert refusal(whole, "0", "count", 1, 9) == "count: must be from 1 to 9, not 0"
    assert "…" in refusal(whole, "x" * 100, "count") and "x" * 41 not in refusal(whole, "x" * 100, "count")


def test_a_decimal_is_finite_and_a_time_is_epoch_milliseconds():
    assert decimal("2.5", "max fire rate") == 2.5 and decimal("-5", "max fire rate") == -5.0
    for bad in ("nan", "inf", "1,5", "five"):
        assert refusal(decimal, bad, "max fire rate") == f"max fire rate: not a number: {bad!r}"
    assert instant("1700000000000", "from") == 1_700_000_000_000 and instant("", "from") is None
    assert refusal(instant, "-1", "from") == (f"from: not a time: expected epoch milliseconds from 0 to {MAX_MS}, "
                                              "not '-1'")


def test_a_choice_and_a_page_mark_say_what_they_take():
    assert one_of("DELAY", "state", ["DELAY", "FAILED"]) == "DELAY"
    assert refusal(one_of, "BOGUS", "state", ["DELAY", "FAILED"]) == "state: 'BOGUS' is not one of DELAY, FAILED"
    assert refusal(one_of, "a\x01", "action", ["pause"]) == "action: 'a\\x01' is not one of pause"
    assert page_mark("1700000000000:t-1") == (1_700_000_000_000, "t-1") and page_mark(None) is None
    for bad in ("garbage", "12:", ":t-1", "x:t-1"):
        assert refusal(page_mark, bad).startswith("after: not a page of this search")


def test_a_reschedule_moves_a_task_forward_only_by_minutes():
    now = 1_000_000
    assert due_of({"in_minutes": "5"}, now) == now + 300_000
    assert due_of({"in_minutes": "0"}, now) == now
    assert due_of({"due_ms": "2000000", "in_minutes": ""}, now) == 2_000_000
    assert refusal(due_of, {"in_minutes": "-5"}, now) == "in minutes: must be 0 or more, not -5"
    assert refusal(due_of, {"in_minutes": "soon"}, now) == "in minutes: not a whole number: 'soon'"
    assert refusal(due_of, {}, now) == "say when: a time, or in how many minutes"
    assert refusal(due_of, {"due_ms": "2000000", "in_minutes": "5"}, now).startswith("say when once")


def test_a_dead_letter_group_is_acted_on_up_to_a_positive_count_it_still_holds():
    ids = [f"t{i}" for i in range(9)]
    assert chosen(ids, 9) == ids and chosen(ids, 3) == ids[:3]
    assert refusal(chosen, ids, -1) == "count: must be 1 or more, not -1"
    assert refusal(chosen, ids, 0) == "count: must be 1 or more, not 0"
    assert refusal(chosen, ids, None).startswith("count: missing")
    assert refusal(chosen, ids, 10) == ("count: the group holds 9 dead letters now, fewer than the 10 asked for: "
                                        "look at it again")


def test_a_topic_form_names_the_topic_the_action_and_the_limit_it_refuses():
    assert change_of({}, "t.a", "pause").paused is True and change_of({}, "t.a", "resume").paused is False
    limits = change_of({"max_fire_rate": "2.5", "fire_burst": "", "weight": "3"}, "t.a", "limits")
    assert (limits.maxFireRate, limits.fireBurst, limits.weight, limits.paused) == (2.5, None, 3, None)
    assert refusal(change_of, {}, "", "pause") == "topic: missing: say which topic"
    assert refusal(change_of, {}, "t.a", "explode") == "action: 'explode' is not one of pause, resume, limits"
    assert refusal(change_of, {"fire_burst": "lots"}, "t.a", "limits") == "burst: not a whole number: 'lots'"
    assert refusal(change_of, {"max_fire_rate": "fast"}, "t.a", "limits") == "max fire rate: not a number: 'fast'"
