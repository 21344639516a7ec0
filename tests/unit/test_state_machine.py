"""Unit tests for delayq.lifecycle: the task state machine and the retry rule (pure)."""
from __future__ import annotations

import itertools
import random

import pytest

from delayq.lifecycle import (FINAL, IN_FLIGHT, LIVE, TRANSITIONS, Decision, Result, RetryPolicy, Status,
                              can_move, on_result)

NOW = 1_000_000
EXP = RetryPolicy(max_retries=2, backoff="exponential", base_ms=1000, max_ms=300_000)
FIXED = RetryPolicy(max_retries=2, backoff="fixed", base_ms=1000, max_ms=300_000)
AGAIN = (Result.RETRY, Result.TIMEOUT, Result.UNROUTABLE)   # results that ask for another attempt


# ---------------------------------------------------------------- states and transitions


def test_state_sets_partition_the_statuses():
    assert LIVE | FINAL == set(Status)
    assert not LIVE & FINAL
    assert IN_FLIGHT == {Status.READY, Status.RUNNING}
    assert IN_FLIGHT < LIVE
    assert set(TRANSITIONS) == set(Status)


def test_status_values_match_the_stored_integers():
    assert [(s.name, int(s)) for s in Status] == [("DELAY", 0), ("READY", 1), ("RUNNING", 2),
                                                   ("FINISHED", 3), ("FAILED", 4), ("CANCELLED", 5)]


@pytest.mark.parametrize("final", sorted(FINAL))
def test_final_states_have_no_transitions(final):
    assert TRANSITIONS[final] == frozenset()
    assert not any(can_move(final, dst) for dst in Status)


def test_live_states_have_transitions():
    for s in LIVE:
        assert TRANSITIONS[s], s


EXPECTED_MOVES = {
    (Status.DELAY, Status.READY), (Status.DELAY, Status.CANCELLED),
    (Status.READY, Status.RUNNING), (Status.READY, Status.FINISHED), (Status.READY, Status.FAILED),
    (Status.READY, Status.DELAY), (Status.READY, Status.CANCELLED),
    (Status.RUNNING, Status.FINISHED), (Status.RUNNING, Status.FAILED), (Status.RUNNING, Status.DELAY),
    (Status.RUNNING, Status.CANCELLED),
}


@pytest.mark.parametrize("src, dst", list(itertools.product(Status, Status)))
def test_can_move(src, dst):
    assert can_move(src, dst) is ((src, dst) in EXPECTED_MOVES)


def test_no_self_transitions_and_no_way_back_to_ready_from_running():
    assert not any(can_move(s, s) for s in Status)
    assert not can_move(Status.RUNNING, Status.READY)
    assert not can_move(Status.DELAY, Status.RUNNING)
    assert not can_move(Status.DELAY, Status.FINISHED)


# ---------------------------------------------------------------- on_result


@pytest.mark.parametrize("status", sorted(FINAL))
@pytest.mark.parametrize("result", list(Result))
def test_on_result_changes_nothing_once_final(status, result):
    assert on_result(status, result, 1, EXP, NOW, random.Random(0)) is None


@pytest.mark.parametrize("result", [r for r in Result if r not in (Result.SUCCESS, Result.FATAL)])
def test_a_task_waiting_to_be_sent_again_ignores_all_but_a_verdict(result):
    assert on_result(Status.DELAY, result, 1, EXP, NOW, random.Random(0)) is None


def test_a_late_verdict_settles_a_task_waiting_to_be_sent_again():
    # Its confirm was lost or its time-to-run ran out, yet the consumer did the work.
    assert on_result(Status.DELAY, Result.SUCCESS, 1, EXP, NOW) == Decision(Status.FINISHED)
    assert on_result(Status.DELAY, Result.FATAL, 1, EXP, NOW) == Decision(Status.FAILED)


@pytest.mark.parametrize("status", sorted(IN_FLIGHT))
def test_success_finishes(status):
    assert on_result(status, Result.SUCCESS, 1, EXP, NOW) == Decision(Status.FINISHED)


@pytest.mark.parametrize("status", sorted(IN_FLIGHT))
@pytest.mark.parametrize("attempt", [1, 2, 3])
def test_fatal_fails_whatever_the_retries_left(status, attempt):
    assert on_result(status, Result.FATAL, attempt, EXP, NOW) == Decision(Status.FAILED)


def test_started_moves_ready_to_running_only():
    assert on_result(Status.READY, Result.STARTED, 1, EXP, NOW) == Decision(Status.RUNNING)
    assert on_result(Status.RUNNING, Result.STARTED, 1, EXP, NOW) is None   # duplicate report


@pytest.mark.parametrize("status", sorted(IN_FLIGHT))
@pytest.mark.parametrize("result", AGAIN)
def test_retry_like_results_go_back_to_delay_with_a_due_time(status, result):
    d = on_result(status, result, 1, FIXED, NOW)
    assert d == Decision(Status.DELAY, NOW + 1000)


@pytest.mark.parametrize("status", sorted(IN_FLIGHT))
@pytest.mark.parametrize("result", list(Result))
def test_every_decision_is_an_allowed_transition(status, result):
    for attempt in (1, 2, 3, 4):
        d = on_result(status, result, attempt, EXP, NOW, random.Random(attempt))
        if d is not None:
            assert can_move(status, d.status), (status, result, attempt, d)
            assert (d.due_ms is not None) == (d.status is Status.DELAY)


@pytest.mark.parametrize("result", AGAIN)
def test_max_retries_two_allows_three_dispatches(result):
    # attempt = dispatches made so far.
    assert on_result(Status.RUNNING, result, 1, FIXED, NOW).status is Status.DELAY
    assert on_result(Status.RUNNING, result, 2, FIXED, NOW).status is Status.DELAY
    assert on_result(Status.RUNNING, result, 3, FIXED, NOW) == Decision(Status.FAILED)
    assert on_result(Status.READY, result, 3, FIXED, NOW) == Decision(Status.FAILED)
    assert on_result(Status.RUNNING, result, 4, FIXED, NOW) == Decision(Status.FAILED)


def test_max_retries_zero_fails_after_the_first_dispatch():
    policy = RetryPolicy(max_retries=0, backoff="fixed", base_ms=10, max_ms=10)
    assert on_result(Status.RUNNING, Result.RETRY, 1, policy, NOW) == Decision(Status.FAILED)


def test_dispatch_count_simulation():
    """Walk a task that always asks for a retry: it is dispatched max_retries + 1 times."""
    for max_retries in range(0, 6):
        policy = RetryPolicy(max_retries, "exponential", 100, 10_000)
        status, attempt, dispatches, now = Status.DELAY, 0, 0, NOW
        rng = random.Random(max_retries)
        while status not in FINAL:
            assert status is Status.DELAY
            status, attempt, dispatches = Status.READY, attempt + 1, dispatches + 1
            d = on_result(status, Result.RETRY, attempt, policy, now, rng)
            assert d is not None
            if d.status is Status.DELAY:
                assert d.due_ms > now
                now = d.due_ms
            status = d.status
        assert status is Status.FAILED
        assert dispatches == max_retries + 1


def test_retry_due_uses_the_exponential_backoff_for_the_attempt():
    for attempt in (1, 2):
        d = on_result(Status.RUNNING, Result.RETRY, attempt, EXP, NOW, random.Random(7))
        assert d.due_ms == NOW + EXP.delay_ms(attempt, random.Random(7))


# ---------------------------------------------------------------- RetryPolicy.delay_ms


def test_an_attempt_that_timed_out_unsent_goes_again_at_once_and_only_a_time_out_does():
    rng = random.Random(3)
    assert on_result(Status.READY, Result.TIMEOUT, 1, EXP, NOW, rng, unsent=True) == Decision(Status.DELAY, NOW)
    assert on_result(Status.READY, Result.RETRY, 1, EXP, NOW, rng, unsent=True).due_ms >= NOW + 500
    assert on_result(Status.READY, Result.TIMEOUT, 1, EXP, NOW, rng).due_ms >= NOW + 500
    assert on_result(Status.READY, Result.TIMEOUT, 3, EXP, NOW, rng, unsent=True) == Decision(Status.FAILED)


def test_fixed_backoff_ignores_attempt_and_rng():
    for attempt in (0, 1, 2, 10, 100):
        assert FIXED.delay_ms(attempt, random.Random(attempt)) == 1000
    assert RetryPolicy(1, "fixed", 5000, 3000).delay_ms(1) == 3000    # capped at max_ms


def full(policy: RetryPolicy, attempt: int) -> int:
    return min(policy.max_ms, policy.base_ms * 2 ** (attempt - 1))


@pytest.mark.parametrize("attempt", range(1, 14))
def test_exponential_within_equal_jitter_bounds(attempt):
    rng = random.Random(attempt * 31)
    f = full(EXP, attempt)
    values = [EXP.delay_ms(attempt, rng) for _ in range(300)]
    assert all(f // 2 <= v <= f for v in values), (attempt, f, min(values), max(values))
    assert len(set(values)) > 1          # jittered, not constant


def test_exponential_doubles_per_attempt():
    policy = RetryPolicy(10, "exponential", 1000, 10**9)
    for attempt in range(1, 10):
        f = 1000 * 2 ** (attempt - 1)
        values = [policy.delay_ms(attempt, random.Random(seed)) for seed in range(200)]
        assert f // 2 <= min(values) and max(values) <= f
        # The upper half of the range is reached: it really doubles, not just stays within bounds.
        assert max(values) > 0.9 * f
        assert min(values) < 0.6 * f


def test_exponential_capped_at_max():
    policy = RetryPolicy(100, "exponential", 1000, 5000)
    for attempt in (4, 5, 10, 31, 100, 10_000):
        values = [policy.delay_ms(attempt, random.Random(seed)) for seed in range(100)]
        assert all(2500 <= v <= 5000 for v in values), attempt
    assert max(policy.delay_ms(50, random.Random(s)) for s in range(200)) > 4500


def test_exponential_first_attempt_is_base():
    policy = RetryPolicy(3, "exponential", 1000, 300_000)
    values = {policy.delay_ms(1, random.Random(s)) for s in range(200)}
    assert min(values) >= 500 and max(values) <= 1000
    assert policy.delay_ms(0, random.Random(1)) <= 1000    # attempt 0 treated like attempt 1


def test_exponential_is_reproducible_with_a_seeded_rng():
    a = [EXP.delay_ms(k, random.Random(42)) for k in range(1, 8)]
    b = [EXP.delay_ms(k, random.Random(42)) for k in range(1, 8)]
    assert a == b


def test_exponential_with_zero_base_is_zero():
    assert RetryPolicy(3, "exponential", 0, 1000).delay_ms(5, random.Random(0)) == 0


# ---------------------------------------------------------------- a cancel asked while an attempt ran


@pytest.mark.parametrize("status", sorted(IN_FLIGHT))
@pytest.mark.parametrize("result", [*AGAIN, Result.FATAL, Result.MISFIRED])
def test_a_cancel_asked_while_running_ends_the_task_cancelled_instead_of_a_retry_or_a_failure(status, result):
    assert on_result(status, result, 1, EXP, NOW, cancelled=True) == Decision(Status.CANCELLED)
    assert on_result(status, result, 3, EXP, NOW, cancelled=True) == Decision(Status.CANCELLED)   # last retry too


@pytest.mark.parametrize("status", sorted(IN_FLIGHT))
def test_an_attempt_that_succeeds_after_a_cancel_was_asked_still_finishes(status):
    assert on_result(status, Result.SUCCESS, 1, EXP, NOW, cancelled=True) == Decision(Status.FINISHED)


def test_a_cancel_asked_while_running_leaves_started_and_late_reports_alone():
    assert on_result(Status.READY, Result.STARTED, 1, EXP, NOW, cancelled=True) == Decision(Status.RUNNING)
    assert on_result(Status.DELAY, Result.RETRY, 1, EXP, NOW, cancelled=True) is None
