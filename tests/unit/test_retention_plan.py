"""Day partitions and retention decisions (delayq.retention), without a database."""
from __future__ import annotations

import datetime

import pytest

from delayq.retention import (DAY_MS, TAIL, Partition, PartitionPlan, Retention, day_name, day_of, day_partition,
                              named_day, plan)

NOV_27 = (datetime.date(2026, 11, 27) - datetime.date(1970, 1, 1)).days
NOON = NOV_27 * DAY_MS + 12 * 3_600_000
TAIL_PART = Partition(TAIL, None)


def days(*numbers: int) -> list[Partition]:
    return [day_partition(NOV_27 + n) for n in numbers] + [TAIL_PART]


def test_a_day_partition_is_named_for_its_day_and_bounded_by_the_next_midnight():
    p = day_partition(NOV_27)
    assert p.name == "p20261127"
    assert p.below_ms == (NOV_27 + 1) * DAY_MS
    assert datetime.datetime.fromtimestamp(p.below_ms / 1000, datetime.timezone.utc).isoformat() == \
        "2026-11-28T00:00:00+00:00"
    assert day_of(p.below_ms - 1) == NOV_27 and day_of(p.below_ms) == NOV_27 + 1


@pytest.mark.parametrize("day", [0, NOV_27, NOV_27 + 3653])
def test_names_and_days_round_trip(day):
    assert named_day(day_name(day)) == day


@pytest.mark.parametrize("name", [TAIL, "p2026112", "p20261340", "x20261127", "p20261127x", ""])
def test_other_names_are_no_day(name):
    assert named_day(name) is None


def test_a_freshly_migrated_table_gets_today_and_the_days_ahead():
    """The migration leaves one partition (its day, with every older row) and the tail."""
    todo = plan(days(0), NOON, keep_days=7, ahead_days=2)
    assert [p.name for p in todo.add] == ["p20261128", "p20261129"]
    assert todo.drop == ()


def test_nothing_to_do_when_the_days_ahead_exist_and_nothing_is_past_retention():
    assert plan(days(-3, -2, -1, 0, 1, 2), NOON, keep_days=7, ahead_days=2) == PartitionPlan()
    assert not PartitionPlan()


def test_whole_days_older_than_retention_are_dropped():
    # Retention 7 days at noon on the 27th: rows older than the 20th at noon go. p20261119 ends at
    # the 20th's midnight, so all of it; p20261120 still holds rows from the 20th's afternoon.
    todo = plan(days(-9, -8, -7, -6, 0, 1, 2), NOON, keep_days=7, ahead_days=2)
    assert todo.drop == ("p20261118", "p20261119")
    assert todo.add == ()


def test_the_boundary_is_exact():
    now = (NOV_27 - 6) * DAY_MS + 7 * DAY_MS     # p20261120's bound (the 21st, 00:00) + 7 days
    assert plan(days(-7, 0, 1, 2), now, keep_days=7, ahead_days=2).drop == ("p20261120",)
    assert plan(days(-7, 0, 1, 2), now - 1, keep_days=7, ahead_days=2).drop == ()


def test_zero_days_keeps_everything():
    assert plan(days(-400, 0, 1, 2), NOON, keep_days=0, ahead_days=2).drop == ()


def test_after_an_idle_spell_today_takes_what_the_tail_gathered():
    """Nothing ran for 5 days: the days between were written to the tail. The first day added is
    today (bounded by tomorrow), so those rows land in it, kept longer rather than dropped early."""
    todo = plan(days(-6, -5), NOON, keep_days=30, ahead_days=1)
    assert [p.name for p in todo.add] == ["p20261127", "p20261128"]
    assert todo.drop == ()


def test_only_days_past_the_last_bound_are_added():
    todo = plan(days(0, 1, 2, 3), NOON, keep_days=7, ahead_days=2)
    assert todo.add == ()
    todo = plan(days(0, 1), NOON, keep_days=7, ahead_days=3)
    assert [p.name for p in todo.add] == ["p20261129", "p20261130"]


def test_the_table_always_keeps_a_partition_below_the_tail():
    """Everything past retention, and no day ahead yet: today's is added, so dropping all the old
    ones still leaves one to split the tail from."""
    todo = plan(days(-30, -20), NOON, keep_days=7, ahead_days=1)
    assert todo.drop == ("p20261028", "p20261107")
    assert [p.name for p in todo.add] == ["p20261127", "p20261128"]


@pytest.mark.parametrize("parts", [[], [day_partition(NOV_27)], [TAIL_PART, day_partition(NOV_27)]])
def test_a_table_without_the_tail_last_is_refused(parts):
    with pytest.raises(ValueError, match=TAIL):
        plan(parts, NOON, keep_days=7, ahead_days=2)


# ---- Retention ------------------------------------------------------------------------------


def test_a_topic_has_the_default_unless_it_has_its_own():
    r = Retention(7, {"audit.trail": 90, "pings": 1})
    assert (r.days("orders"), r.days("audit.trail"), r.days("pings")) == (7, 90, 1)


def test_partitions_are_kept_for_the_longest_retention():
    assert Retention(7).longest == 7
    assert Retention(7, {"audit.trail": 90, "pings": 1}).longest == 90
    assert Retention(7, {"pings": 1}).longest == 7


def test_one_topic_kept_for_ever_keeps_every_partition():
    assert Retention(7, {"legal": 0}).longest == 0
    assert Retention(0, {"pings": 1}).longest == 0


def test_topics_kept_for_less_than_the_longest_go_row_by_row():
    r = Retention(7, {"audit.trail": 90, "pings": 1})
    assert r.shorter(["orders", "audit.trail", "pings", "mail"]) == [("mail", 7), ("orders", 7), ("pings", 1)]


def test_an_override_of_an_unregistered_topic_still_counts():
    assert Retention(7, {"pings": 1}).shorter([]) == [("pings", 1)]


def test_with_one_retention_nothing_goes_row_by_row():
    assert Retention(7).shorter(["a", "b"]) == []
    assert Retention(7, {"a": 7}).shorter(["a", "b"]) == []


def test_topics_kept_for_ever_never_go_row_by_row():
    r = Retention(0, {"pings": 1, "legal": 0})
    assert r.shorter(["orders", "legal", "pings"]) == [("pings", 1)]
