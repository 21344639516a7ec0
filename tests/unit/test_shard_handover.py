"""The handover (docs/ARCHITECTURE.md, invariant 8): whatever a node writes back as DELAY for a
shard it no longer owns, and what its memory held of a shard it just lost, reaches the shard's
new owner as hints; claims whose answer MySQL lost are undone. In memory: the queue, the
ownership, the recorder and the unsettled claims run against small fakes (MySQL's tasks as
delayq.testing.fakes.ClaimTable), time set by the test."""
from __future__ import annotations

import logging

import pytest

from delayq.errors import Unavailable
from delayq.lifecycle import Status
from delayq.nodes.memory.delayqueue import HANDOVER_LOOKBACK_S, DelayQueue, Entry
from delayq.nodes.memory.hints import Handover
from delayq.nodes.dispatch.attempts import RETURNED, Attempt, Settled
from delayq.nodes.dispatch.lease import BROKEN, MOVED, Lease
from delayq.nodes.memory.loader import Loader, ScanSettings
from delayq.nodes.metrics import Metrics
from delayq.nodes.cluster.ownership import Ownership
from delayq.nodes.outcomes.recorder import RecordSettings, Recorder
from delayq.nodes.dispatch.unsettled import Unsettled
from delayq.store.values import Claimed

from delayq.testing.fakes import ClaimTable, ManualClock

pytestmark = pytest.mark.timeout(10)




@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def handed() -> list[Entry]:
    return []


@pytest.fixture
def queue(clock, handed) -> DelayQueue:
    q = DelayQueue(clock, handover=handed.extend)
    q.own({1, 2})
    q.set_horizon(clock.now + 60_000)
    return q


def test_a_lost_shard_hands_over_what_memory_was_given_lately_and_not_what_its_owner_read(clock, queue, handed):
    queue.offer_many([Entry("old", 2, clock.now + 50_000), Entry("kept", 1, clock.now + 50_000)])
    clock.now += int(HANDOVER_LOOKBACK_S * 1000) + 1000
    queue.offer_written([Entry("new", 2, clock.now + 1_000)])     # written around the move
    assert queue.own({1}) == 2
    assert handed == [Entry("new", 2, clock.now + 1_000)]
    assert len(queue) == 1 and queue.holds("kept", clock.now + 50_000 - int(HANDOVER_LOOKBACK_S * 1000) - 1000)


def test_a_write_for_a_shard_no_longer_ours_goes_to_its_owner_and_a_scan_of_it_is_dropped(clock, queue, handed):
    queue.own({1})
    queue.offer_written([Entry("retry", 2, clock.now + 10), Entry("mine", 1, clock.now + 10)])
    queue.put_back([Entry("unclaimed", 2, clock.now - 5)])
    queue.offer_many([Entry("scanned", 2, clock.now + 10)])
    assert [e.task_id for e in handed] == ["retry", "unclaimed"]
    assert len(queue) == 1 and queue.holds("mine", clock.now + 10)


def test_the_loss_reaches_memory_through_the_ownership_listener(clock, handed):
    queue = DelayQueue(clock, handover=handed.extend)
    ownership = Ownership("n1")
    Loader(None, queue, ownership, clock=clock, settings=ScanSettings(60_000, 5000, 1000))
    ownership.set({1: 1, 2: 1}, [1, 2])
    queue.set_horizon(clock.now + 60_000)
    queue.offer_written([Entry("a", 2, clock.now + 100), Entry("b", 1, clock.now + 100)])
    ownership.set({1: 1}, [1, 2])
    assert [e.task_id for e in handed] == ["a"]
    queue.offer_written([Entry("c", 2, clock.now + 200)])      # a write that lost the race to the move
    assert [e.task_id for e in handed] == ["a", "c"]


def test_the_handover_keeps_only_what_is_due_within_the_window_and_keeps_order_when_mysql_fails(clock):
    h = Handover(clock, window_ms=60_000, cap=3)
    h.give([Entry("soon", 1, clock.now + 10), Entry("later", 1, clock.now + 60_000)])
    assert h.waiting == 1 and h.given.is_set()       # the writer is woken
    taken = h.take()
    h.give([Entry("next", 1, clock.now + 20)])
    h.restore(taken)            # not written: first in line again
    assert [e.task_id for e in h.take()] == ["soon", "next"]
    h.give([Entry(f"t{i}", 1, clock.now) for i in range(5)])
    assert [e.task_id for e in h.take()] == ["t2", "t3", "t4"]     # past the cap the oldest are left to the re-read


# ---- claims whose answer was lost --------------------------------------------------------------


def claimed(table: ClaimTable, clock: ManualClock, *rows: tuple[str, int, int]) -> list[Claimed]:
    """These (task id, shard, due) rows written and claimed by n1 now, holding their shards at epoch 1."""
    for task_id, shard, due_ms in rows:
        table.shards[shard] = ("n1", 1)
        table.add(task_id, shard, due_ms)
    entries = [Entry(task_id, shard, due_ms) for task_id, shard, due_ms in rows]
    return table.claim(entries, "n1", {shard: 1 for _, shard, _ in rows}, clock.now).claimed


def state(table: ClaimTable, task_id: str) -> tuple[Status, int, int]:
    """What MySQL would show of the task: status, attempt, due time."""
    row = table.rows[task_id]
    return row.status, row.attempt, row.due_ms


def test_a_claim_without_an_answer_is_undone_once_mysql_answers(clock):
    table = ClaimTable({})
    claimed(table, clock, ("a", 1, 5), ("b", 2, 6))      # committed; its answer never came
    unsettled = Unsettled(table, clock)
    unsettled.note([Entry("a", 1, 5), Entry("b", 2, 6)], "n1", clock.now)
    table.down = True
    with pytest.raises(Unavailable):
        unsettled.settle()
    assert unsettled.pending and state(table, "a") == (Status.READY, 1, 5)
    table.down = False
    assert unsettled.settle() == 2
    assert (state(table, "a"), state(table, "b")) == ((Status.DELAY, 0, 5), (Status.DELAY, 0, 6))
    assert not unsettled.pending


# ---- claims handed back -------------------------------------------------------------------------


def returned(task: Claimed, why: str) -> Settled:
    """A claimed attempt the dispatcher did not publish (its claim no longer current)."""
    return Settled(Attempt(task, Lease(0.0, 0, "n1", {task.shard_id: 1}), task.due_ms), RETURNED, why, task.due_ms)


def recorder(clock, queue, ownership, store) -> Recorder:
    return Recorder(store, queue, ownership, results=None, metrics=Metrics(), clock=clock,
                    settings=RecordSettings(publish_retry_ms=1000, gather_ms=0))


def test_claims_of_a_moved_shard_go_back_at_their_due_time_to_the_new_owner_logged_at_info(
        clock, queue, handed, caplog):
    table, ownership = ClaimTable({}), Ownership("n1")
    x, y = claimed(table, clock, ("x", 2, clock.now - 3), ("y", 1, clock.now + 7))
    ownership.set({1: 1}, [1, 2])
    queue.own({1})
    rec = recorder(clock, queue, ownership, table)
    rec.put([returned(x, MOVED), returned(y, MOVED)])
    with caplog.at_level(logging.INFO, logger="delayq.nodes.outcomes.recorder"):
        rec._record([rec._inbox.get_nowait() for _ in range(2)])
    # Back to DELAY at their due time, with the attempt that never left given back.
    assert (state(table, "x"), state(table, "y")) == ((Status.DELAY, 0, clock.now - 3), (Status.DELAY, 0, clock.now + 7))
    assert [e.task_id for e in handed] == ["x"] and queue.holds("y", clock.now + 7)
    assert [r.levelname for r in caplog.records] == ["INFO"]
    assert "handed back 2 claims of shards [1, 2]" in caplog.records[0].getMessage()


def test_claims_refused_for_a_broken_session_are_a_warning(clock, queue, caplog):
    table, ownership = ClaimTable({}), Ownership("n1")
    x, = claimed(table, clock, ("x", 1, clock.now))
    rec = recorder(clock, queue, ownership, table)
    rec.put([returned(x, BROKEN)])
    with caplog.at_level(logging.INFO, logger="delayq.nodes.outcomes.recorder"):
        rec._record([rec._inbox.get_nowait()])
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert BROKEN in caplog.records[0].getMessage()


def test_a_node_that_owns_no_shard_yet_hands_over_what_it_accepts(clock, handed):
    queue = DelayQueue(clock, handover=handed.extend, shards=())
    queue.offer_written([Entry("submitted", 7, clock.now + 1_000)])    # before its first window read
    assert [e.task_id for e in handed] == ["submitted"] and len(queue) == 0
