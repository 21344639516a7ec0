"""The consumer helper's heartbeats (delayq.client.heartbeats) on times the test sets: when it
touches, what it asks for, what each answer does, and ATF's rule of three failures."""
from __future__ import annotations

import pytest
from thrift.transport.TTransport import TTransportException

from delayq.client.gen.delayq_thrift import ttypes
from delayq.client.heartbeats import MAX_EXTEND_MS, AttemptState, Heartbeat


class Node:
    """touch as a node answers it: the answers queued by the test, else an extension."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int, bytes | None]] = []
        self.answers: list[object] = []

    def touch(self, task_id, attempt, extend_ms, progress):
        self.calls.append((task_id, attempt, extend_ms, progress))
        answer = self.answers.pop(0) if self.answers else ttypes.TouchResult(cancelled=False, deadlineMs=0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def beating(ttr_ms: int = 2000, waited_ms: int = 0, started: float = 100.0):
    node, state = Node(), AttemptState()
    return Heartbeat("t-1", 3, ttr_ms, node.touch, state, started, waited_ms), node, state


def run_until(beat: Heartbeat, end: float) -> list[float]:
    """Call beat() at each next_at up to `end`; the times it was called at."""
    at = []
    while beat.next_at is not None and beat.next_at <= end:
        at.append(beat.next_at)
        beat.beat(beat.next_at)
    return at


def test_nothing_before_half_the_ttr_then_every_half_ttr_asking_for_twice_the_ttr():
    beat, node, _ = beating(ttr_ms=2000)
    beat.beat(100.999)
    assert node.calls == []
    assert run_until(beat, 103.0) == [101.0, 102.0, 103.0]
    assert node.calls == [("t-1", 3, 4000, None)] * 3
    assert beat.deadline == 103.0 + 4.0


def test_a_message_that_waited_in_the_prefetch_is_touched_sooner():
    beat, node, _ = beating(ttr_ms=2000, waited_ms=1500)
    assert beat.next_at == 100.0 and beat.deadline == 100.5
    beat, node, _ = beating(ttr_ms=2000, waited_ms=600)
    assert beat.next_at == pytest.approx(100.4)


def test_the_extension_is_bounded_by_what_a_node_accepts():
    beat, _, _ = beating(ttr_ms=24 * 3600 * 1000)
    assert beat.extend_ms == MAX_EXTEND_MS and beat.period_s == MAX_EXTEND_MS / 4000


def test_no_ttr_no_heartbeats():
    beat, node, _ = beating(ttr_ms=0)
    assert beat.next_at is None
    beat.beat(1e9)
    assert node.calls == []


def test_progress_goes_with_the_next_heartbeat_once():
    beat, node, state = beating()
    state.set_progress(b"40%")
    run_until(beat, 102.0)
    assert [c[3] for c in node.calls] == [b"40%", None]
    with pytest.raises(ValueError):
        state.set_progress(b"x" * 1025)


def test_cancelled_tells_the_handler_and_heartbeats_go_on():
    beat, node, state = beating()
    node.answers = [ttypes.TouchResult(cancelled=True, deadlineMs=0)]
    run_until(beat, 101.0)
    assert state.cancelled.is_set() and state.why == "cancelled"
    assert beat.next_at == 102.0


@pytest.mark.parametrize("answer", [ttypes.StaleAttempt(taskId="t-1", attempt=3, reason="timed out"),
                                    ttypes.NotFound(taskId="t-1")])
def test_a_stale_attempt_tells_the_handler_and_heartbeats_stop(answer):
    beat, node, state = beating()
    node.answers = [answer]
    run_until(beat, 110.0)
    assert state.cancelled.is_set() and state.why == "stale"
    assert beat.next_at is None and not beat.lost and len(node.calls) == 1


def test_three_failures_in_a_row_give_the_attempt_up_before_its_deadline():
    beat, node, state = beating(ttr_ms=2000)
    run_until(beat, 101.0)                   # one success: deadline 105.0
    node.answers = [TTransportException(message="refused")] * 3
    at = run_until(beat, 200.0)
    assert at == [102.0, 103.0, 104.0] and max(at) < 105.0
    assert beat.lost and state.cancelled.is_set() and state.why == "heartbeats failed"
    assert beat.next_at is None


def test_failures_before_any_success_still_fall_before_the_first_deadline():
    beat, node, state = beating(ttr_ms=6000)         # deadline 106.0, first touch at 103.0
    node.answers = [OSError("unreachable")] * 3
    at = run_until(beat, 200.0)
    assert at == pytest.approx([103.0, 104.0, 105.0]) and beat.lost


def test_a_success_resets_the_count():
    beat, node, state = beating()
    node.answers = [OSError("x"), OSError("x"), ttypes.TouchResult(cancelled=False, deadlineMs=0),
                    OSError("x"), OSError("x")]
    run_until(beat, 110.0)
    assert not beat.lost and beat.failures == 0


def test_unavailable_is_not_a_failure_and_is_asked_again_soon():
    beat, node, state = beating(ttr_ms=10_000)
    node.answers = [ttypes.Unavailable(reason="MySQL down")] * 5
    at = run_until(beat, 110.0)
    assert at[:6] == pytest.approx([105.0, 106.0, 107.0, 108.0, 109.0, 110.0])
    assert not beat.lost and beat.failures == 0 and not state.cancelled.is_set()


def test_progress_not_stored_goes_again_unless_newer_was_set():
    beat, node, state = beating()
    state.set_progress(b"1")
    node.answers = [OSError("x")]
    beat.beat(101.0)
    beat.beat(beat.next_at)
    assert [c[3] for c in node.calls] == [b"1", b"1"]
    node.answers = [OSError("x")]
    state.set_progress(b"2")
    beat.beat(beat.next_at)                  # sends "2", fails
    state.set_progress(b"3")                 # newer than what failed
    beat.beat(beat.next_at)
    assert [c[3] for c in node.calls][2:] == [b"2", b"3"]


def test_the_helper_asks_for_no_more_than_a_node_grants():
    from delayq.nodes.validation import MAX_EXTEND_MS as NODE_MAX, MAX_PROGRESS_BYTES as NODE_PROGRESS
    from delayq.client.heartbeats import MAX_PROGRESS_BYTES
    assert (MAX_EXTEND_MS, MAX_PROGRESS_BYTES) == (NODE_MAX, NODE_PROGRESS)
