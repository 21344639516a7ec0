"""What the submit path relies on from the writer of new tasks (delayq.store.submits.TaskWriter,
groups that hold no key), held by the in-memory TaskInserts and by MySQL alike:

- new tasks are written and answered created, at their shard and due time;
- a client's id seen before, with the same content, is answered as it was written (its shard
  and due time, not the retry's), not created, and changes nothing;
- one seen with other content is its group's Conflict: nothing of that group is written, the
  other groups of the call are;
- a later group of one call sees an earlier group's tasks.
"""
from __future__ import annotations

from delayq.errors import Conflict
from delayq.store.values import NewTask, Outcome, Submitted
from delayq.testing.conformance.claims import now
from delayq.testing.conformance.tables import TaskTable


def task(task_id: str, due_ms: int, content: bytes = b"x", shard: int = 1) -> NewTask:
    return NewTask(task_id, "t", shard, due_ms, content, content.ljust(16, b"."), 3, 3000, due_ms)


class InsertExpectations:
    """Run by a test class that provides the fixture `tasks`, a TaskTable."""

    def test_new_tasks_are_written_and_answered_created(self, tasks: TaskTable):
        t = now()
        assert tasks.inserts.insert_groups([[task("a", t), task("b", t + 1, shard=2)]]) == [
            [Submitted("a", 1, t, True), Submitted("b", 2, t + 1, True)]]
        assert (tasks.written("a"), tasks.written("b")) == ((1, t), (2, t + 1))

    def test_a_retried_client_id_is_answered_as_it_was_written(self, tasks: TaskTable):
        t = now()
        tasks.inserts.insert_groups([[task("a", t)]])
        retried = task("a", t + 5000, shard=2)          # the retry computed another due time and shard
        assert tasks.inserts.insert_groups([[retried]]) == [[Submitted("a", 1, t, False, Outcome.DEDUPLICATED)]]
        assert tasks.written("a") == (1, t)

    def test_a_client_id_with_other_content_is_its_groups_conflict_alone(self, tasks: TaskTable):
        t = now()
        tasks.inserts.insert_groups([[task("a", t)]])
        out = tasks.inserts.insert_groups([[task("new", t), task("a", t, b"other")], [task("fine", t)]])
        assert isinstance(out[0], Conflict) and out[0].task_id == "a"
        assert out[1] == [Submitted("fine", 1, t, True)]
        assert (tasks.written("new"), tasks.written("fine")) == (None, (1, t))

    def test_a_later_group_of_one_call_sees_an_earlier_groups_task(self, tasks: TaskTable):
        t = now()
        out = tasks.inserts.insert_groups([[task("a", t)], [task("a", t + 10, shard=2)], [task("a", t, b"other")]])
        assert out[:2] == [[Submitted("a", 1, t, True)], [Submitted("a", 1, t, False, Outcome.DEDUPLICATED)]]
        assert isinstance(out[2], Conflict)
        assert tasks.written("a") == (1, t)
