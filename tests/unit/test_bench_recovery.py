"""bench.recovery: the reference time of a task and its lateness from a fault's recovery point."""
from __future__ import annotations

import pytest

from bench.recovery import Event, attributed, concerned, from_recovery, reference_ms

# A rolling restart's first node: SIGKILL at 10 s (session 6 s: back at 16 s), started at 15 s and
# holding its shards at 17 s; then a SIGTERM at 30 s, exited at 30.5 s.
KILL = Event("SIGKILL n1", 10_000, 16_000)
START = Event("start n1", 15_000, 17_000)
TERM = Event("SIGTERM n2", 30_000, 30_500)
EVENTS = (KILL, START, TERM)


@pytest.mark.parametrize("due, ref", [
    (9_999, 9_999),         # before any event: its due time
    (10_000, 16_000),       # an event's window includes its start...
    (12_000, 16_000),
    (15_500, 17_000),       # in two windows: the later recovery point
    (16_000, 17_000),       # ...and its recovery point
    (17_000, 17_000),
    (17_001, 17_001),       # after: its due time again
    (30_200, 30_500),
])
def test_the_reference_is_the_latest_recovery_point_of_the_windows_holding_the_due_time(due, ref):
    assert reference_ms(due, EVENTS) == ref


def test_tasks_due_during_an_event_or_within_the_margin_after_it_are_concerned():
    assert not concerned(9_999, EVENTS, after_ms=5_000)
    assert concerned(10_000, EVENTS, after_ms=5_000)
    assert concerned(22_000, EVENTS, after_ms=5_000)        # 5 s after the start's recovery point
    assert not concerned(22_001, EVENTS, after_ms=5_000)
    assert concerned(35_500, EVENTS, after_ms=5_000)
    assert not concerned(35_501, EVENTS, after_ms=5_000)


def test_a_task_is_attributed_to_the_last_event_started_before_it_is_due():
    assert attributed(9_000, EVENTS) is None
    assert attributed(14_000, EVENTS) is KILL
    assert attributed(16_000, EVENTS) is START
    assert attributed(40_000, EVENTS) is TERM


def test_lateness_is_the_first_delivery_minus_the_reference():
    tasks = {"before": 5_000, "in-kill": 12_000, "in-both": 15_500, "after": 18_000, "term": 30_100,
             "late-after": 31_000, "far": 60_000, "undelivered": 19_000}
    first = {"before": 9_000.0,          # late, but due before any event: not measured here
             "in-kill": 16_300.0,        # 300 ms after the kill's recovery point
             "in-both": 17_050.0,        # 50 ms after the start's
             "after": 18_010.0,          # 10 ms after its due time
             "term": 30_500.0,           # on the recovery point
             "late-after": 46_000.0,     # 15 s after its due time (a full scan's wait)
             "far": 60_001.0}            # beyond the margin: not measured
    r = from_recovery(tasks, first, EVENTS, after_ms=5_000)
    assert r.lateness_ms == [0.0, 10.0, 50.0, 300.0, 15_000.0]
    assert r.max_s == 15.0
    assert r.p99_s == 15.0
    assert r.undelivered == 1
    assert [(t.task_id, t.reference_ms) for t in r.slow] == [("late-after", 31_000)]
    assert r.worst_by_event == {"SIGKILL n1": 300.0, "start n1": 50.0, "SIGTERM n2": 15_000.0}
    assert "1 more than 1 s late" in r.note("rolling") and "1 never delivered" in r.note("rolling")


def test_an_early_delivery_shows_as_negative_lateness():
    r = from_recovery({"t": 20_000}, {"t": 19_990.0}, (Event("x", 19_000, 19_500),), after_ms=1_000)
    assert r.lateness_ms == [-10.0]


def test_no_task_concerned_means_no_figure():
    r = from_recovery({"t": 1_000}, {"t": 1_001.0}, EVENTS, after_ms=1_000)
    assert r.lateness_ms == [] and r.max_s is None and r.p99_s is None and r.worst_by_event == {}


def test_a_task_acknowledged_after_its_recovery_point_is_judged_from_its_acknowledgement():
    events = [Event("SIGSTOP n2", 1_000, 7_000)]
    rec = from_recovery({"frozen": 2_000, "other": 2_000}, {"frozen": 16_100, "other": 7_200}, events, 20_000,
                        acked={"frozen": 16_000, "other": 1_500})
    assert rec.lateness_ms == [100, 200] and rec.slow == []
