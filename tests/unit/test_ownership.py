"""Unit tests for delayq.nodes.cluster.ownership: which shard a new task goes to (pure)."""
from __future__ import annotations

import collections
import random

import pytest

from delayq.nodes.cluster.ownership import Ownership


def _ownership(mine: set[int], every: range) -> Ownership:
    o = Ownership("n1", rng=random.Random(7))
    o.set({s: 1 for s in mine}, every)
    return o


def test_a_task_due_soon_goes_to_one_of_our_shards_and_a_later_one_to_any_evenly():
    o = _ownership({3, 5}, range(8))
    assert set(o.pick_shards([True] * 200)) == {3, 5}
    far = collections.Counter(o.pick_shards([False] * 8000))
    assert set(far) == set(range(8))
    assert min(far.values()) > 800                  # 1,000 each expected
    mixed = o.pick_shards([True, False] * 100)
    assert set(mixed[0::2]) <= {3, 5}


def test_while_claiming_is_suspended_a_task_due_soon_goes_to_any_shard():
    o = _ownership({3}, range(8))
    o.set_claimable(False)
    assert len(set(o.pick_shards([True] * 400))) > 1


def test_no_shards_at_all_is_refused():
    with pytest.raises(LookupError):
        Ownership("n1").pick_shards([False])
    assert _ownership({2}, range(0)).pick_shard(near=True) == 2     # ours, before the shard list arrives
