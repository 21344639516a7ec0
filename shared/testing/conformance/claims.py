"""What the dispatcher relies on from a claim (delayq.nodes.dispatch.ports.ClaimStore), held by
the in-memory ClaimTable and by TaskStore on MySQL alike (docs/ARCHITECTURE.md, invariants 2, 3
and 9):

- only DELAY tasks of shards the node holds at the epoch it names are claimed, each as its next
  attempt; a stale epoch or another owner claims nothing and names the shard as fenced;
- a claimed attempt is not claimed again; a row re-timed later than memory's entry is not due;
- a capped topic keeps its earliest tasks up to its room, the rest stay DELAY (deferred);
- a KEEP_IF_ACTIVE key has one attempt in flight: the second task waits, still DELAY;
- a claim undone (its answer lost) gives the attempt back, but only where nothing touched it.
"""
from __future__ import annotations

import time

from delayq.lifecycle import Status
from delayq.store.values import Entry
from delayq.testing.conformance.tables import NewRow, RowState, TaskTable

ME, OTHER = "n1@100", "n2@200"


def now() -> int:
    """A time of today: MySQL keeps execlog and backlog rows in day partitions."""
    return time.time_ns() // 1_000_000


class ClaimStoreExpectations:
    """Run by a test class that provides the fixture `tasks`, a TaskTable."""

    def test_a_claim_takes_due_tasks_of_held_shards_as_their_next_attempt(self, tasks: TaskTable):
        t = now()
        tasks.grant(1, ME, 7)
        entry = tasks.add(NewRow("a", 1, t, topic="orders", ttr_ms=5000, key=b"k"))
        claim = tasks.claims.claim([entry], ME, {1: 7}, t)
        assert [(c.task_id, c.topic, c.shard_id, c.due_ms, c.attempt, c.ttr_ms, c.key) for c in claim.claimed] == \
            [("a", "orders", 1, t, 1, 5000, b"k")]
        assert claim.fenced == []
        assert tasks.row("a") == RowState(Status.READY, 1, t)

    def test_a_claim_at_a_stale_epoch_claims_nothing_and_names_the_shard_fenced(self, tasks: TaskTable):
        t = now()
        tasks.grant(1, ME, 8)
        entry = tasks.add(NewRow("a", 1, t))
        claim = tasks.claims.claim([entry], ME, {1: 7}, t)
        assert (claim.claimed, claim.fenced) == ([], [1])
        assert tasks.row("a") == RowState(Status.DELAY, 0, t)

    def test_a_claim_of_a_shard_another_node_holds_claims_nothing(self, tasks: TaskTable):
        t = now()
        tasks.grant(1, OTHER, 7)
        tasks.grant(2, ME, 7)
        mine, theirs = tasks.add(NewRow("mine", 2, t)), tasks.add(NewRow("theirs", 1, t))
        claim = tasks.claims.claim([mine, theirs], ME, {1: 7, 2: 7}, t)
        assert ([c.task_id for c in claim.claimed], claim.fenced) == (["mine"], [1])
        assert tasks.row("theirs") == RowState(Status.DELAY, 0, t)

    def test_entries_of_shards_outside_the_fence_are_neither_claimed_nor_fenced(self, tasks: TaskTable):
        # The dispatcher hands such entries over itself: they are no shard of its lease.
        t = now()
        tasks.grant(1, ME, 7)
        entry = tasks.add(NewRow("a", 1, t))
        claim = tasks.claims.claim([entry], ME, {2: 7}, t)
        assert (claim.claimed, claim.fenced) == ([], [])
        assert tasks.row("a") == RowState(Status.DELAY, 0, t)

    def test_a_claimed_attempt_is_not_claimed_again(self, tasks: TaskTable):
        t = now()
        tasks.grant(1, ME, 7)
        entry = tasks.add(NewRow("a", 1, t))
        assert len(tasks.claims.claim([entry], ME, {1: 7}, t).claimed) == 1
        again = tasks.claims.claim([entry], ME, {1: 7}, t + 10)
        assert (again.claimed, again.fenced) == ([], [])
        assert tasks.row("a") == RowState(Status.READY, 1, t)

    def test_a_task_re_timed_later_than_memorys_entry_is_not_claimed(self, tasks: TaskTable):
        t = now()
        tasks.grant(1, ME, 7)
        tasks.add(NewRow("a", 1, t + 60_000))
        stale = tasks.add(NewRow("b", 1, t)), tasks.add(NewRow("c", 1, t))
        early = Entry("a", 1, t, topic="t")                  # memory still holds the old due time
        claim = tasks.claims.claim([early, *stale], ME, {1: 7}, t)
        assert sorted(c.task_id for c in claim.claimed) == ["b", "c"]
        assert tasks.row("a") == RowState(Status.DELAY, 0, t + 60_000)

    def test_a_task_re_timed_earlier_is_claimed_at_its_own_due_time(self, tasks: TaskTable):
        t = now()
        tasks.grant(1, ME, 7)
        tasks.add(NewRow("a", 1, t - 5000))
        [c] = tasks.claims.claim([Entry("a", 1, t, topic="t")], ME, {1: 7}, t).claimed
        assert c.due_ms == t - 5000

    def test_a_capped_topic_with_no_room_claims_nothing_and_defers_all(self, tasks: TaskTable):
        t = now()
        tasks.grant(1, ME, 7)
        tasks.cap("capped", 1)
        tasks.claims.claim([tasks.add(NewRow("flying", 1, t, topic="capped"))], ME, {1: 7}, t, {"capped": 1})
        waiting = [tasks.add(NewRow(f"w{i}", 1, t, topic="capped")) for i in range(2)]
        claim = tasks.claims.claim(waiting, ME, {1: 7}, t, {"capped": 1})
        assert (claim.claimed, sorted(e.task_id for e in claim.deferred), dict(claim.rooms)) == \
            ([], ["w0", "w1"], {"capped": (1, 0)})

    def test_a_capped_topic_keeps_its_earliest_tasks_up_to_its_room(self, tasks: TaskTable):
        t = now()
        tasks.grant(1, ME, 7)
        tasks.cap("capped", 2)
        flying = tasks.add(NewRow("flying", 1, t - 1000, topic="capped"))
        tasks.claims.claim([flying], ME, {1: 7}, t, {"capped": 2})
        late, early, free = (tasks.add(NewRow("late", 1, t, topic="capped")),
                             tasks.add(NewRow("early", 1, t - 10, topic="capped")), tasks.add(NewRow("free", 1, t)))
        claim = tasks.claims.claim([late, early, free], ME, {1: 7}, t, {"capped": 2})
        assert sorted(c.task_id for c in claim.claimed) == ["early", "free"]
        assert [e.task_id for e in claim.deferred] == ["late"]
        assert dict(claim.rooms) == {"capped": (1, 0)}
        assert tasks.row("late") == RowState(Status.DELAY, 0, t)

    def test_a_keep_if_active_key_has_one_attempt_in_flight(self, tasks: TaskTable):
        t = now()
        tasks.grant(1, ME, 7)
        first = tasks.add(NewRow("first", 1, t, key=b"k", keep_one=True))
        second = tasks.add(NewRow("second", 1, t, key=b"k", keep_one=True))
        won = tasks.claims.claim([first], ME, {1: 7}, t).claimed
        claim = tasks.claims.claim([second], ME, {1: 7}, t)
        assert claim.claimed == []
        assert [(w.entry.task_id, w.key) for w in claim.waits] == [("second", b"k")]
        assert tasks.row("second") == RowState(Status.DELAY, 0, t)
        # The attempt in flight ends (put back unsent): the waiting task can be claimed.
        assert tasks.claims.release(won, t + 5000, False, ME, t) == 1
        assert [c.task_id for c in tasks.claims.claim([second], ME, {1: 7}, t).claimed] == ["second"]

    def test_of_two_tasks_of_one_keep_if_active_key_in_one_claim_one_is_claimed(self, tasks: TaskTable):
        # Which one is the store's choice; the dispatcher holds the other back either way.
        t = now()
        tasks.grant(1, ME, 7)
        both = [tasks.add(NewRow(task_id, 1, t, key=b"k", keep_one=True)) for task_id in ("x", "y")]
        claim = tasks.claims.claim(both, ME, {1: 7}, t)
        assert len(claim.claimed) == 1 and len(claim.waits) == 1
        assert {claim.claimed[0].task_id, claim.waits[0].entry.task_id} == {"x", "y"}

    def test_an_undone_claim_gives_the_attempt_back(self, tasks: TaskTable):
        t = now()
        tasks.grant(1, ME, 7)
        entry = tasks.add(NewRow("a", 1, t))
        tasks.claims.claim([entry], ME, {1: 7}, t)
        assert tasks.claims.unclaim(["a"], ME, t, t + 100) == 1
        assert tasks.row("a") == RowState(Status.DELAY, 0, t)
        assert [c.attempt for c in tasks.claims.claim([entry], ME, {1: 7}, t + 200).claimed] == [1]

    def test_an_undo_changes_nothing_the_claim_did_not_leave_so(self, tasks: TaskTable):
        t = now()
        tasks.grant(1, ME, 7)
        entry = tasks.add(NewRow("a", 1, t))
        tasks.claims.claim([entry], ME, {1: 7}, t)
        assert tasks.claims.unclaim(["a"], ME, t - 1, t + 100) == 0        # another claim's instant
        assert tasks.claims.unclaim(["a"], OTHER, t, t + 100) == 0         # another node's claim
        assert tasks.claims.unclaim(["never"], ME, t, t + 100) == 0
        assert tasks.row("a") == RowState(Status.READY, 1, t)
