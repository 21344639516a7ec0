"""What the node's time-outs rely on from the rows of attempts in flight
(delayq.store.overdue.OverdueRows, read by delayq.nodes.outcomes.deadlines and .expiry), held by
the in-memory ClaimTable and by MySQL alike (docs/ARCHITECTURE.md, invariant 5):

- an attempt is overdue once its time-to-run has passed since its claim, not before;
- a fire-and-forget attempt (ttr 0) is never overdue to the node that claimed it (its publisher
  settles it), and to another node only once it stayed unconfirmed for the grace
  (delayq.store.tasks.UNCONFIRMED_GRACE_MS);
- what is back in DELAY is not in flight.
"""
from __future__ import annotations

from delayq.store.overdue import Attempt, AttemptDeadline
from delayq.store.tasks import UNCONFIRMED_GRACE_MS
from delayq.testing.conformance.claims import ME, OTHER, now
from delayq.testing.conformance.records import claimed
from delayq.testing.conformance.tables import NewRow, TaskTable


class OverdueExpectations:
    """Run by a test class that provides the fixture `tasks`, a TaskTable."""

    def test_an_attempt_is_overdue_once_its_time_to_run_passed(self, tasks: TaskTable):
        t = now()
        claimed(tasks, NewRow("a", 1, t, ttr_ms=3000), t)
        assert tasks.overdue.expired({1}, t + 3000, 10, ME) == []
        assert tasks.overdue.expired({1}, t + 3001, 10, ME) == [Attempt("a", 1)]
        assert tasks.overdue.expired({2}, t + 3001, 10, ME) == []

    def test_the_deadlines_of_attempts_in_flight_are_their_claims_plus_their_time_to_run(self, tasks: TaskTable):
        t = now()
        claimed(tasks, NewRow("a", 1, t, ttr_ms=3000), t)
        tasks.add(NewRow("waiting", 1, t + 60_000))
        assert tasks.overdue.deadlines(["a", "waiting", "never"]) == [AttemptDeadline("a", 1, t + 3000)]

    def test_a_fire_and_forget_attempt_is_overdue_to_another_node_only_after_the_grace(self, tasks: TaskTable):
        t = now()
        claimed(tasks, NewRow("a", 1, t, ttr_ms=0), t)
        assert tasks.overdue.expired({1}, t + UNCONFIRMED_GRACE_MS, 10, OTHER) == []
        assert tasks.overdue.expired({1}, t + UNCONFIRMED_GRACE_MS + 1, 10, OTHER) == [Attempt("a", 1)]
        assert tasks.overdue.expired({1}, t + 60_000, 10, ME) == []

    def test_an_attempt_put_back_is_no_longer_in_flight(self, tasks: TaskTable):
        t = now()
        c = claimed(tasks, NewRow("a", 1, t, ttr_ms=3000), t)
        tasks.claims.release([c], t + 1000, True, ME, t)
        assert tasks.overdue.expired({1}, t + 60_000, 10, ME) == []
        assert tasks.overdue.deadlines(["a"]) == []

    def test_no_more_than_the_limit_is_read(self, tasks: TaskTable):
        t = now()
        for i in range(3):
            claimed(tasks, NewRow(f"a{i}", 1, t, ttr_ms=1000), t)
        assert len(tasks.overdue.expired({1}, t + 2000, 2, ME)) == 2
