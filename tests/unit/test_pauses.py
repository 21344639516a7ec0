"""PauseWatch: a jump of the boot clock that its own thread did not live through is a pause; a lease
asks how much of its span the node was stopped."""
import itertools
import threading

import pytest

from delayq.nodes.dispatch.lease import PAUSED, WAITED, ClaimLease
from delayq.nodes.dispatch.pauses import PauseWatch
from delayq.nodes.cluster.ownership import Ownership

pytestmark = pytest.mark.timeout(10)


class JumpingClock:
    """Boot time that advances 50 ms a read, and 3 s once (the process stopped), then says so."""

    def __init__(self) -> None:
        self.t, self.reads, self.jumped = 100.0, itertools.count(), threading.Event()

    def __call__(self) -> float:
        n = next(self.reads)
        self.t += 3.0 if n == 5 else 0.05
        if n > 6:
            self.jumped.set()
        return self.t


def test_the_watch_notes_a_jump_its_thread_did_not_live_through_and_nothing_else():
    clock = JumpingClock()
    watch = PauseWatch(clock)
    watch.start()
    try:
        assert clock.jumped.wait(5)
    finally:
        watch.stop()
    assert watch.paused_between(100.0, 100.2) == 0.0
    assert watch.paused_between(100.0, clock.t) == pytest.approx(2.95, abs=0.06)


def test_a_lapsed_lease_is_a_pause_only_if_the_node_was_stopped_within_it():
    o = Ownership("n1")
    o.set({1: 3}, [1])
    now = [100.0]
    watch = PauseWatch(lambda: now[0])
    lease = ClaimLease(o, 1500, lambda: now[0], watch)
    first = lease.take()
    watch.noted(90.0, 95.0)                  # a pause before the claim says nothing of it
    now[0] += 2.0
    assert lease.refusal(first, [1]) == WAITED
    second = lease.take()
    watch.noted(102.5, 104.0)
    now[0] += 2.0
    assert lease.refusal(second, [1]) == PAUSED


def test_a_pause_the_watch_has_not_woken_from_yet_counts_already():
    watch = PauseWatch(lambda: 0.0)
    watch.woke(100.0)
    assert watch.paused_between(99.0, 100.3) == 0.0      # a wake-up merely late is no pause
    assert watch.paused_between(99.0, 103.0) == pytest.approx(2.95)
    watch.woke(103.0)                                    # then noted once it runs, not counted twice
    assert watch.paused_between(99.0, 103.0) == pytest.approx(2.95)
