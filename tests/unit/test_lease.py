"""ClaimLease: a claim may be published only within its lease, with no session break since, and
while its shard is still ours at the epoch it was claimed under."""
from delayq.nodes.dispatch.lease import BROKEN, MOVED, WAITED, ClaimLease, boottime
from delayq.nodes.cluster.ownership import Ownership


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
    assert lease.current(taken, [1, 2])
    clock.t += 0.001
    assert lease.refusal(taken, [1]) == WAITED


def test_a_session_suspension_since_the_claim_ends_it_even_after_resuming():
    o = Ownership("n1")
    o.set({1: 3}, [1])
    lease, _ = lease_of(o)
    taken = lease.take()
    o.set_claimable(False)
    o.set_claimable(True)
    assert lease.refusal(taken, [1]) == BROKEN
    assert lease.current(lease.take(), [1])


def test_losing_its_shard_or_a_new_epoch_of_it_ends_it_and_other_changes_do_not():
    o = Ownership("n1")
    o.set({1: 3, 2: 3}, [1, 2, 3])
    lease, _ = lease_of(o)
    taken = lease.take()
    o.set({1: 3, 2: 3, 3: 4}, [1, 2, 3])
    assert lease.current(taken, [1, 2])
    o.set({1: 3, 2: 5, 3: 4}, [1, 2, 3])
    assert lease.refusal(taken, [2]) == MOVED
    assert lease.current(taken, [1])        # a claim of shard 1 is not touched by shard 2's move
    o.set({2: 5, 3: 4}, [1, 2, 3])
    assert lease.refusal(taken, [1]) == MOVED


def test_split_keeps_the_current_claims_and_sorts_the_others_by_reason():
    o = Ownership("n1")
    o.set({1: 3, 2: 3}, [1, 2])
    lease, clock = lease_of(o)
    taken = lease.take()
    tasks = [Task("a", 1), Task("b", 2), Task("c", 1)]
    o.set({1: 3}, [1, 2])
    current, refused = lease.split([(t, taken) for t in tasks])
    assert [t.name for t, _ in current] == ["a", "c"] and [t.name for t in refused[MOVED]] == ["b"]
    assert lease.refusal_of([(t, taken) for t in tasks]) == MOVED
    clock.t += 2
    current, refused = lease.split([(t, taken) for t in tasks])
    assert current == [] and [t.name for t in refused[WAITED]] == ["a", "b", "c"]


class Task:
    def __init__(self, name: str, shard_id: int):
        self.name, self.shard_id = name, shard_id


def test_a_new_session_owner_name_ends_it():
    o = Ownership("n1")
    o.set({1: 3}, [1], owner="n1@a")
    lease, _ = lease_of(o)
    taken = lease.take()
    o.set({1: 3}, [1], owner="n1@b")
    assert lease.refusal(taken, [1]) == MOVED


def test_the_lease_clock_runs_forward():
    a = boottime()
    assert boottime() >= a > 0
