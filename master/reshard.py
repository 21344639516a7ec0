"""Online resharding: change a running cluster's logical shard count from N to M.

    1. grow: create job_shard rows N..M-1.  Record intent shards=M in ZooKeeper; the master assigns
       every shard row and tells nodes that new tasks go to shards 0..M-1 only ("active").
    2. Move, in batches, the tasks that must move, and only those no node can hold in memory:
       in flight (READY/RUNNING: their attempt is unaffected), or due beyond the window plus a margin.
         grow   a task moves to CRC32(id) % M when that is one of the new shards (about (M-N)/M of them)
         shrink a task on a shard >= M moves to CRC32(id) % M
       Tasks due sooner stay where they are and fire from their owner; when shrinking, the loop
       waits for them to fire (or to become movable) before going on.
    3. shrink: delete job_shard rows >= M (moving any straggler), record shard_count=M, clear the
       intent; the master reassigns over M shards.

Nothing is lost or fired twice: a claim only takes a task of a shard its node holds at its epoch
and re-reads the row under lock, so a memory copy left behind by a move can only fail to claim.

Run by the `delayq reshard` command and by a node serving an admin's `reshard` call
(delayq.nodes.front.admin). Each step is idempotent: a run stopped anywhere is resumed by running
it again with the same target. Two runs to the same target at once only share the work; a run to
another target is refused while one is recorded in the intents.
"""
from __future__ import annotations

import dataclasses
import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable

from kazoo.exceptions import KazooException, NoNodeError
from sqlalchemy import Engine, delete, func, insert, select, update

from delayq import tables
from delayq.clock import Clock
from delayq.db import retry_lock_conflicts, unavailable_on_failure
from delayq.errors import Unavailable
from delayq.lifecycle import Status
from delayq.master.intents import Call, read_intents, update_intents
from delayq.schema import shard_count
from delayq.zkpaths import AssignmentDoc, Intents, ZkPaths

log = logging.getLogger(__name__)
TASK, SHARD, META = tables.task, tables.shard, tables.meta
MARGIN_MS = 60_000


def _crc(m: int):
    return func.crc32(TASK.c.task_id) % m


def _movable(current: int, target: int, far_ms: int):
    """The WHERE clause of the rows to move now, and what it moves them to."""
    if target > current:
        must = (_crc(target) >= current) & (TASK.c.shard_id != _crc(target))
    else:
        must = TASK.c.shard_id >= target
    safe = TASK.c.status.in_([int(Status.READY), int(Status.RUNNING)]) | (TASK.c.due_ms > far_ms)
    return must & safe, must


@dataclass(frozen=True)
class Plan:
    current: int
    target: int
    rows_per_shard: dict[int, int]      # shard -> live rows that will move out of it

    @property
    def rows(self) -> int:
        return sum(self.rows_per_shard.values())


def plan(engine: Engine, target: int) -> Plan:
    with unavailable_on_failure(), engine.connect() as conn:
        current = shard_count(conn)
        _, must = _movable(current, target, 0)
        counts = {r.shard_id: r.n for r in conn.execute(
            select(TASK.c.shard_id, func.count().label("n")).where(must).group_by(TASK.c.shard_id))}
    return Plan(current, target, dict(sorted(counts.items())))


def refusal(intents: Intents, target: int) -> str | None:
    """Why a reshard to `target` may not start now, or None."""
    if intents.shards not in (None, target):
        return f"a reshard to {intents.shards} shards is in progress: run it again with {intents.shards} shards"
    return None


class Conflict(Exception):
    """Another reshard's target is recorded (the message says which)."""


def claim(call: Call, paths: ZkPaths, target: int) -> None:
    """Record `target` as the reshard in progress, unless another target is (Conflict): written
    with a version check, so two runs to different targets never both go ahead."""
    def change(i: Intents) -> Intents:
        problem = refusal(i, target)
        if problem is not None:
            raise Conflict(problem)
        return dataclasses.replace(i, shards=target)
    update_intents(call, paths, change)


def _release(call: Call, paths: ZkPaths, target: int) -> None:
    def change(i: Intents) -> Intents:
        if i.shards != target:
            raise Conflict(f"the reshard recorded is now {i.shards}, not {target}: left to that one")
        return dataclasses.replace(i, shards=None)
    update_intents(call, paths, change)


class Stopped(Exception):
    """The run was asked to stop (its node is stopping); run it again to resume."""


class Resharder:
    """Runs the procedure above. `call` makes ZooKeeper calls (delayq.master.intents); `progress(moved)`
    is called per batch; setting `stop` ends the run between batches (Stopped)."""

    def __init__(self, engine: Engine, call: Call, paths: ZkPaths, clock: Clock, *, window_ms: int, scan_ms: int,
                 margin_ms: int = MARGIN_MS, batch: int = 5000, stop: threading.Event | None = None):
        self._engine, self._call, self._paths, self._clock = engine, call, paths, clock
        # Beyond this from now, no node holds a task in memory (its window, two scans, and room
        # for clocks that disagree or a node configured with a longer window).
        self._far_ms = window_ms + 2 * scan_ms + margin_ms
        self._batch = batch
        self._stop = stop or threading.Event()

    def run(self, target: int, progress: Callable[[int], None], timeout_s: float) -> int:
        """Conflict when another target is recorded; TimeoutError, Stopped, or MySQL's and
        ZooKeeper's errors stop it part way: running it again resumes."""
        deadline = time.monotonic() + timeout_s
        claim(self._call, self._paths, target)
        with unavailable_on_failure(), self._engine.begin() as conn:
            current = shard_count(conn)
            if target > current:
                have = {r.shard_id for r in conn.execute(select(SHARD.c.shard_id))}
                conn.execute(insert(SHARD), [{"shard_id": s, "owner": None, "epoch": 0, "updated_ms": self._clock.now_ms()}
                                         for s in range(current, target) if s not in have])
        self._wait_assignment(lambda d: d.active == target and len(d.shards) >= max(current, target), deadline)
        moved = self._move(current, target, progress, deadline)
        if target < current:
            moved += self._finish_shrink(target)
        if read_intents(self._call, self._paths).shards != target:
            raise Conflict(f"the reshard recorded changed while this one to {target} ran")
        with unavailable_on_failure(), self._engine.begin() as conn:
            conn.execute(update(META).where(META.c.name == "shard_count").values(value=str(target)))
        _release(self._call, self._paths, target)
        self._wait_assignment(lambda d: len(d.shards) == target and d.active == target, deadline)
        log.info("resharded from %d to %d shards: %d tasks moved", current, target, moved)
        return moved

    def _move(self, current: int, target: int, progress: Callable[[int], None], deadline: float) -> int:
        moved = 0
        while True:
            far = self._clock.now_ms() + self._far_ms
            where, must = _movable(current, target, far)
            n = self._move_batch(where, target)
            moved += n
            if n:
                progress(n)
                self._pause(0)
                continue
            if target > current:
                return moved     # growing: tasks due soon may stay on their old shards
            with unavailable_on_failure(), self._engine.connect() as conn:
                left = conn.execute(select(func.count()).where(must)).scalar_one()
            if not left:
                return moved
            if time.monotonic() > deadline:
                raise TimeoutError(f"{left} tasks due soon are still on shards >= {target}")
            self._pause(0.5)     # they fire within the window, or become movable

    def _move_batch(self, where, target: int) -> int:
        """Pick a batch with a plain read, then move those rows by primary key (the condition checked
        again under their locks). An UPDATE filtered on CRC32() would lock every row it scans and
        deadlock with claims and submits."""
        def move() -> int:
            with unavailable_on_failure(), self._engine.begin() as conn:
                ids = [r.task_id for r in conn.execute(select(TASK.c.task_id).where(where).limit(self._batch))]
                if not ids:
                    return 0
                return conn.execute(update(TASK).where(TASK.c.task_id.in_(ids), where)
                                    .values(shard_id=_crc(target))).rowcount
        return retry_lock_conflicts(move, pause=self._pause)

    def _finish_shrink(self, target: int) -> int:
        with unavailable_on_failure(), self._engine.begin() as conn:
            conn.execute(delete(SHARD).where(SHARD.c.shard_id >= target))
            # A task a node put on a draining shard since the last batch: move it too.
            return conn.execute(update(TASK).where(TASK.c.shard_id >= target).values(shard_id=_crc(target))).rowcount

    def _wait_assignment(self, done: Callable[[AssignmentDoc], bool], deadline: float) -> None:
        while True:
            try:
                doc = AssignmentDoc.decode(self._call("get", self._paths.assignment)[0])
            except NoNodeError:      # before a master wrote one: keep waiting
                doc = AssignmentDoc(0)
            except (KazooException, Unavailable) as e:       # ZooKeeper away for a moment: keep waiting
                log.info("reshard: could not read the assignment (%s); waiting", e)
                doc = AssignmentDoc(0)
            if done(doc):
                return
            if time.monotonic() > deadline:
                raise TimeoutError("the master did not apply the reshard in time (is a master running?)")
            self._pause(0.2)

    def _pause(self, seconds: float) -> None:
        if self._stop.wait(seconds):
            raise Stopped("stopped before the end; run it again to resume")


@dataclass(frozen=True)
class Progress:
    current: int
    target: int
    running: bool
    moved: int
    error: str | None = None


class ReshardJob:
    """A node's reshard, started by an admin call: one run at a time, on a thread of its own
    ("reshard") that `stop()` ends between batches. The caller polls `progress`."""

    def __init__(self, make: Callable[[threading.Event], Resharder], timeout_s: float = 3600.0):
        self._make, self._timeout_s = make, timeout_s
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._progress: Progress | None = None
        self._told = False          # the last run's error was answered once

    def start(self, current: int, target: int) -> tuple[Progress, bool]:
        """(progress, started): a run to `target` started unless one is running (its progress),
        or the last one to it stopped on an error not yet answered (that, once: the next call
        resumes it)."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                assert self._progress is not None     # set before the thread started
                return self._progress, False
            if self._stop.is_set():
                raise Unavailable("the node is stopping")
            last = self._progress
            if last is not None and last.target == target and last.error is not None and not self._told:
                self._told = True
                return last, False
            self._told = False
            self._progress = Progress(current, target, True, 0)
            self._thread = threading.Thread(target=self._run, args=(target,), name="reshard", daemon=True)
            self._thread.start()
            return self._progress, True

    @property
    def progress(self) -> Progress | None:
        with self._lock:
            return self._progress

    def _run(self, target: int) -> None:
        def moved(n: int) -> None:
            with self._lock:
                assert self._progress is not None     # start() set it before this run
                self._progress = dataclasses.replace(self._progress, moved=self._progress.moved + n)
        error = None
        try:
            self._make(self._stop).run(target, moved, self._timeout_s)
        except (Stopped, TimeoutError, Conflict) as e:
            error = str(e)
        except Exception as e:  # noqa: BLE001 - MySQL or ZooKeeper down: reported, resumed by calling again
            log.warning("reshard to %d shards stopped: %s", target, e)
            error = f"stopped: {e}"
        with self._lock:
            assert self._progress is not None
            self._progress = dataclasses.replace(self._progress, running=False, error=error)

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join(10)
