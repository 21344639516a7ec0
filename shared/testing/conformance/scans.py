"""What the loader relies on from a window scan (delayq.store.tasks.TaskStore.scan_due and
scan_topic, read by delayq.nodes.memory.loader), held by the in-memory ClaimTable and by MySQL
alike (docs/ARCHITECTURE.md, invariant 1):

- a scan reads the DELAY tasks of the shards asked for, due in [from, before), earliest first,
  at most `limit`, each with its topic, but for the paused topics it skips;
- a task in flight is not read, nor one of another shard;
- a limited topic's scan reads its earliest tasks due before `before`, overdue ones included.
"""
from __future__ import annotations

from delayq.store.values import Entry
from delayq.testing.conformance.claims import now
from delayq.testing.conformance.records import claimed
from delayq.testing.conformance.tables import NewRow, TaskTable


class WindowScanExpectations:
    """Run by a test class that provides the fixture `tasks`, a TaskTable."""

    def test_a_scan_reads_the_due_tasks_of_its_shards_in_its_range_earliest_first(self, tasks: TaskTable):
        t = now()
        for task_id, shard, due in (("late", 1, t + 500), ("early", 2, t + 100), ("before", 1, t - 1),
                                    ("after", 1, t + 1000), ("elsewhere", 3, t + 200)):
            tasks.add(NewRow(task_id, shard, due, topic="orders"))
        assert tasks.scans.scan_due({1, 2}, t + 1000, 10, from_ms=t) == [
            Entry("early", 2, t + 100, topic="orders"), Entry("late", 1, t + 500, topic="orders")]
        assert [e.task_id for e in tasks.scans.scan_due({1, 2}, t + 1000, 1, from_ms=t)] == ["early"]
        assert tasks.scans.scan_due(set(), t + 1000, 10) == []

    def test_a_scan_skips_paused_topics_and_tasks_in_flight(self, tasks: TaskTable):
        t = now()
        claimed(tasks, NewRow("flying", 1, t), t)
        tasks.add(NewRow("paused", 1, t, topic="paused"))
        tasks.add(NewRow("waiting", 1, t, topic="open"))
        assert [e.task_id for e in tasks.scans.scan_due({1}, t + 1, 10, skip=("paused",))] == ["waiting"]

    def test_a_topic_scan_reads_its_earliest_tasks_overdue_ones_included(self, tasks: TaskTable):
        t = now()
        for task_id, due, topic in (("old", t - 60_000, "slow"), ("next", t + 10, "slow"),
                                    ("later", t + 20, "slow"), ("other", t, "fast"), ("future", t + 5000, "slow")):
            tasks.add(NewRow(task_id, 1, due, topic=topic))
        claimed(tasks, NewRow("flying", 1, t - 90_000, topic="slow"), t)
        assert [e.task_id for e in tasks.scans.scan_topic({1}, "slow", t + 1000, 2)] == ["old", "next"]
        assert tasks.scans.scan_topic({1}, "slow", t + 1000, 10)[-1] == Entry("later", 1, t + 20, topic="slow")
        assert tasks.scans.scan_topic({2}, "slow", t + 1000, 10) == []
