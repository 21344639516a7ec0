"""ClaimLease: a claim may be published only within its lease and with no ownership break since."""
from delayq.nodes.lease import ClaimLease, boottime
from delayq.nodes.ownership import Ownership


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def lease_of(ownership, ms=1500):
    clock = Clock()
    return ClaimLease(ownership, ms, clock), clock


def test_a_claim_is_current_within_its_lease_and_not_after():
    o = Ownership("n1")
    o.set({1: 3, 2: 3}, [1, 2])
    lease, clock = lease_of(o)
    taken = lease.take()
    clock.t += 1.5
    assert lease.current(taken)
    clock.t += 0.001
    assert not lease.current(taken)


def test_a_session_suspension_since_the_claim_ends_it_even_after_resuming():
    o = Ownership("n1")
    o.set({1: 3}, [1])
    lease, _ = lease_of(o)
    taken = lease.take()
    o.set_claimable(False)
    o.set_claimable(True)
    assert not lease.current(taken)
    assert lease.current(lease.take())


def test_losing_any_shard_or_a_new_epoch_ends_it_and_gaining_one_does_not():
    o = Ownership("n1")
    o.set({1: 3, 2: 3}, [1, 2, 3])
    lease, _ = lease_of(o)
    taken = lease.take()
    o.set({1: 3, 2: 3, 3: 4}, [1, 2, 3])
    assert lease.current(taken)
    o.set({1: 3, 2: 5, 3: 4}, [1, 2, 3])
    assert not lease.current(taken)
    taken = lease.take()
    o.set({1: 3, 2: 5}, [1, 2, 3])
    assert not lease.current(taken)


def test_a_new_session_owner_name_ends_it():
    o = Ownership("n1")
    o.set({1: 3}, [1], owner="n1@a")
    lease, _ = lease_of(o)
    taken = lease.take()
    o.set({1: 3}, [1], owner="n1@b")
    assert not lease.current(taken)


def test_the_lease_clock_runs_forward():
    a = boottime()
    assert boottime() >= a > 0
