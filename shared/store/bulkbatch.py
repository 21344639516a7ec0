"""One batch of a bulk job's lane, in one short transaction:

1. the job row, read without a lock: still RUNNING and this node's, else nothing is done;
2. the next task ids of the lane's share of its snapshot (by a hash of the task id, which
   nothing changes) after the lane's cursor, in its walk's order (delayq.store.bulkwalk: by key,
   by due time or by task id), read without locks;
3. of those, the ones that still match and are in the action's state, locked by primary key —
   the same check as a single cancel or reschedule (delayq.store.requests), so a task a claim
   took first is passed over, and one changed first is claimed by nobody at its old state;
4. the change (cancel: to the backlog; reschedule: the new due time; redrive: back to DELAY, but
   a task whose key another live task holds, left FAILED: delayq.store.redrives); a reschedule
   passes over a task whose new due time would lie beyond the horizon (DELAYQ_MAX_HORIZON_MS)
   from the batch's time, as a submit or a single reschedule refuses one: a shift's new times are
   known only task by task, so the job cannot be refused up front, and such a task is left as it
   is and counted as skipped;
5. the job row, locked: still RUNNING, still this node's, the lane's cursor where the runner
   last left it — else the batch rolls back (the job was stopped, or another node took it over)
   — then the lane's cursor past the last task read, the counts, the lease renewed, DONE at the end.

The job row is locked last, for the batch's commit only, so the lanes' batches run side by side;
locked first, it would make them take turns. Every task is changed once (docs/ARCHITECTURE.md,
invariant 10): a batch's changes and its lane's cursor commit together, lanes share no task, a
walk meets no task twice (delayq.store.bulkwalk says why for each), and a batch run again from an old cursor (a node that lost the job without knowing) finds the cursor
moved and rolls back. Only the rows changed are locked, each for the batch's few milliseconds: a
dispatch that wants one waits no longer than for a single cancel.
"""
from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, Engine, select, update

from delayq import tables
from delayq.bulk import Action, State, lane_done
from delayq.db import unavailable_on_failure
from delayq.errors import LOCK_CONFLICTS, StoreUnavailable
from delayq.lifecycle import Status
from delayq.statementlimits import time_limited
from delayq.store.backlog import BY_ID, move_locked
from delayq.store.bulkjobs import JOB, Job, cursors_of, lane_cursors, lane_of, snapshot_where, table_of
from delayq.store.bulkwalk import next_ids
from delayq.store.redrives import KeyTaken, redrive_locked

TASK, BACKLOG = tables.task, tables.backlog
RUNS = 3            # a batch that deadlocked with a claim, or overtook the job's count, runs again
# A lane's next ids are read by primary key, checking the filter on each row passed: a filter that
# few tasks of a big table match (a rare tag) can read for seconds. The server stops that read after
# READ_S (StatementStopped); stopped twice at the same place, the job ends FAILED, saying so, rather
# than reading again every second (delayq.nodes.bulkrunner).
READ_S = 3.0


@dataclass(frozen=True)
class Batch:
    """What a lane's next batch is to do: its job, which lane, and where that lane stands."""
    job: Job
    lane: int           # lane k of the job's n: the tasks with lane_of(task_id, n) = k
    cursor: str         # the last task id this lane passed
    size: int           # task ids it reads at most


@dataclass(frozen=True)
class Moved:
    """A task a batch left DELAY (rescheduled or redriven): where memory may want it."""
    task_id: str
    shard_id: int
    due_ms: int


@dataclass(frozen=True)
class BatchResult:
    ours: bool                  # False: the job was stopped or taken over; this batch changed nothing
    changed: tuple[str, ...] = ()
    moved: tuple[Moved, ...] = ()   # of those, the ones now DELAY at a new time
    cursor: str = ""            # the lane's, after this batch
    state: State = State.RUNNING    # the job's


class _Rollback(Exception):
    """Raised inside a batch's transaction to undo it."""
    def __init__(self, room: int | None = None):
        super().__init__()
        self.room = room        # None: the job is not ours; a count: it may change only this many


def run_batch(engine: Engine, batch: Batch, node: str, now_ms: int, lease_ms: int, read_s: float = READ_S, *,
              max_horizon_ms: int) -> BatchResult:
    """The lane's next batch of at most `batch.size` task ids after `batch.cursor`; its read of
    them stopped after read_s. A reschedule moves no task past now_ms + max_horizon_ms."""
    room = None
    for run in range(RUNS):
        try:
            with unavailable_on_failure(), engine.begin() as conn:
                # READ COMMITTED: the job row, read first without a lock, is then locked as it is
                # now (under REPEATABLE READ with innodb_snapshot_isolation, another lane's commit in
                # between fails the lock, error 1020), and the locking reads take no gap locks. For
                # this transaction only: the connection goes back to the pool as it came.
                conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
                return _batch(conn, batch, node, now_ms, lease_ms, room, read_s, now_ms + max_horizon_ms)
        except _Rollback as e:
            if e.room is None:
                return BatchResult(ours=False)
            room = e.room       # other lanes changed the rest of the job's count meanwhile
        except KeyTaken:
            pass                # a redrive's key taken meanwhile: run again, finding its holder
        except StoreUnavailable as e:
            if e.code not in LOCK_CONFLICTS or run == RUNS - 1:
                raise
    return BatchResult(ours=True, cursor=batch.cursor)      # nothing changed: the next batch looks again


def _batch(conn: Connection, batch: Batch, node: str, now_ms: int, lease_ms: int, room: int | None,
           read_s: float, latest_ms: int) -> BatchResult:
    job, lane = batch.job, batch.lane
    spec, upto, lanes = job.spec, job.progress.upto, len(job.progress.cursors)
    seen = _ours(conn.execute(select(JOB.c.state, JOB.c.lease_owner, JOB.c.changed, JOB.c.total)
                              .where(JOB.c.job_id == job.job_id)).first(), node)
    t = table_of(spec.action)
    where = snapshot_where(spec, t, upto, job.created_ms)
    share = [lane_of(t.c.task_id, lanes) == lane] if lanes > 1 else []
    with time_limited(conn, read_s):        # the batch's one limited statement (StatementStopped)
        step = next_ids(conn, t, [*where, *share], batch.cursor, batch.size, upto)
    ids = step.ids
    room = seen.total - seen.changed if room is None else room
    changed, moved = _change(conn, job, ids, where, now_ms, room, latest_ms) if ids and room > 0 else ((), ())
    # Last, the job row, locked: the batch commits only if the job and the lane are where it began.
    row = _ours(conn.execute(select(JOB.c.state, JOB.c.lease_owner, JOB.c.cursor_id, JOB.c.lane_cursors, JOB.c.changed,
                                    JOB.c.total).where(JOB.c.job_id == job.job_id).with_for_update()).first(), node)
    cursors = list(cursors_of(row))
    if cursors[lane] != batch.cursor:
        raise _Rollback()
    if row.changed + len(changed) > row.total:
        raise _Rollback(room=row.total - row.changed)
    total_changed = row.changed + len(changed)
    cursors[lane] = step.cursor
    done = all(lane_done(c, upto) for c in cursors) or total_changed >= row.total
    values: dict = {**lane_cursors(tuple(cursors)), "changed": total_changed, "lease_until_ms": now_ms + lease_ms,
                    "updated_ms": now_ms}
    if done:
        # What it counted and did not change had fired, ended or changed meanwhile, or a reschedule
        # would have taken it past the horizon.
        values.update(state=State.DONE.value, finished_ms=now_ms, skipped=max(0, row.total - total_changed),
                      lease_owner=None, lease_until_ms=0)
    conn.execute(update(JOB).where(JOB.c.job_id == job.job_id).values(**values))
    return BatchResult(True, changed, moved, cursors[lane], State.DONE if done else State.RUNNING)


def _ours(row, node: str):
    """The job's row, if the job still runs and is this node's; else the batch rolls back."""
    if row is None or row.state != State.RUNNING.value or row.lease_owner != node:
        raise _Rollback()
    return row


def _change(conn: Connection, job: Job, ids: list[str], where: list, now_ms: int, room: int, latest_ms: int
            ) -> tuple[tuple[str, ...], tuple[Moved, ...]]:
    """The batch's changes, at most `room` of them: never more than the count the job showed; a
    reschedule's new due times no later than latest_ms (the horizon from the batch's time)."""
    spec = job.spec
    t = table_of(spec.action)
    if spec.action is Action.RESCHEDULE:
        # Part of the locking read's condition, so `room` counts only the tasks that will change.
        if spec.shift_ms is not None:
            where = [*where, t.c.due_ms <= latest_ms - spec.shift_ms]
        elif spec.due_at_ms is not None and spec.due_at_ms > latest_ms:
            return (), ()       # refused at the request; a node with a shorter horizon leaves them too
    if spec.action is Action.REDRIVE:
        # Locked without the room's limit: the tasks left FAILED, their keys held, take none of it.
        rows = conn.execute(select(BACKLOG).with_hint(BACKLOG, BY_ID).where(BACKLOG.c.task_id.in_(ids), *where)
                            .order_by(BACKLOG.c.task_id).with_for_update()).mappings().all()
        if not rows:
            return (), ()
        # A task whose key another live task holds stays FAILED, unchanged: the job's `skipped`.
        new = redrive_locked(conn, rows, now_ms, most=room).rows
        return tuple(r["task_id"] for r in new), tuple(Moved(r["task_id"], r["shard_id"], now_ms) for r in new)
    locked = conn.execute(select(t.c.task_id, t.c.attempt, t.c.shard_id, t.c.due_ms).with_hint(t, BY_ID)
                          .where(t.c.task_id.in_(ids), *where).order_by(t.c.task_id).limit(room)
                          .with_for_update()).all()
    if not locked:
        return (), ()
    ids_locked = [r.task_id for r in locked]
    if spec.action is Action.CANCEL:       # locked above in the action's state (DELAY): moved as they are
        move_locked(conn, ids_locked, Status.CANCELLED, now_ms, f"cancelled by bulk job {job.job_id}: {spec.reason}"[:1024])
        return tuple(ids_locked), ()
    due = TASK.c.due_ms + spec.shift_ms if spec.shift_ms is not None else spec.due_at_ms
    conn.execute(update(TASK).with_hint(BY_ID).where(TASK.c.task_id.in_(ids_locked), TASK.c.status == int(Status.DELAY))
                 .values(due_ms=due, updated_ms=now_ms))
    return tuple(ids_locked), tuple(
        Moved(r.task_id, r.shard_id, r.due_ms + spec.shift_ms if spec.shift_ms is not None else int(spec.due_at_ms or 0))
        for r in locked)
