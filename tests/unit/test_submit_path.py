"""Unit tests of the submit path without servers (delayq.nodes.front.submitpath, .newtasks,
.writes): a group of calls each answered on its own, the conversion of TaskSpecs into NewTasks,
and what reaches memory after the commit. The store's writer is delayq.testing.fakes.TaskInserts,
held to TaskWriter's answers by delayq.testing.conformance."""
from __future__ import annotations

from typing import Sequence

from thrift.Thrift import TApplicationException

from delayq.client.gen.delayq_thrift import ttypes
from delayq.nodes.cluster.ownership import Ownership
from delayq.nodes.front.access import Access
from delayq.nodes.front.errors import CallAnswers
from delayq.nodes.front.newtasks import NewTasks, SubmitRules
from delayq.nodes.front.placing import Placing
from delayq.nodes.front.submitpath import SubmitGate, SubmitPath
from delayq.nodes.memory.delayqueue import DelayQueue
from delayq.nodes.metrics import Metrics
from delayq.nodes.validation import Limits, ServiceSpec
from delayq.store.controls import Controls
from delayq.testing.fakes import ManualClock, Services, TaskInserts

NOW = 1_700_000_000_000


def _path(*, rated: Sequence[str] = ()):
    clock = ManualClock(NOW)
    ownership = Ownership("n1")
    ownership.set({0: 1, 1: 1}, range(4))
    queue = DelayQueue(clock, shards=[0, 1])
    queue.horizon_ms = NOW + 60_000        # as the loader leaves it: it read the window
    placing = Placing(queue, ownership, window_ms=60_000)
    services = Services(ServiceSpec("t", "x", "t", max_retries=2, ttr_ms=5_000), ServiceSpec("r", "x", "r"))
    services.limits = {topic: Controls(max_fire_rate=10.0) for topic in rated}
    writer = TaskInserts()
    access = Access(None, Metrics(), enabled=False)  # type: ignore[arg-type] - never read while disabled
    path = SubmitPath(SubmitGate(access), NewTasks(services, placing, SubmitRules(Limits(100, 86_400_000), 8)),
                      writer, placing, CallAnswers(Metrics()), clock)  # type: ignore[arg-type]
    return path, writer, queue


def test_each_call_of_a_group_is_answered_on_its_own_in_one_statement():
    path, writer, _ = _path()
    out = path.submit_many([
        ([ttypes.TaskSpec(topic="t", delayMs=1000)], False, None),
        ([ttypes.TaskSpec(topic="t", delayMs=1), ttypes.TaskSpec(topic="t", delayMs=-1)], True, None),
        ([ttypes.TaskSpec(topic="nope", delayMs=1)], False, None),
        ([ttypes.TaskSpec(topic="t", delayMs=1)] * 9, True, None),
        ([ttypes.TaskSpec(topic="t", taskId="mine", dueAtMs=NOW + 5)], False, None)])
    assert writer.statements == 1
    assert out[0][0].created and out[0][0].dueAtMs == NOW + 1000
    assert isinstance(out[1], ttypes.InvalidTask) and (out[1].field, out[1].index) == ("delayMs", 1)
    assert out[2] == ttypes.UnknownTopic(topic="nope")
    assert isinstance(out[3], ttypes.InvalidTask) and out[3].field == "tasks"
    assert out[4][0].taskId == "mine"
    assert len(writer.rows) == 2


def test_a_retried_client_id_is_answered_as_it_was_and_a_changed_one_is_a_conflict():
    path, writer, _ = _path()
    first, = path.submit_many([([ttypes.TaskSpec(topic="t", taskId="a", delayMs=5, payload=b"x")], False, None)])
    again, changed = path.submit_many([([ttypes.TaskSpec(topic="t", taskId="a", delayMs=5, payload=b"x")], False, None),
                                       ([ttypes.TaskSpec(topic="t", taskId="a", delayMs=5, payload=b"y")], False, None)])
    assert first[0].created and not again[0].created
    assert changed == ttypes.Conflict(taskId="a", reason="exists with different content")


def test_a_new_task_takes_the_service_defaults_and_its_own_values_over_them():
    path, writer, _ = _path()
    path.submit_many([([ttypes.TaskSpec(topic="t", taskId="d", delayMs=5),
                        ttypes.TaskSpec(topic="t", taskId="o", delayMs=5, maxRetries=0, ttrMs=0)], True, None)])
    assert (writer.rows["d"].max_retries, writer.rows["d"].ttr_ms) == (2, 5_000)
    assert (writer.rows["o"].max_retries, writer.rows["o"].ttr_ms) == (0, 0)
    assert writer.rows["d"].created_ms == NOW and not writer.rows["d"].payload


def test_soon_due_tasks_go_to_our_shards_and_into_memory_later_ones_anywhere():
    path, writer, queue = _path()
    path.submit_many([([ttypes.TaskSpec(topic="t", taskId=f"n{i}", delayMs=1_000) for i in range(3)]
                       + [ttypes.TaskSpec(topic="t", taskId=f"f{i}", delayMs=3_600_000) for i in range(3)], True, None)])
    assert {writer.rows[f"n{i}"].shard_id for i in range(3)} <= {0, 1}
    assert {e.task_id for e in queue.entries_of("t")} == {"n0", "n1", "n2"}


def test_a_rate_limited_topic_spreads_even_its_soon_due_tasks_over_every_shard():
    path, writer, _ = _path(rated=["r"])
    path.submit_many([([ttypes.TaskSpec(topic="r", delayMs=1_000) for _ in range(3)], True, None)] * 30)
    assert {t.shard_id for t in writer.rows.values()} == {0, 1, 2, 3}


def test_a_writer_failure_is_every_call_s_internal_error():
    path, writer, _ = _path()

    def broken(groups):
        raise RuntimeError("boom")
    writer.insert_groups = broken  # type: ignore[method-assign]
    out = path.submit_many([([ttypes.TaskSpec(topic="t", delayMs=1)], False, None)] * 2)
    assert all(isinstance(o, TApplicationException) for o in out)
