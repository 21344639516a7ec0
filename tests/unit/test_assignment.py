"""Unit and property-style tests for delayq.master.assignment (pure, no I/O)."""
from __future__ import annotations

import random
from collections import Counter

import pytest

from delayq.master.assignment import AssignmentInput, assign, balanced_assign, moves

SEEDS = range(300)
POOL = [f"n{i}" for i in range(8)]


def inp(shard_count, members, current=None, drained=(), pinned=None):
    return AssignmentInput(shard_count, frozenset(members), dict(current or {}),
                           frozenset(drained), dict(pinned or {}))


def counts(result):
    return Counter(result.values())


def moved(inp_, result):
    return sum(1 for s in range(inp_.shard_count) if inp_.current.get(s) != result.get(s))


def effective_pins(i):
    return {s: n for s, n in i.pinned.items() if 0 <= s < i.shard_count and n in i.members}


def random_input(rng, max_shards=40, max_nodes=6):
    shard_count = rng.randint(0, max_shards)
    members = set(rng.sample(POOL, rng.randint(0, max_nodes)))
    drained = {m for m in members if rng.random() < 0.2}
    if rng.random() < 0.2:
        drained.add(rng.choice(POOL))  # draining a non-member is harmless
    current = {s: rng.choice(POOL) for s in range(shard_count + 5) if rng.random() < 0.85}
    pinned = {rng.randrange(shard_count + 3): rng.choice(POOL)
              for _ in range(rng.choice([0, 0, 1, 2, 4]))}
    return inp(shard_count, members, current, drained, pinned)


def compositions(total, parts):
    if parts == 1:
        yield (total,)
        return
    for first in range(total + 1):
        for rest in compositions(total - first, parts - 1):
            yield (first, *rest)


def oracle(i):
    """Brute force: (min sum of squared totals, min moves) over all balanced splits."""
    pins = effective_pins(i)
    elig = sorted(i.members - i.drained)
    pin_moves = sum(1 for s, n in pins.items() if i.current.get(s) != n)
    free = [s for s in range(i.shard_count) if s not in pins]
    p = [sum(1 for n in pins.values() if n == e) for e in elig]
    held = [sum(1 for s in free if i.current.get(s) == e) for e in elig]
    best = None
    for f in compositions(len(free), len(elig)):
        sq = sum((a + b) ** 2 for a, b in zip(p, f))
        keep = sum(min(a, b) for a, b in zip(f, held))
        if best is None or sq < best[0] or (sq == best[0] and keep > best[1]):
            best = (sq, keep)
    return best[0], pin_moves + len(free) - best[1]


def check_invariants(i, result):
    pins = effective_pins(i)
    elig = i.members - i.drained
    if not elig:
        assert result == pins
        return
    # 1. total, only eligible nodes (or pin targets)
    assert sorted(result) == list(range(i.shard_count))
    for s, n in result.items():
        assert n == pins[s] if s in pins else n in elig
    # 2. balance: a node owning a free shard has at most 1 more than any eligible node
    totals = {n: 0 for n in elig} | {n: c for n, c in counts(result).items() if n in elig}
    free_owned = Counter(n for s, n in result.items() if s not in pins)
    for a in elig:
        if free_owned[a]:
            assert all(totals[a] <= totals[b] + 1 for b in elig), (totals, pins)
    # 3. sticky: a node that lost a free shard gained no free shard
    for s, n in result.items():
        old = i.current.get(s)
        if s not in pins and old in elig and old != n:
            gained = [t for t, m in result.items()
                      if m == old and t not in pins and i.current.get(t) != old]
            assert not gained


# ---------------------------------------------------------------- examples

def test_no_members_or_all_drained_or_zero_shards():
    assert assign(inp(8, [])) == {}
    assert assign(inp(8, ["a", "b"], drained=["a", "b"])) == {}
    assert assign(inp(0, ["a"], {0: "a"})) == {}


def test_all_drained_keeps_pins_to_drained_members():
    assert assign(inp(4, ["a"], drained=["a"], pinned={2: "a", 3: "x"})) == {2: "a"}


def test_negative_shard_count_rejected():
    with pytest.raises(ValueError):
        assign(inp(-1, ["a"]))
    with pytest.raises(ValueError):
        balanced_assign(-1, {"a"})


def test_fresh_assignment_is_balanced():
    result = assign(inp(10, ["c", "a", "b"]))
    assert sorted(counts(result).values()) == [3, 3, 4]
    assert counts(result)["a"] == 4  # extra by node id when loads tie


def test_join_moves_exactly_floor_ceil_onto_new_node():
    before = assign(inp(64, ["a", "b", "c"]))
    assert sorted(counts(before).values()) == [21, 21, 22]
    after = assign(inp(64, ["a", "b", "c", "d"], before))
    delta = moves(before, after)
    assert len(delta) == 16
    assert all(new == "d" for _, new in delta.values())
    assert set(counts(after).values()) == {16}


def test_leave_moves_only_departed_nodes_shards():
    before = assign(inp(64, ["a", "b", "c", "d"]))
    after = assign(inp(64, ["a", "b", "c"], before))
    delta = moves(before, after)
    assert len(delta) == 16 and all(old == "d" for old, _ in delta.values())
    assert sorted(counts(after).values()) == [21, 21, 22]


def test_drain_moves_only_drained_nodes_shards():
    before = assign(inp(30, ["a", "b", "c"]))
    after = assign(inp(30, ["a", "b", "c"], before, drained=["b"]))
    delta = moves(before, after)
    assert len(delta) == 10 and all(old == "b" for old, _ in delta.values())
    assert "b" not in after.values()
    assert counts(after) == {"a": 15, "c": 15}


def test_stable_input_moves_nothing():
    before = {s: "abc"[s % 3] for s in range(12)}
    assert assign(inp(12, ["a", "b", "c"], before)) == before


def test_extra_shard_goes_to_node_already_holding_more():
    current = {**{s: "b" for s in range(6)}, **{s: "a" for s in range(6, 10)}}
    result = assign(inp(11, ["a", "b"], current))  # 11 = 6 + 5
    assert counts(result) == {"b": 6, "a": 5}
    assert moved(inp(11, ["a", "b"], current), result) == 1  # only unowned shard 10


def test_extra_shard_tie_broken_by_node_id():
    current = {0: "b", 1: "a"}
    assert counts(assign(inp(3, ["b", "a"], current))) == {"a": 2, "b": 1}


def test_pin_wins_and_reduces_free_share():
    result = assign(inp(12, ["a", "b", "c"], pinned={0: "a", 1: "a", 2: "a"}))
    assert all(result[s] == "a" for s in range(3))
    assert counts(result) == {"a": 4, "b": 4, "c": 4}


def test_pins_win_over_balance():
    result = assign(inp(6, ["a", "b"], pinned={s: "a" for s in range(5)}))
    assert counts(result) == {"a": 5, "b": 1}


def test_pin_to_absent_node_or_out_of_range_ignored():
    result = assign(inp(4, ["a", "b"], pinned={0: "zz", 9: "a"}))
    assert counts(result) == {"a": 2, "b": 2}


def test_pin_to_drained_node_wins_over_drain():
    result = assign(inp(6, ["a", "b", "c"], drained=["c"], pinned={5: "c"}))
    assert result[5] == "c"
    assert counts(result) == {"a": 3, "b": 2, "c": 1}  # extra to "a" by node id


def test_shards_beyond_count_ignored_and_missing_unowned():
    current = {0: "a", 1: "a", 7: "b", 8: "b", 9: "b"}
    i = inp(4, ["a", "b"], current)
    result = assign(i)
    assert sorted(result) == [0, 1, 2, 3]
    assert result[0] == result[1] == "a" and result[2] == result[3] == "b"


def test_dead_owners_shards_reassigned():
    i = inp(6, ["a", "b"], {s: "dead" for s in range(6)})
    assert counts(assign(i)) == {"a": 3, "b": 3}


def test_deterministic_regardless_of_mapping_order():
    current = {s: POOL[s % 5] for s in range(50)}
    pinned = {3: "n1", 7: "n6"}
    a = inp(40, ["n0", "n1", "n2", "n6"], current, ["n2"], pinned)
    b = inp(40, ["n6", "n2", "n1", "n0"], dict(reversed(list(current.items()))),
            ["n2"], dict(reversed(list(pinned.items()))))
    assert assign(a) == assign(b)
    assert list(assign(a)) == sorted(assign(a))


# ---------------------------------------------------------------- moves / balanced_assign

def test_moves():
    before = {0: "a", 1: "b", 2: "c", 5: "x"}
    after = {0: "a", 1: "c", 3: "d"}
    assert moves(before, after) == {1: ("b", "c"), 2: ("c", None), 3: (None, "d"), 5: ("x", None)}
    assert moves(after, after) == {}


def test_balanced_assign_round_robin_sorted():
    assert balanced_assign(5, {"b", "a"}) == {0: "a", 1: "b", 2: "a", 3: "b", 4: "a"}
    assert balanced_assign(5, set()) == {}


@pytest.mark.parametrize("seed", range(50))
def test_balanced_assign_is_stable_under_assign(seed):
    rng = random.Random(seed)
    members = frozenset(rng.sample(POOL, rng.randint(1, 6)))
    shard_count = rng.randint(0, 100)
    fresh = balanced_assign(shard_count, members)
    assert assign(inp(shard_count, members, fresh)) == fresh


# ---------------------------------------------------------------- properties

@pytest.mark.parametrize("seed", SEEDS)
def test_random_invariants_idempotent_deterministic(seed):
    i = random_input(random.Random(seed), max_shards=120, max_nodes=8)
    result = assign(i)
    check_invariants(i, result)
    assert assign(i) == result
    again = AssignmentInput(i.shard_count, i.members, result, i.drained, i.pinned)
    assert moves(result, assign(again)) == {}


@pytest.mark.parametrize("seed", SEEDS)
def test_random_small_matches_bruteforce_optimum(seed):
    i = random_input(random.Random(10_000 + seed), max_shards=12, max_nodes=4)
    result = assign(i)
    check_invariants(i, result)
    if not i.members - i.drained:
        return
    best_sq, min_moves = oracle(i)
    totals = Counter(r for r in result.values() if r in i.members - i.drained)
    assert sum(c * c for c in totals.values()) == best_sq
    assert moved(i, result) == min_moves


@pytest.mark.parametrize("seed", range(100))
def test_random_join_leave_drain_move_minimum(seed):
    rng = random.Random(20_000 + seed)
    shard_count = rng.randint(1, 200)
    members = set(rng.sample(POOL[:-1], rng.randint(1, 6)))
    base = assign(inp(shard_count, members))
    n = len(members)
    # join: the new node takes exactly floor(S / (n+1)) shards (the minimum), nothing else moves
    joined = assign(inp(shard_count, members | {POOL[-1]}, base))
    delta = moves(base, joined)
    assert all(new == POOL[-1] for _, new in delta.values())
    assert len(delta) == shard_count // (n + 1)
    # leave / drain: only the victim's shards move
    victim = rng.choice(sorted(members))
    for after in (assign(inp(shard_count, members - {victim}, base)),
                  assign(inp(shard_count, members, base, drained=[victim]))):
        delta = moves(base, after)
        if n == 1:
            assert after == {}
            continue
        assert len(delta) == counts(base)[victim]
        assert all(old == victim for old, _ in delta.values())
