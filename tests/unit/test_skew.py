"""The reference clock: MySQL's time, kept between readings by the monotonic clock."""
import pytest

from delayq.nodes.cluster.skew import ReferenceClock, Sample, best


class System:
    def __init__(self, wall_ms: int, mono: float):
        self.wall_ms, self.mono = wall_ms, mono

    def now_ms(self) -> int:
        return self.wall_ms

    def monotonic(self) -> float:
        return self.mono


def test_the_offset_is_taken_at_the_midpoint_of_the_round_trip():
    s = Sample(sent_mono=10.0, received_mono=10.004, sent_wall_ms=1_000_030_000, reference_ms=1_000_000_002)
    assert s.round_trip_ms == pytest.approx(4.0)
    assert round(s.offset_ms) == 30_000


def test_the_shortest_round_trip_wins():
    slow = Sample(10.0, 10.050, 0, 0)
    fast = Sample(11.0, 11.001, 0, 0)
    assert best([slow, fast, Sample(12.0, 12.010, 0, 0)]) is fast


def test_before_any_reading_it_is_the_system_clock():
    assert ReferenceClock(System(123_456, 5.0)).now_ms() == 123_456


def test_after_a_reading_it_follows_the_reference_and_ignores_steps_of_the_wall_clock():
    system = System(wall_ms=2_000_030_000, mono=100.0)       # 30 s ahead
    clock = ReferenceClock(system)
    assert clock.adopt(Sample(100.0, 100.002, 2_000_030_000, 2_000_000_001))
    system.mono = 101.5
    system.wall_ms = 1_000                                     # stepped: irrelevant now
    assert clock.now_ms() == 2_000_001_499           # 1,498 ms after the end of the reading's round trip
    assert round(clock.offset_ms) == 30_000


def test_a_reading_within_its_own_uncertainty_keeps_the_anchor_and_real_drift_moves_it():
    system = System(0, 0.0)
    clock = ReferenceClock(system)
    clock.adopt(Sample(0.0, 0.002, 0, 1_000_000))
    # 10 s later the reference agrees to within the round trip: time does not wobble.
    assert not clock.adopt(Sample(10.0, 10.004, 0, 1_010_001.5))
    # ... and later it says this clock drifted 50 ms: adopted.
    assert clock.adopt(Sample(20.0, 20.002, 0, 1_020_051))
    system.mono = 20.003
    assert clock.now_ms() == 1_020_052


def test_the_node_is_never_ahead_of_the_reference_only_behind_by_the_round_trip():
    system = System(0, 0.0)
    clock = ReferenceClock(system)
    # Read somewhere within [5.000, 5.004]: whenever it really was, now_ms is not ahead of it.
    clock.adopt(Sample(5.000, 5.004, 0, 7_000.0))
    for true_read_at in (5.000, 5.002, 5.004):
        system.mono = 6.0
        true_now = 7_000.0 + (6.0 - true_read_at) * 1000
        assert true_now - 4 - 1 <= clock.now_ms() <= true_now
