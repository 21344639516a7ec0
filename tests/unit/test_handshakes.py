"""The budget of TLS handshakes per peer address (delayq.nodes.front.handshakes): pure, on a clock
the test gives."""
from __future__ import annotations

from delayq.nodes.front.handshakes import HandshakeBudget


def admitted(budget: HandshakeBudget, address: str, n: int, now: float) -> int:
    return sum(budget.admit(address, now) for _ in range(n))


def test_an_address_gets_its_burst_at_once_then_its_rate():
    budget = HandshakeBudget(burst=200, per_s=20)
    assert admitted(budget, "10.0.0.7", 1000, now=0.0) == 200        # a pool reconnecting after a restart
    assert admitted(budget, "10.0.0.7", 100, now=1.0) == 20
    assert admitted(budget, "10.0.0.7", 100, now=1.5) == 10


def test_refused_connections_take_nothing_so_an_address_that_slows_down_is_served_again():
    budget = HandshakeBudget(burst=2, per_s=8)
    assert admitted(budget, "a", 50, now=0.0) == 2
    assert [budget.admit("a", t / 8) for t in range(1, 6)] == [True] * 5     # one every 1/8 s: each served


def test_the_bucket_refills_up_to_its_burst_and_no_further():
    budget = HandshakeBudget(burst=5, per_s=100)
    assert admitted(budget, "a", 5, now=0.0) == 5
    assert admitted(budget, "a", 100, now=3600.0) == 5


def test_each_address_has_a_bucket_of_its_own():
    budget = HandshakeBudget(burst=3, per_s=1)
    assert admitted(budget, "a", 10, now=0.0) == 3
    assert admitted(budget, "b", 10, now=0.0) == 3
    assert admitted(budget, "a", 10, now=0.0) == 0


def test_past_max_addresses_the_least_recently_used_is_forgotten_and_a_looping_one_is_kept():
    budget = HandshakeBudget(burst=1, per_s=0.001, max_addresses=3)
    assert budget.admit("looping", 0.0)
    for i in range(10):
        assert not budget.admit("looping", float(i))       # refused, and still the most recent
        assert budget.admit(f"other-{i}", float(i))
    assert len(budget) == 3
    assert not budget.admit("looping", 10.0)                # remembered: no fresh bucket
    assert budget.admit("other-0", 10.0)                    # forgotten: a fresh bucket


def test_a_clock_going_back_takes_nothing_away():
    budget = HandshakeBudget(burst=2, per_s=1)
    assert admitted(budget, "a", 1, now=10.0) == 1
    assert admitted(budget, "a", 5, now=5.0) == 1
