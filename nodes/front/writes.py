"""SubmitWrites: how a group of submit calls reaches MySQL — in one statement, or streamed in parts.

A group of calls is checked and converted (delayq.nodes.front.newtasks.NewTasks), then written
through delayq.store.submits.TaskWriter one of two ways:

- in one statement (`_in_one`): every call checked first, the tasks of those that passed written
  together; the only way when a client chose a task id, which may exist already, or a task holds
  its key (a dedup mode: that call gets a transaction of its own, delayq.store.keyed);
- streamed (`_streamed`): at least STREAM_ROWS tasks, every id generated here: parts of
  STREAM_PART tasks go to MySQL inside one transaction while the next part is checked, so MySQL
  writes while Python prepares. A refusal or a lock conflict rolls it back and the group goes the
  first way. Why these sizes: docs/ARCHITECTURE.md, "Submits".

Each call keeps its own result: its Submitted rows, or its own exception.
"""
from __future__ import annotations

import os
from typing import Iterator, Sequence

from delayq import errors
from delayq.client.gen.delayq_thrift import ttypes
from delayq.nodes.front.newtasks import NewTasks
from delayq.store.submits import TaskWriter
from delayq.store.values import NewTask, Submitted

STREAM_ROWS = 256
STREAM_PART = 128

Calls = Sequence[tuple[Sequence[ttypes.TaskSpec] | None, bool]]      # (specs, batch) per call
Committed = list[tuple[list[NewTask], list[Submitted]]]


def new_task_ids(now_ms: int, n: int) -> Iterator[str]:
    """Task ids for up to n tasks: time-ordered (keeps InnoDB inserts near the end of the primary
    key) and unguessable; one read of the system's random source for all of them."""
    prefix, rand = f"{now_ms:011x}", os.urandom(8 * n).hex()
    return (prefix + rand[16 * i:16 * i + 16] for i in range(n))


class _Refused(Exception):
    """A call of a streamed group failed its checks: the group goes the other way."""


def streamable(calls: Calls) -> bool:
    """Large enough, and every task's id generated here, so none can exist already and no row
    needs looking up first."""
    if sum(len(specs) for specs, _ in calls if specs) < STREAM_ROWS:
        return False
    return all(specs and all(spec is not None and spec.taskId is None and not spec.onKeyConflict for spec in specs)
               for specs, _ in calls)


class SubmitWrites:
    def __init__(self, writer: TaskWriter, new_tasks: NewTasks):
        self._writer, self._prepare = writer, new_tasks.prepare

    def write(self, calls: Calls, now: int) -> tuple[list, Committed]:
        """Per call its list of Submitted or its exception; and what was committed, per call that was."""
        done = self._streamed(calls, now) if streamable(calls) else None
        return done if done is not None else self._in_one(calls, now)

    def _in_one(self, calls: Calls, now: int) -> tuple[list, Committed]:
        out: list = [None] * len(calls)
        prepared: list[tuple[int, list[NewTask]]] = []
        ids = new_task_ids(now, sum(len(specs) for specs, _ in calls if specs))
        for i, (specs, batch) in enumerate(calls):
            try:
                prepared.append((i, self._prepare(specs, batch, now, ids, 0, None)))
            except Exception as e:  # noqa: BLE001 - this call's own failure, answered by the caller
                out[i] = e
        committed: Committed = []
        if prepared:
            done: list[list[Submitted] | Exception]
            try:
                done = list(self._writer.insert_groups([new for _, new in prepared]))
            except Exception as e:  # noqa: BLE001 - every call of the statement shares it
                done = [e] * len(prepared)
            for (i, new), result in zip(prepared, done):
                out[i] = result
                if not isinstance(result, Exception):
                    committed.append((new, result))
        return out, committed

    def _streamed(self, calls: Calls, now: int) -> tuple[list, Committed] | None:
        """None when a call is refused or MySQL ran into a lock conflict: nothing is written then,
        and _in_one answers each call. A refusal late in a large batch costs MySQL the parts
        already sent, written and rolled back: no more than the batch itself would. When MySQL
        fails, every call gets that failure, also calls not yet checked."""
        ids = new_task_ids(now, sum(len(specs) for specs, _ in calls if specs))
        prepared: list[list[NewTask]] = []
        try:
            with self._writer.inserting() as send:
                waiting: list[NewTask] = []
                for specs, batch in calls:
                    assert specs        # streamable() lets only calls with tasks through
                    new: list[NewTask] = []
                    for first in range(0, len(specs), STREAM_PART):
                        try:
                            part = self._prepare(specs, batch, now, ids, first, first + STREAM_PART)
                        except Exception as e:  # noqa: BLE001 - answered by _in_one, which checks again
                            raise _Refused from e
                        new += part
                        waiting += part
                        if len(waiting) >= STREAM_PART:
                            send(waiting)
                            waiting = []
                    prepared.append(new)
                if waiting:
                    send(waiting)
        except _Refused:
            return None
        except errors.StoreUnavailable as e:
            if e.code in errors.LOCK_CONFLICTS:
                return None          # rolled back; insert_groups runs it again
            return [e] * len(calls), []
        except Exception as e:  # noqa: BLE001 - every call of the transaction shares it
            return [e] * len(calls), []
        done = [[Submitted(t.task_id, t.shard_id, t.due_ms, True) for t in new] for new in prepared]
        return done, list(zip(prepared, done))
