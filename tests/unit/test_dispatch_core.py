"""The dispatch core in memory: a claim, its release, the publish, the broker's answer and the
record, on the fakes of delayq.testing.fakes (no MySQL, no RabbitMQ, no thread but the test's).
Each test drives the Dispatcher and the Recorder one step at a time, as their threads would, and
looks at what a user would find: the task's row (status, attempt, due time, execlog), the
messages sent, the hints for another node."""
from __future__ import annotations

import logging
import time

import pytest

from delayq.lifecycle import Result, Status
from delayq.nodes.amqp.confirms import CONFIRMED, FAILED, UNROUTABLE
from delayq.nodes.outcomes.deadlines import Deadlines as RealDeadlines
from delayq.nodes.outcomes.expiry import Expiry
from delayq.nodes.memory.delayqueue import DelayQueue, Entry
from delayq.nodes.memory.flow import Flow
from delayq.nodes.memory.keyholds import RECHECK_MS, KeyHolds
from delayq.nodes.dispatch.dispatcher import Dispatcher
from delayq.nodes.dispatch.lease import boottime
from delayq.nodes.dispatch.pauses import PauseWatch
from delayq.nodes.dispatch.wiring import Claims, DispatchSettings, Memory, Outcomes, Publishing
from delayq.nodes.metrics import Metrics
from delayq.nodes.outcomes.outages import OutageGrace
from delayq.nodes.cluster.ownership import Ownership
from delayq.nodes.outcomes.recorder import RecordSettings, Recorder
from delayq.nodes.dispatch.unsettled import Unsettled
from delayq.nodes.validation import ServiceSpec
from delayq.errors import StoreUnavailable
from delayq.store.controls import Controls
from delayq.store.values import Transition
from delayq.testing.fakes import ClaimTable, Exchanges, ManualClock, Outbox, Services

pytestmark = pytest.mark.timeout(10)

RETRY_MS = 1000




class Results:
    """The ResultApplier as the core calls it: results applied (a retry back into memory, due at
    once), slots freed."""

    def __init__(self, table: ClaimTable, memory: DelayQueue, flow: Flow | None, keys: KeyHolds) -> None:
        self.table, self.memory, self.flow, self.keys, self.applied = table, memory, flow, keys, []

    def apply(self, task_id: str, attempt: int, result: Result, message: str | None) -> Transition:
        self.applied.append((task_id, attempt, result))
        status = {Result.MISFIRED: Status.FAILED, Result.SUCCESS: Status.FINISHED}.get(result, Status.DELAY)
        row = self.table.rows[task_id]
        freed = row.flight_key
        row.status = status
        if status is Status.DELAY:
            self.memory.offer_written([Entry(task_id, row.shard_id, row.due_ms, topic=row.topic)])
        self.ended(row.topic, None if freed is None else freed[1])
        return Transition(True, status)

    def ended(self, topic: str, key: bytes | None = None) -> None:
        if self.flow is not None:
            self.flow.released(topic)
        if key is not None:
            self.keys.freed(topic, key)


class Deadlines:
    def __init__(self) -> None:
        self.added = []

    def add(self, deadlines) -> None:
        self.added += list(deadlines)


class Core:
    """One node's dispatch core on fakes: shards 1 and 2 ours (n1, epoch 1), shard 3 another's.
    With `controls`, memory's gate is a Flow holding each topic to them, as on a node; with
    `deadlines`, each claim's deadline goes to the real Deadlines (no outage: none is held)."""

    def __init__(self, *services: ServiceSpec, controls: dict[str, Controls] | None = None,
                 deadlines: bool = False, outbox: Outbox | None = None, registry: Services | None = None,
                 settings: DispatchSettings = DispatchSettings(batch=100), **claims) -> None:
        self.clock = ManualClock()
        self.table = ClaimTable({1: ("n1", 1), 2: ("n1", 1), 3: ("n2", 1)})
        self.outbox, self.exchanges = outbox or Outbox(), Exchanges()
        self.hints: list[Entry] = []
        self.ownership = Ownership("n1")
        self.flow = None if controls is None else Flow(self.ownership, now_ms=self.clock.now_ms)
        self.memory = DelayQueue(self.clock, gate=self.flow, handover=self.hints.extend, shards=())
        self.ownership.on_change(lambda gained, lost: self.memory.own(self.ownership.shards()))
        if self.flow is not None:
            self.flow.ownership_changes()
        self.ownership.set({1: 1, 2: 1}, [1, 2, 3])
        if self.flow is not None and controls is not None:
            self.flow.apply(controls)
        self.memory.set_horizon(self.clock.now + 60_000)
        self.keys = KeyHolds(self.memory, self.clock)
        self.results = Results(self.table, self.memory, self.flow, self.keys)
        self.deadlines = Deadlines()
        if deadlines:
            grace = OutageGrace(self.clock, 15_000)
            grace.observe("mysql", True)
            self.deadlines = RealDeadlines(self.table, self.results, Metrics(), self.clock, grace)
        metrics = Metrics()
        self.recorder = Recorder(self.table, self.memory, self.ownership, self.results, metrics, self.clock,
                                 RecordSettings(publish_retry_ms=RETRY_MS))
        self.services = registry or Services(*services)
        self.dispatcher = Dispatcher(Claims(self.table, self.ownership, Unsettled(self.table, self.clock), **claims),
                                     Memory(self.memory, self.flow, keys=self.keys),
                                     Publishing(self.outbox, self.services, self.exchanges, "delayq"),
                                     Outcomes(self.recorder, self.results, self.deadlines), metrics, self.clock,
                                     settings)

    def submit(self, task_id: str, shard: int = 1, in_ms: int = 0, topic: str = "t", key: bytes | None = None,
               keep_one: bool = False) -> Entry:
        e = self.table.add(task_id, shard, self.clock.now + in_ms, topic, key=key, keep_one=keep_one)
        self.memory.offer_written([e])
        return e

    def fire(self) -> None:
        """Claim what memory has due, release it: a claiming thread's turn and the releaser's."""
        self.dispatcher.claim(self.memory.take_due(100, timeout=0))
        self.dispatcher.release_due()

    def row(self, task_id: str):
        return self.table.rows[task_id]


def test_a_due_task_is_claimed_published_and_recorded_after_the_confirm():
    core = Core()
    core.submit("a")
    core.fire()
    assert core.outbox.message_ids == ["a:1"]
    assert core.row("a").status is Status.READY and core.row("a").attempt == 1
    assert core.row("a").dispatched == {}            # nothing recorded before the broker confirms
    core.outbox.answer(CONFIRMED)
    assert core.recorder.record_waiting() == 1
    assert core.row("a").dispatched == {1: core.clock.now}


def test_a_nack_may_have_reached_a_queue_so_the_attempt_is_used_up_and_the_task_goes_again():
    core = Core()
    core.submit("a")
    core.fire()
    core.outbox.answer(FAILED)
    core.recorder.record_waiting()
    assert (core.row("a").status, core.row("a").attempt) == (Status.DELAY, 1)
    assert core.row("a").due_ms == core.clock.now + RETRY_MS
    core.clock.now += RETRY_MS
    core.fire()
    assert core.outbox.message_ids == ["a:2"]


def test_a_publish_that_never_left_the_node_gives_its_attempt_number_back():
    core = Core()
    core.submit("a")
    core.outbox.ready = False
    core.fire()
    core.recorder.record_waiting()
    assert (core.row("a").status, core.row("a").attempt) == (Status.DELAY, 0)
    core.outbox.ready = True
    core.clock.now += RETRY_MS
    core.fire()
    assert core.outbox.message_ids == ["a:1"]


def test_an_unroutable_publish_is_a_failed_attempt():
    core = Core()
    core.submit("a")
    core.fire()
    core.outbox.answer(UNROUTABLE)
    core.recorder.record_waiting()
    assert core.results.applied == [("a", 1, Result.UNROUTABLE)]


def test_a_claim_of_a_session_that_broke_before_the_write_is_not_published_and_fires_again_at_once(caplog):
    core = Core()
    core.submit("a")
    core.dispatcher.claim(core.memory.take_due(100, timeout=0))
    core.ownership.set_claimable(False)          # the ZooKeeper session was suspended meanwhile
    core.ownership.set_claimable(True)
    with caplog.at_level(logging.WARNING):
        core.dispatcher.release_due()
        core.recorder.record_waiting()
    assert core.outbox.message_ids == []
    assert (core.row("a").status, core.row("a").attempt, core.row("a").due_ms) == (Status.DELAY, 0, core.clock.now)
    assert any("session broke" in r.getMessage() for r in caplog.records)
    core.fire()
    assert core.outbox.message_ids == ["a:1"]


def test_claims_of_a_shard_that_moved_go_to_its_new_owner_on_time_and_the_others_are_published(caplog):
    core = Core()
    core.submit("a", shard=1)
    core.submit("b", shard=2)
    core.dispatcher.claim(core.memory.take_due(100, timeout=0))
    core.ownership.set({1: 1}, [1, 2, 3])        # shard 2 moved away (a rebalance)
    core.table.shards[2] = ("n3", 2)
    with caplog.at_level(logging.INFO):
        core.dispatcher.release_due()
        core.recorder.record_waiting()
    assert core.outbox.message_ids == ["a:1"]
    assert (core.row("b").status, core.row("b").attempt) == (Status.DELAY, 0)
    assert [e.task_id for e in core.hints] == ["b"] and core.hints[0].due_ms == core.clock.now
    moved = [r for r in caplog.records if "handed back" in r.getMessage()]
    assert [r.levelname for r in moved] == ["INFO"] and not [r for r in caplog.records if r.levelname == "WARNING"]


def test_tasks_of_a_shard_fenced_in_mysql_are_handed_to_its_owner():
    core = Core()
    core.submit("a", shard=2)
    core.table.shards[2] = ("n3", 2)             # MySQL knows of the move before this node does
    core.fire()
    assert core.outbox.message_ids == [] and [e.task_id for e in core.hints] == ["a"]


def test_a_claim_whose_answer_mysql_lost_is_undone_and_fires_as_the_same_attempt_when_mysql_answers():
    core = Core()
    core.submit("a")
    core.table.lose_next_answer = True
    core.fire()
    assert core.row("a").status is Status.READY       # committed, though the node heard an error
    core.table.down = True
    core.fire()                                       # MySQL away: nothing goes out, nothing is lost
    assert core.outbox.message_ids == [] and len(core.memory) == 1
    core.table.down = False
    core.fire()
    assert core.outbox.message_ids == ["a:1"]


def test_a_task_past_its_misfire_threshold_is_failed_not_sent():
    core = Core(ServiceSpec("late", "delayq", "late", misfire_threshold_ms=5_000, misfire_policy="fail"))
    core.submit("a", topic="late")
    core.clock.now += 6_000
    core.fire()
    assert core.outbox.message_ids == [] and core.results.applied == [("a", 1, Result.MISFIRED)]


def held_back(why: str) -> Core:
    """A core whose topic "held" is on exchange "broken-ex", unusable for `why`, with task "a" of
    that topic due and fired: held back."""
    core = Core(ServiceSpec("held", "broken-ex", "held"))
    core.exchanges.bad["broken-ex"] = why
    core.submit("a", topic="held")
    core.fire()
    core.recorder.record_waiting()
    return core


def test_a_topic_whose_exchange_is_unusable_is_held_back_and_named():
    core = held_back("no exchange 'broken-ex'")
    assert core.outbox.message_ids == []
    assert (core.row("a").status, core.row("a").attempt) == (Status.DELAY, 0)
    assert core.row("a").due_ms >= core.clock.now + 1000
    assert core.dispatcher.held_topics == {"held": "exchange 'broken-ex': no exchange 'broken-ex'"}


def test_a_held_topic_leaves_the_list_once_registered_on_a_usable_exchange_while_the_old_one_stays_bad():
    core = held_back("current is 'fanout'")
    assert "held" in core.dispatcher.held_topics
    # Its tasks may now go out from the other lane, which never held them: this lane must not
    # name the topic for as long as the old exchange stays bad.
    core.services.by_topic["held"] = ServiceSpec("held", "good-ex", "held")
    assert core.dispatcher.held_topics == {}


def test_a_task_is_released_at_its_due_time_not_at_its_claim():
    core = Core()
    core.submit("a", in_ms=15)
    core.dispatcher.claim(core.memory.take_due(100, timeout=0, lead_ms=20))    # the prompt lane's lead
    assert core.row("a").status is Status.READY
    assert core.dispatcher.release_due() == 0 and core.outbox.message_ids == []
    core.clock.now += 15
    assert core.dispatcher.release_due() == 1 and core.outbox.message_ids == ["a:1"]


def test_records_wait_while_mysql_is_down_and_are_written_when_it_answers():
    core = Core()
    core.submit("a")
    core.fire()
    core.table.down = True
    core.recorder.start()
    try:
        core.outbox.answer(CONFIRMED)
        deadline = time.monotonic() + 5
        while core.recorder.backlog and time.monotonic() < deadline:   # taken by the recorder's thread
            time.sleep(0.005)
        core.table.down = False
        while not core.row("a").dispatched and time.monotonic() < deadline:
            time.sleep(0.005)
        assert core.row("a").dispatched == {1: core.clock.now}
    finally:
        core.recorder.stop()


# ---- a topic's flow controls ------------------------------------------------------------------


def test_a_topic_at_its_in_flight_cap_waits_in_memory_until_a_result_frees_a_slot():
    core = Core(controls={"capped": Controls(max_in_flight=2)})
    for t in "abcd":
        core.submit(t, topic="capped")
    core.fire()
    assert core.outbox.message_ids == ["a:1", "b:1"]
    assert len(core.memory) == 2 and core.row("c").status is Status.DELAY     # still cancellable
    core.outbox.answer(CONFIRMED)
    core.recorder.record_waiting()
    core.fire()
    assert core.outbox.message_ids == []                  # confirmed is still in flight: no result yet
    core.results.apply("a", 1, Result.SUCCESS, None)      # the consumer's result frees a slot
    core.fire()
    assert core.outbox.message_ids == ["c:1"]
    assert core.row("d").status is Status.DELAY


def test_the_cap_counts_attempts_other_nodes_have_in_flight_and_the_claim_defers_the_rest_to_memory():
    core = Core(controls={"capped": Controls(max_in_flight=2)})
    core.table.add("elsewhere", 3, core.clock.now - 10, "capped")
    core.table.rows["elsewhere"].status = Status.RUNNING      # another node's attempt, in MySQL only
    for i, t in enumerate("abc"):
        core.submit(t, topic="capped", in_ms=i - 3)      # due in this order
    core.fire()                                           # memory's estimate lets two go; the claim keeps one
    assert core.outbox.message_ids == ["a:1"]
    assert (core.row("b").status, core.row("b").attempt) == (Status.DELAY, 0) and len(core.memory) == 2
    core.fire()
    assert core.outbox.message_ids == ["a:1"]             # no room: the topic is not even taken from memory
    core.table.rows["elsewhere"].status = Status.FINISHED     # the other node's consumer reported
    core.clock.now += 100                                 # the flow looks at a full topic again (recheck_ms)
    core.fire()
    assert core.outbox.message_ids == ["a:1", "b:1"]


def test_a_rate_limited_topic_fires_its_share_of_the_burst_and_then_its_share_of_the_rate():
    # 30/s and a burst of 3 across the cluster; this node holds 2 of the 3 shards: 20/s, a burst of 2.
    core = Core(controls={"rated": Controls(max_fire_rate=30.0, fire_burst=3)})
    for i in range(10):
        core.submit(f"t{i}", topic="rated")
    core.submit("free", topic="other")
    core.fire()
    assert sorted(core.outbox.message_ids) == ["free:1", "t0:1", "t1:1"]
    core.fire()
    assert len(core.outbox.message_ids) == 3              # no token left: the rest wait in memory
    core.clock.now += 100                                 # 2 tokens at 20/s
    core.fire()
    assert core.outbox.message_ids[3:] == ["t2:1", "t3:1"]
    core.clock.now += 10_000                              # a long pause refills the burst, no more
    core.fire()
    assert core.outbox.message_ids[5:] == ["t4:1", "t5:1"] and len(core.memory) == 4


# ---- deadlines --------------------------------------------------------------------------------


def test_a_claimed_attempt_with_no_result_within_its_time_to_run_is_timed_out_and_fires_again():
    core = Core(deadlines=True)
    core.submit("a")
    core.fire()                                           # the claim hands its deadline to Deadlines
    core.outbox.answer(CONFIRMED)
    core.recorder.record_waiting()
    assert core.deadlines.check() == 0
    core.clock.now += 3_001                               # the time-to-run (3 s) has passed, no result
    assert core.deadlines.check() == 1
    assert core.results.applied == [("a", 1, Result.TIMEOUT)]
    core.fire()
    assert core.outbox.message_ids == ["a:2"]


def deadlines_of(core: Core, grace_ms: int = 15_000) -> tuple[RealDeadlines, OutageGrace]:
    grace = OutageGrace(core.clock, grace_ms)
    grace.observe("mysql", True)
    return RealDeadlines(core.table, core.results, Metrics(), core.clock, grace), grace


def test_an_attempt_with_no_result_within_its_time_to_run_is_timed_out_by_its_node():
    core = Core()
    deadlines, _ = deadlines_of(core)
    core.submit("a")
    core.fire()
    deadlines.add([(core.row("a").deadline_ms, "a", 1)])
    assert deadlines.check() == 0 and core.results.applied == []      # not yet
    core.clock.now += 3_001
    assert deadlines.check() == 1
    assert core.results.applied == [("a", 1, Result.TIMEOUT)]


def test_an_attempt_whose_deadline_mysql_moved_later_is_watched_again_not_timed_out():
    core = Core()
    deadlines, _ = deadlines_of(core)
    core.submit("a")
    core.fire()
    deadlines.add([(core.row("a").deadline_ms, "a", 1)])
    core.row("a").deadline_ms += 10_000                 # the consumer said it started (RUNNING)
    core.clock.now += 3_001
    deadlines.check()
    assert core.results.applied == [] and len(deadlines) == 1
    core.clock.now += 10_000
    deadlines.check()
    assert core.results.applied == [("a", 1, Result.TIMEOUT)]


def test_no_attempt_is_timed_out_while_mysql_is_away_nor_in_the_grace_after():
    core = Core()
    deadlines, grace = deadlines_of(core, grace_ms=15_000)
    core.submit("a")
    core.fire()
    deadlines.add([(core.row("a").deadline_ms, "a", 1)])
    grace.observe("mysql", False)
    core.clock.now += 3_001
    assert deadlines.check() is None
    grace.observe("mysql", True)                        # back: results held up get 15 s to arrive
    core.clock.now += 14_000
    deadlines.check()
    assert core.results.applied == []
    core.clock.now += 1_500
    assert deadlines.check() == 1 and core.results.applied == [("a", 1, Result.TIMEOUT)]


def test_an_attempt_a_dead_node_dispatched_is_timed_out_by_the_shards_new_owner_after_its_scan():
    core = Core()
    grace = OutageGrace(core.clock, 15_000)
    grace.observe("mysql", True)
    expiry = Expiry(core.table, core.results, core.ownership, grace)
    core.table.add("orphan", 1, core.clock.now - 5_000)
    core.table.rows["orphan"].status, core.table.rows["orphan"].attempt = Status.RUNNING, 1
    core.table.rows["orphan"].owner, core.table.rows["orphan"].deadline_ms = "n2", core.clock.now + 1_000
    expiry.scanned({1, 2}, core.clock.now)
    assert core.results.applied == []                 # its time-to-run has not passed yet
    expiry.mysql(False)                               # a scan found MySQL away: nothing is timed out
    core.clock.now += 1_001
    expiry.scanned({1, 2}, core.clock.now)
    assert core.results.applied == []
    expiry.mysql(True)
    core.clock.now += 15_000                          # the grace after the outage is over
    expiry.scanned({1, 2}, core.clock.now)
    assert core.results.applied == [("orphan", 1, Result.TIMEOUT)]


def test_expiry_stops_timing_out_attempts_once_the_node_gives_up_the_shards_it_scanned():
    """A stopping node gives every shard up while its last scan's time-outs are being applied, one
    transaction each: the rest are the new owners' to apply."""
    core = Core()
    grace = OutageGrace(core.clock, 15_000)
    grace.observe("mysql", True)
    core.clock.now += 15_001
    expiry = Expiry(core.table, core.results, core.ownership, grace)
    for name in ("o1", "o2", "o3"):
        core.table.add(name, 1, core.clock.now - 5_000)
        row = core.table.rows[name]
        row.status, row.attempt, row.owner, row.deadline_ms = Status.RUNNING, 1, "n2", core.clock.now - 1
    scanned = core.ownership.shards()
    apply = core.results.apply

    def apply_then_stop(*args, **kwargs):
        out = apply(*args, **kwargs)
        core.ownership.set({}, core.ownership.all_shards())       # NodeRuntime.stop, meanwhile
        return out
    core.results.apply = apply_then_stop
    expiry.scanned(scanned, core.clock.now)
    assert len(core.results.applied) == 1


# ---- KEEP_IF_ACTIVE: one attempt of a key in flight ------------------------------------------------

def b_waits_for_a() -> Core:
    """Task a of key k in flight, task b of k due and left waiting by its claim."""
    core = Core()
    core.submit("a", key=b"k", keep_one=True)
    core.fire()
    core.submit("b", key=b"k", keep_one=True)
    core.fire()
    return core


def test_a_keep_if_active_task_waits_while_its_key_is_in_flight_and_fires_the_moment_a_result_ends_it():
    core = b_waits_for_a()
    core.clock.now += RECHECK_MS // 2
    core.fire()
    assert core.outbox.message_ids == ["a:1"]
    assert (core.row("b").status, core.row("b").attempt) == (Status.DELAY, 0)
    core.results.apply("a", 1, Result.SUCCESS, None)
    core.fire()                                       # no time passed: the end itself let it go
    assert core.outbox.message_ids == ["a:1", "b:1"]


def test_a_waiting_task_whose_key_ended_on_another_node_is_tried_again_after_the_recheck():
    core = b_waits_for_a()
    core.row("a").status = Status.FINISHED            # a result another node applied: not heard of here
    core.clock.now += RECHECK_MS - 1
    core.fire()
    assert core.outbox.message_ids == ["a:1"]
    core.clock.now += 1
    core.fire()
    assert core.outbox.message_ids == ["a:1", "b:1"]


def test_a_waiting_task_another_node_claimed_is_no_longer_counted_as_waiting_here():
    core = b_waits_for_a()
    assert core.keys.held == 1
    core.row("a").status = Status.FINISHED            # ended on another node, which then claimed b
    core.row("b").status, core.row("b").attempt = Status.READY, 1
    core.clock.now += RECHECK_MS
    core.fire()                                       # the recheck's claim takes nothing
    assert core.outbox.message_ids == ["a:1"] and core.keys.held == 0


def test_a_retry_of_the_attempt_in_flight_frees_the_key_for_the_waiting_task():
    core = b_waits_for_a()
    core.results.apply("a", 1, Result.RETRY, None)    # back to DELAY, due at once: a and b both waiting
    core.fire()
    assert len(core.outbox.message_ids) == 2          # one of the two, never both
    assert sorted(r.status for r in core.table.rows.values()) == [Status.DELAY, Status.READY]


def test_two_tasks_of_a_key_due_in_one_batch_fire_one_at_a_time():
    core = Core()
    core.submit("a", key=b"k", keep_one=True)
    core.submit("b", key=b"k", keep_one=True)
    core.fire()
    assert core.outbox.message_ids == ["a:1"]
    core.results.apply("a", 1, Result.SUCCESS, None)
    core.fire()
    assert core.outbox.message_ids == ["a:1", "b:1"]


def test_other_keys_unkeyed_tasks_and_tasks_of_other_modes_are_not_held_by_a_key_in_flight():
    core = Core()
    core.submit("a", key=b"k", keep_one=True)
    core.fire()
    core.submit("b", key=b"k2", keep_one=True)
    core.submit("c")
    core.submit("d", key=b"k")                        # the same key, submitted under another mode
    core.submit("e", key=b"k", topic="other", keep_one=True)
    core.fire()
    assert sorted(core.outbox.message_ids) == ["a:1", "b:1", "c:1", "d:1", "e:1"]
    assert core.keys.held == 0


def test_a_fire_and_forget_attempt_frees_its_key_at_the_broker_s_confirm():
    core = Core()
    core.memory.offer_written([core.table.add("a", 1, core.clock.now, key=b"k", keep_one=True, ttr_ms=0)])
    core.fire()
    core.submit("b", key=b"k", keep_one=True)
    core.fire()
    assert core.outbox.message_ids == ["a:1"]
    core.outbox.answer(CONFIRMED)
    core.recorder.record_waiting()                    # the confirm finishes a: nothing else will
    core.fire()                                       # no time passed
    assert core.row("a").status is Status.FINISHED and core.outbox.message_ids == ["b:1"]


# ---- catching up: claim leases under the node's own backlog ----------------------------------------


class SlowOutbox(Outbox):
    """A publisher that takes `per_message_s` of real time per message before it writes a batch
    (a node whose CPUs are shared), and confirms at once."""

    def __init__(self, per_message_s: float) -> None:
        super().__init__()
        self.per_message_s, self.published = per_message_s, 0

    def publish(self, batch, on_outcome, veto=None) -> None:
        end = time.monotonic() + self.per_message_s * len(batch)
        while time.monotonic() < end:       # busy, as a loaded node is
            pass
        super().publish(batch, on_outcome, veto)
        self.published += len(batch)
        self.answer(CONFIRMED)


@pytest.mark.timeout(30)
def test_a_large_overdue_backlog_is_claimed_at_the_pace_the_node_publishes_and_no_claim_expires(caplog):
    # Full claims of 500, two at a time, as a node's bulk lane makes them; 2 ms a message: two
    # claims' worth take 2 s to write, past the 1.5 s lease. Each claim must be no larger than
    # what is written within its lease.
    outbox = SlowOutbox(0.002)
    core = Core(outbox=outbox, settings=DispatchSettings(batch=500, claimers=2))
    for i in range(20):                                 # the node at work before: its pace is known
        core.submit(f"w{i}")
    core.fire()
    core.recorder.record_waiting()
    for i in range(2000):                               # then an outage's backlog, overdue
        core.submit(f"t{i}", in_ms=-5000 + i)
    with caplog.at_level(logging.INFO):
        core.dispatcher.start()
        try:
            deadline = time.monotonic() + 20
            while outbox.published < 2020 and time.monotonic() < deadline:
                core.recorder.record_waiting()
                time.sleep(0.01)
        finally:
            core.dispatcher.stop()
        core.recorder.record_waiting()
    unpublished = [r.getMessage() for r in caplog.records if "not publishing" in r.getMessage()]
    assert unpublished == []
    assert outbox.published == 2020
    assert all(core.row(f"t{i}").attempt == 1 and core.row(f"t{i}").dispatched for i in range(2000))


def test_a_claim_that_outlived_its_lease_behind_the_node_s_own_work_is_not_blamed_on_a_pause(caplog):
    core = Core(settings=DispatchSettings(batch=100, lease_ms=50))
    core.submit("a")
    core.dispatcher.claim(core.memory.take_due(100, timeout=0))
    time.sleep(0.06)                                    # the node busy elsewhere: the lease lapses
    with caplog.at_level(logging.WARNING):
        core.dispatcher.release_due()
    said = [r.getMessage() for r in caplog.records if "not publishing" in r.getMessage()]
    assert len(said) == 1 and "paused" not in said[0] and "backlog" in said[0], said
    core.recorder.record_waiting()
    assert (core.row("a").status, core.row("a").attempt) == (Status.DELAY, 0)


def test_a_claim_that_outlived_its_lease_while_the_node_was_stopped_says_so(caplog):
    watch = PauseWatch()
    core = Core(settings=DispatchSettings(batch=100, lease_ms=50), pauses=watch)
    core.submit("a")
    core.dispatcher.claim(core.memory.take_due(100, timeout=0))
    stopped = boottime()
    time.sleep(0.06)
    watch.noted(stopped, boottime())                    # what the watch's thread sees of a SIGSTOP
    with caplog.at_level(logging.WARNING):
        core.dispatcher.release_due()
    said = [r.getMessage() for r in caplog.records if "not publishing" in r.getMessage()]
    assert len(said) == 1 and "paused" in said[0], said


class ServicesAway(Services):
    """The service registry with MySQL away: a topic not cached cannot be looked up."""

    def __init__(self) -> None:
        super().__init__()
        self.away = True

    def find(self, topic: str):
        if self.away:
            raise StoreUnavailable("MySQL unavailable: (2003, \"Can't connect\")")
        return super().find(topic)


def test_a_claim_whose_service_cannot_be_read_goes_back_unsent_and_fires_once_it_can():
    core = Core(registry=ServicesAway())
    core.memory.offer_written([core.table.add("a", 1, core.clock.now, ttr_ms=0)])   # nothing times it out
    core.fire()
    core.recorder.record_waiting()
    assert core.outbox.message_ids == []
    assert (core.row("a").status, core.row("a").attempt) == (Status.DELAY, 0)
    core.services.away = False
    core.fire()
    assert core.outbox.message_ids == ["a:1"]
