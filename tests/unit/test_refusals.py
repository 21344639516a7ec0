"""The tally of unauthenticated refusals (delayq.nodes.front.refusals): how many audit rows a flood
of them costs, and that every refusal is in some row."""
from __future__ import annotations

from delayq.nodes.front.refusals import OTHERS, RefusalTally, Summary


def test_a_flood_from_one_address_costs_its_first_row_and_one_row_an_interval():
    tally = RefusalTally(interval_ms=60_000)
    firsts, summaries = 0, []
    for second in range(300):
        first, due = tally.note("10.0.0.7", second * 1000)
        firsts += first
        summaries += due
    summaries += tally.flush(300_000)
    assert firsts == 1
    assert [s.count for s in summaries] == [59, 60, 60, 60, 60]
    assert firsts + sum(s.count for s in summaries) == 300       # every refusal is in some row
    assert summaries[0] == Summary("10.0.0.7", 59, 0, 60_000)
    assert summaries[0].outcome == "59 unauthenticated calls refused in the last 60 s"


def test_an_address_quiet_for_an_interval_is_recorded_afresh_and_others_are_apart():
    tally = RefusalTally(interval_ms=1000)
    assert tally.note("a", 0) == (True, [])
    assert tally.note("b", 10) == (True, [])
    assert tally.note("a", 20) == (False, [])
    assert tally.note("a", 5000) == (False, [Summary("a", 1, 0, 5000)])   # a window with a count goes on
    assert tally.due(7000) == [Summary("a", 1, 5000, 7000)]
    assert tally.note("a", 9000) == (True, [])                           # quiet since 7000 s: forgotten
    assert tally.flush(9500) == []


def test_past_the_addresses_told_apart_new_ones_share_one_tally():
    tally = RefusalTally(interval_ms=60_000, max_addresses=2)
    assert [tally.note(f"10.0.0.{i}", i)[0] for i in range(100)] == [True, True, True] + [False] * 97
    assert tally.flush(1000) == [Summary(OTHERS, 97, 2, 1000)]


def test_connections_refused_before_a_call_are_only_counted_in_the_address_s_summary():
    tally = RefusalTally(interval_ms=60_000)
    for second in range(100):
        tally.count("10.0.0.7", second * 10)
    assert tally.note("10.0.0.7", 1000) == (False, [])          # a call after them: counted with them
    assert tally.due(60_000) == [Summary("10.0.0.7", 101, 0, 60_000)]
    tally.count("10.0.0.8", 61_000)
    assert tally.flush(62_000) == [Summary("10.0.0.8", 1, 61_000, 62_000)]
