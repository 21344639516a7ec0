"""Bulk jobs, the pure part: what a job does (its action and filter), its states, how each batch is
sized, and the pace that holds it to its ops/s limit.

A job cancels, reschedules or redrives the tasks a filter matched when it was created (its
snapshot: the highest matching task id and the creation time, with the count shown to the
operator as its ceiling). It runs in lanes, each a share of its tasks by a hash of the task id
(lane k of n: crc32(task_id) % n = k), the lanes' batches in parallel: a batch waits on MySQL's
round trips, so one lane at a time leaves both MySQL and the node idle. A lane walks its tasks in
an order an index holds (its walk: by key or by task id; delayq.store.bulkwalk), and
its cursor, the last place it passed, is stored with each of its batches' changes, so a node that
takes the job over resumes every lane where it stood.

    RUNNING --every matching task passed, or `total` changed--> DONE
       |  \\--stop (an operator)--> STOPPED
       \\---an error that is not MySQL being away--> FAILED

The runner (delayq.nodes.bulkrunner) and the store (delayq.store.bulkjobs) use these values; the
Thrift calls (delayq.nodes.front.bulkcalls) check a request into a `Spec` with `check`.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from delayq import errors
from delayq.lifecycle import Status
from delayq.store.maintenance import TaskFilter
from delayq.textrules import control_reason, first_control

MAX_REASON = 255                # characters of a job's reason
MAX_RATE = 100_000              # ops/s a job may be given
MAX_JOBS_LISTED = 100


class Action(enum.Enum):
    CANCEL = "cancel"           # DELAY -> CANCELLED (the backlog)
    RESCHEDULE = "reschedule"   # DELAY, due at a new time (shifted, or one instant for all)
    REDRIVE = "redrive"         # FAILED (the backlog) -> DELAY, due now, with a fresh set of retries

    @property
    def acts_on(self) -> Status:
        """The state a task must be in, when its batch runs, to be changed."""
        return Status.FAILED if self is Action.REDRIVE else Status.DELAY


class State(enum.Enum):
    RUNNING = "RUNNING"
    DONE = "DONE"
    STOPPED = "STOPPED"
    FAILED = "FAILED"


@dataclass(frozen=True)
class Spec:
    """What a job does: its action on the tasks of a filter, why, and how fast."""
    action: Action
    filter: TaskFilter          # its status is the action's (acts_on)
    reason: str
    rate: int                   # ops/s
    shift_ms: int | None = None     # RESCHEDULE: each task moves by this much
    due_at_ms: int | None = None    # RESCHEDULE: every task moves to this instant
    max_tasks: int | None = None    # changes at most this many (the count the operator was shown)


def check(action: Action, f: TaskFilter, reason: str | None, rate: int | None, default_rate: int, *,
          shift_ms: int | None = None, due_at_ms: int | None = None, max_tasks: int | None = None,
          max_horizon_ms: int, now_ms: int) -> Spec:
    """A job's request checked: InvalidRequest names the field at fault. A new due time (dueAtMs)
    beyond the horizon from now is refused as a submit's is; a shift's is known only task by task,
    when its batch runs (delayq.store.bulkbatch leaves a task it would take past the horizon)."""
    if not f.topic:
        raise errors.InvalidRequest("filter.topic", "is required: a bulk job acts on one topic's tasks")
    if f.status is not None and f.status is not action.acts_on:
        raise errors.InvalidRequest("filter.status", f"a {action.value} acts on {action.acts_on.name} tasks only")
    if f.since_ms is not None and f.until_ms is not None and f.since_ms >= f.until_ms:
        raise errors.InvalidRequest("filter.dueBeforeMs", "must be later than dueFromMs")
    reason = (reason or "").strip()
    if not reason:
        raise errors.InvalidRequest("reason", f"is required: 1-{MAX_REASON} printable characters")
    if len(reason) > MAX_REASON:
        raise errors.InvalidRequest("reason", f"is {len(reason)} characters, at most {MAX_REASON} allowed")
    bad = first_control(reason)
    if bad is not None:
        raise errors.InvalidRequest("reason", control_reason(bad))
    if rate is None:
        rate = default_rate
    if not 1 <= rate <= MAX_RATE:
        raise errors.InvalidRequest("opsPerSecond", f"must be between 1 and {MAX_RATE}, got {rate}")
    if max_tasks is not None and max_tasks < 1:
        raise errors.InvalidRequest("maxTasks", f"must be at least 1, got {max_tasks}")
    if action is Action.RESCHEDULE:
        if (shift_ms is None) == (due_at_ms is None):
            raise errors.InvalidRequest("shiftMs", "a reschedule needs exactly one of shiftMs and dueAtMs")
        if shift_ms is not None and not (shift_ms and abs(shift_ms) <= max_horizon_ms):
            raise errors.InvalidRequest("shiftMs", f"must be non-zero and at most {max_horizon_ms} ms either way")
        if due_at_ms is not None and due_at_ms < 0:
            raise errors.InvalidRequest("dueAtMs", f"must not be negative, got {due_at_ms}")
        if due_at_ms is not None and due_at_ms > now_ms + max_horizon_ms:
            raise errors.InvalidRequest("dueAtMs", f"is beyond the horizon of {max_horizon_ms} ms from now")
    elif shift_ms is not None or due_at_ms is not None:
        raise errors.InvalidRequest("shiftMs", f"only a reschedule moves tasks, not a {action.value}")
    return Spec(action, TaskFilter(topic=f.topic, since_ms=f.since_ms, until_ms=f.until_ms, status=action.acts_on,
                                   key_prefix=f.key_prefix, tag=f.tag),
                reason, rate, shift_ms, due_at_ms, max_tasks)


# A lane's cursor is a string. By task id: "" before the first batch, then the last task id
# passed (the lane is done at the snapshot's highest id). By key: WALK_BY_KEY, followed by the JSON
# of the last place passed once there is one; PAST_END when the lane has passed its last task.
# Task ids sort below "~" (letters, digits and ".:_-"), so a node of an earlier version, which
# knows only the walk by task id, finds each lane of a walk by key past its end: it changes none of
# its tasks and leaves the job to a node that knows the walk.
WALK_BY_KEY, PAST_END = "~k", "~~"


def first_cursor(spec: Spec) -> str:
    """Where each lane of a new job starts, which also says how it walks (delayq.store.bulkwalk):
    by key when the filter has a key prefix, else by task id."""
    return WALK_BY_KEY if spec.filter.key_prefix is not None else ""


def lane_done(cursor: str, upto: str) -> bool:
    """The lane at this cursor has passed every task of a job whose snapshot ends at task id upto."""
    if upto == "" or cursor == PAST_END:
        return True
    return cursor < "~" and cursor >= upto


@dataclass(frozen=True)
class Progress:
    """Where a job stands, as its row holds it."""
    total: int                  # tasks matching when it was created (capped by the count shown)
    changed: int                # tasks this job changed
    skipped: int                # tasks of its snapshot left unchanged: fired or changed before their batch ran,
                                # or (a shift) their new due time past the horizon then
    cursors: tuple[str, ...]    # per lane, the last place it passed (see first_cursor)
    upto: str                   # the snapshot's highest task id

    @property
    def remaining(self) -> int:
        return max(0, self.total - self.changed)

    def lane_done(self, lane: int) -> bool:
        return lane_done(self.cursors[lane], self.upto)


def batch_size(p: Progress, lane: int, rate: int, most: int) -> int:
    """How many tasks a lane's next batch reads: at most `most`, at most its share of a second of
    the job's rate (so its lease renewals are never more than a second apart at any rate), and no
    more than the job may still change. 0: the lane is done."""
    if p.remaining == 0 or p.lane_done(lane):
        return 0
    return max(1, min(most, rate // len(p.cursors), p.remaining))


class Pacer:
    """A token bucket of `rate` ops/s with a second's burst, on an injected clock (seconds):
    `wait(n)` says how long to sleep before n ops may run, and takes them."""

    def __init__(self, rate: int, now: float):
        self.rate = rate
        self._tokens, self._at = float(rate), now

    def wait(self, n: int, now: float) -> float:
        self._tokens = min(float(self.rate), self._tokens + (now - self._at) * self.rate)
        self._at = now
        self._tokens -= n
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate

