"""ClaimPace: a lane claims no more than it writes within its share of the claim lease, at the pace
it measured; one small claim first after a start or an outage; never stalled."""
import pytest

from delayq.nodes.dispatch.pace import FLOOR, ClaimPace

pytestmark = pytest.mark.timeout(5)


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def paced(per_attempt_s: float, claim_s: float) -> tuple[ClaimPace, Clock]:
    """A pace (lease 1.5 s, claims of 500, two held) that measured a write of 100 attempts taking
    per_attempt_s each, after a claim of claim_s."""
    clock = Clock()
    pace = ClaimPace(1.5, 500, 2, clock)
    pace.claimed(100, claim_s)
    released = pace.released()
    clock.t += 100 * per_attempt_s
    pace.written(100, released)
    return pace, clock


def test_one_small_claim_first_then_as_much_as_is_written_within_two_thirds_of_the_lease():
    pace = ClaimPace(1.5, 500, 2, Clock())
    assert pace.room() == FLOOR
    with pace.reserving(FLOOR):
        assert pace.room() == FLOOR                 # another claiming thread may try too
    pace.claimed(FLOOR, 0.01)
    assert pace.room() == 0                         # nothing measured: no more while those are unwritten
    pace, _ = paced(0.001, 0.2)                     # (1.0 s - 0.2 s) / 1 ms: 800 unwritten at most
    assert pace.room() == 500
    pace.claimed(500, 0.2)
    assert pace.room() == 300


def test_a_busy_node_claims_less_at_a_time():
    pace, _ = paced(0.004, 0.2)                     # 4 ms an attempt: 200 unwritten at most
    assert pace.room() == 200
    pace.claimed(200, 0.2)
    assert pace.room() == 0
    pace.dropped(50)                                # given up (lease, misfire): room again
    assert pace.room() == 50


def test_with_nothing_unwritten_a_claim_is_never_refused_however_slow_the_writes():
    pace, _ = paced(0.5, 1.4)                       # nothing fits the lease any more
    assert pace.room() == FLOOR


def test_an_outage_forgets_the_pace_measured_before_it():
    pace, _ = paced(0.001, 0.2)
    pace.restart()
    assert pace.room() == FLOOR


def test_a_reservation_counts_while_a_claim_is_made():
    pace, _ = paced(0.001, 0.2)
    with pace.reserving(500):
        assert pace.room() == 300
    assert pace.room() == 500
