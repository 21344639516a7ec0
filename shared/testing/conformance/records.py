"""What the recorder relies on from the record store (delayq.nodes.dispatch.ports.RecordStore),
held by the in-memory ClaimTable and by TaskStore on MySQL alike (docs/ARCHITECTURE.md,
invariants 2 and 4):

- what goes back to DELAY is due when the recorder says; it keeps its attempt number if the
  publish may have reached a queue, and gives it back if it never left the node;
- a release or record of an attempt that is not the task's current one changes nothing;
- a confirmed attempt's dispatch is recorded; one that expects no result (ttr 0) finishes with it.
"""
from __future__ import annotations

from delayq.lifecycle import Status
from delayq.store.values import Claimed, Entry
from delayq.testing.conformance.claims import ME, now
from delayq.testing.conformance.tables import NewRow, RowState, TaskTable


def claimed(tasks: TaskTable, row: NewRow, at_ms: int) -> Claimed:
    """The row written and claimed by ME at at_ms (ME holds its shard at epoch 7)."""
    tasks.grant(row.shard_id, ME, 7)
    entry = tasks.add(row)
    [claim] = tasks.claims.claim([entry], ME, {row.shard_id: 7}, at_ms).claimed
    return claim


class RecordStoreExpectations:
    """Run by a test class that provides the fixture `tasks`, a TaskTable."""

    def test_a_publish_that_never_left_goes_back_with_its_attempt_number(self, tasks: TaskTable):
        t = now()
        c = claimed(tasks, NewRow("a", 1, t), t)
        assert tasks.claims.release([c], t + 1000, False, ME, t) == 1
        assert tasks.row("a") == RowState(Status.DELAY, 0, t + 1000)
        [again] = tasks.claims.claim([tasks_entry("a", t + 1000)], ME, {1: 7}, t + 1000).claimed
        assert (again.attempt, again.due_ms) == (1, t + 1000)

    def test_a_publish_that_may_have_arrived_goes_back_as_a_used_attempt(self, tasks: TaskTable):
        t = now()
        c = claimed(tasks, NewRow("a", 1, t), t)
        assert tasks.claims.release([c], t + 1000, True, ME, t) == 1
        assert tasks.row("a") == RowState(Status.DELAY, 1, t + 1000)
        [again] = tasks.claims.claim([tasks_entry("a", t + 1000)], ME, {1: 7}, t + 1000).claimed
        assert (again.attempt, again.due_ms) == (2, t + 1000)

    def test_a_publish_that_may_have_arrived_is_in_the_history_and_one_that_never_left_is_not(self, tasks: TaskTable):
        # A time-out of an attempt never recorded as dispatched says so (UNRECORDED); one that
        # may have reached a queue was dispatched as far as its history goes.
        t = now()
        maybe, never = claimed(tasks, NewRow("maybe", 1, t), t), claimed(tasks, NewRow("never", 1, t), t)
        tasks.claims.release([maybe], t + 1000, True, ME, t)
        tasks.claims.release([never], t + 1000, False, ME, t)
        assert (tasks.dispatched("maybe", 1), tasks.dispatched("never", 1)) == (True, False)

    def test_a_release_of_an_attempt_no_longer_current_changes_nothing(self, tasks: TaskTable):
        t = now()
        first = claimed(tasks, NewRow("a", 1, t), t)
        tasks.claims.release([first], t, True, ME, t)
        [second] = tasks.claims.claim([tasks_entry("a", t)], ME, {1: 7}, t + 10).claimed
        for sent in (False, True):
            assert tasks.claims.release([first], t + 5000, sent, ME, t + 20) == 0
        assert tasks.row("a") == RowState(Status.READY, second.attempt, t)

    def test_a_release_of_a_task_not_in_flight_changes_nothing(self, tasks: TaskTable):
        t = now()
        c = claimed(tasks, NewRow("a", 1, t), t)
        assert tasks.claims.release([c], t + 1000, False, ME, t) == 1
        assert tasks.claims.release([c], t + 9000, False, ME, t) == 0
        assert tasks.row("a") == RowState(Status.DELAY, 0, t + 1000)

    def test_a_confirmed_attempt_is_recorded_and_stays_in_flight(self, tasks: TaskTable):
        t = now()
        c = claimed(tasks, NewRow("a", 1, t, ttr_ms=3000), t)
        assert tasks.claims.record_dispatched([(c, t + 5)], ME) == []
        assert tasks.dispatched("a", 1)
        assert tasks.row("a") == RowState(Status.READY, 1, t)

    def test_a_confirmed_attempt_that_expects_no_result_finishes(self, tasks: TaskTable):
        t = now()
        c = claimed(tasks, NewRow("a", 1, t, ttr_ms=0), t)
        assert tasks.claims.record_dispatched([(c, t + 5)], ME) == [c]
        assert tasks.dispatched("a", 1)
        assert tasks.row("a") == RowState(Status.FINISHED, 1, t)

    def test_a_late_confirm_of_an_earlier_attempt_finishes_nothing(self, tasks: TaskTable):
        t = now()
        first = claimed(tasks, NewRow("a", 1, t, ttr_ms=0), t)
        tasks.claims.release([first], t, True, ME, t)
        tasks.claims.claim([tasks_entry("a", t)], ME, {1: 7}, t + 10)
        assert tasks.claims.record_dispatched([(first, t + 20)], ME) == []
        assert tasks.row("a") == RowState(Status.READY, 2, t)


def tasks_entry(task_id: str, due_ms: int) -> Entry:
    """Memory's entry of a task written by these expectations (shard 1, topic t)."""
    return Entry(task_id, 1, due_ms, topic="t")
