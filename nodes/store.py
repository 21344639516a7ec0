"""TaskStore: every read and write of tasks, one transaction per unit of work.

The hot paths (submit, window scan, claim, execlog, finishing fire-and-forget tasks) run fixed SQL
text through the driver (`exec_driver_sql`): building and compiling a Core statement with a
thousand-element IN list cost more CPU than the round trip it describes. Everything else is
SQLAlchemy Core. Submits are written through an autocommit engine (see insert_groups and
inserting), the rest through a transactional one; both come from shared.db.make_engine, so
timeouts and error translation are the same.

MySQL is the truth (ARCHITECTURE invariant 1). Each state change is conditional on the row's
current status and attempt, so whatever races it (another node, a late report, a stale memory
entry) it either applies once or changes nothing. The claim is fenced (invariant 3): it locks the
shard rows in share mode and only takes tasks of shards this node owns at its epoch.

Thread-safe: it holds only its two engines; each call checks a connection out of a pool.
"""
from __future__ import annotations

import contextlib
import logging
import random
import re
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Mapping, NamedTuple, Sequence

import sqlalchemy.exc
from pymysql.constants import COMMAND
from sqlalchemy import Connection, Engine, case, func, insert, literal, or_, select, update

from shared import tables
from shared.db import unavailable_on_failure
from shared.errors import LOCK_CONFLICTS, Conflict, NotFound, StoreUnavailable
from shared.lifecycle import FINAL, Decision, Result, RetryPolicy, Status, on_result
from nodes.delayqueue import Entry

log = logging.getLogger(__name__)
T, X, B, S = tables.task, tables.execlog, tables.backlog, tables.shard

# A fire-and-forget attempt (ttr 0) claimed by another node (dead, or no longer the shard's owner)
# and still not confirmed after this is dispatched again. A node's own such claims are never timed
# out by itself: its publisher and recorder settle every one of them.
UNCONFIRMED_GRACE_MS = 2_000
UNRECORDED = "UNRECORDED"         # execlog result: claimed, timed out, no publish ever recorded


class NewTask(NamedTuple):
    task_id: str
    topic: str
    shard_id: int
    due_ms: int
    payload: bytes
    spec_hash: bytes
    max_retries: int
    ttr_ms: int
    created_ms: int
    client_id: bool = True      # chosen by the client (may exist already); False: generated here, unique


class Submitted(NamedTuple):
    task_id: str
    shard_id: int
    due_ms: int
    created: bool


@dataclass(frozen=True)
class Claimed:
    """A task this node won the right to dispatch, as attempt number `attempt`."""
    task_id: str
    topic: str
    shard_id: int
    due_ms: int
    attempt: int
    payload: bytes
    ttr_ms: int
    max_retries: int


@dataclass(frozen=True)
class Transition:
    """The outcome of a result or timeout: applied or not, and the task's state after it."""
    applied: bool
    status: Status
    shard_id: int = -1
    due_ms: int | None = None
    topic: str = ""


class TaskStore:
    def __init__(self, engine: Engine, rng: random.Random | None = None, autocommit: Engine | None = None):
        """autocommit: an engine made with make_engine(..., autocommit=True), for the submits (one
        round trip for a group of them); without it, `engine` switches its connections to
        autocommit for them, a round trip more each way."""
        self._engine = engine
        self._autocommit = autocommit or engine.execution_options(isolation_level="AUTOCOMMIT")
        self._rng = rng or random.Random()

    # ---- submit -------------------------------------------------------------------------------

    def insert_groups(self, groups: Sequence[Sequence[NewTask]]) -> list[list[Submitted] | Conflict]:
        """Several independent submits written together (one commit for all): each group is all
        or nothing on its own, and a group's Conflict is its result, not the others' failure.

        The rows go in as one INSERT statement, which InnoDB writes whole or not at all, with
        autocommit: one round trip, where a transaction takes two (the statement and COMMIT);
        client-chosen ids are looked up first (two SELECTs per 1000). Rows too large for one
        statement go in several, inside START TRANSACTION ... COMMIT."""
        for attempt in range(3):
            try:
                with unavailable_on_failure(), self._autocommit.connect() as conn:
                    return self._insert(conn, groups)
            except sqlalchemy.exc.IntegrityError:
                # A concurrent submit of the same client id (another node, another group) won the race.
                if attempt == 2:
                    raise
            except StoreUnavailable as e:
                # Concurrent groups inserting the same client id can deadlock; running again settles it.
                if e.code not in LOCK_CONFLICTS or attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _insert(self, conn: Connection, groups: Sequence[Sequence[NewTask]]) -> list[list[Submitted] | Conflict]:
        # Only a client's own id can exist already: a generated one is new by construction.
        ids = list({t.task_id for g in groups for t in g if t.client_id})
        prior: dict[str, tuple[bytes, int, int]] = {}
        for table in (T, B):
            for chunk in _chunks(ids, 1000):
                for task_id, spec_hash, shard_id, due_ms in conn.exec_driver_sql(
                        f"SELECT task_id, spec_hash, shard_id, due_ms FROM {table.name} "
                        f"WHERE task_id IN ({_ids(chunk)})"):
                    prior.setdefault(task_id, (bytes(spec_hash), shard_id, due_ms))
        results: list[list[Submitted] | Conflict] = []
        rows: list[NewTask] = []
        for group in groups:
            seen_here = dict(prior)     # a group sees earlier groups' tasks, and its own
            out, mine = [], []
            conflict = None
            for t in group:
                seen = seen_here.get(t.task_id)
                if seen is not None:
                    if seen[0] != t.spec_hash:
                        conflict = Conflict(t.task_id, "exists with different content")
                        break
                    out.append(Submitted(t.task_id, seen[1], seen[2], False))
                    continue
                seen_here[t.task_id] = (t.spec_hash, t.shard_id, t.due_ms)
                mine.append(t)
                out.append(Submitted(t.task_id, t.shard_id, t.due_ms, True))
            if conflict is not None:
                results.append(conflict)
                continue
            prior = seen_here
            rows.extend(mine)
            results.append(out)
        if rows:
            statements = [_insert_sql(part) for part in _by_size(rows)]
            if len(statements) == 1:
                conn.exec_driver_sql(statements[0])
            else:
                _in_transaction(conn, statements)
        return results

    @contextlib.contextmanager
    def inserting(self) -> Iterator[Callable[[Sequence[NewTask]], None]]:
        """A transaction that takes new tasks part by part, for tasks whose ids were generated here
        (they cannot exist already: nothing is looked up). Each part's INSERT is sent at once
        and its answer read only when the next statement goes out, so MySQL writes one part while
        the caller prepares the next. Everything sent commits when the block ends; if the block
        raises, none of it does."""
        with unavailable_on_failure(), self._autocommit.connect() as conn:
            wire = _Pipelined(conn.connection.dbapi_connection)
            ended = False       # COMMIT or ROLLBACK answered: the connection may go back to the pool
            try:
                wire.send("START TRANSACTION")

                def send(rows: Sequence[NewTask]) -> None:
                    for part in _by_size(list(rows)):
                        wire.send(_insert_sql(part))

                yield send
                wire.send("COMMIT")
                wire.wait()
                ended = True
            except Exception:
                try:
                    wire.wait()
                except Exception:  # noqa: BLE001 - the statement's own failure, raised below either way
                    pass
                try:
                    wire.send("ROLLBACK")
                    wire.wait()
                    ended = True
                except Exception:  # noqa: BLE001 - the connection is broken: the server ends the transaction
                    pass
                raise
            finally:
                if not ended:       # broken, or interrupted mid-statement: never reused
                    conn.invalidate()

    # ---- loading and claiming -----------------------------------------------------------------

    def scan_due(self, shards: Iterable[int], before_ms: int, limit: int, from_ms: int = 0) -> list[Entry]:
        """DELAY tasks of these shards due in [from_ms, before_ms), earliest first (a range scan per
        shard)."""
        shards = sorted(shards)
        if not shards:
            return []
        with unavailable_on_failure(), self._engine.connect() as conn:
            rows = conn.exec_driver_sql(
                f"SELECT task_id, shard_id, due_ms FROM {T.name} WHERE shard_id IN ({_marks(len(shards))}) "
                "AND status = %s AND due_ms >= %s AND due_ms < %s ORDER BY due_ms LIMIT %s",
                (*shards, int(Status.DELAY), from_ms, before_ms, limit))
            return [Entry(*r) for r in rows]

    def claim(self, entries: Sequence[Entry], owner: str, fence: Mapping[int, int],
              now_ms: int) -> tuple[list[Claimed], list[int]]:
        """DELAY -> READY, attempt + 1, for the entries still due and of shards `owner` holds at
        the epochs in `fence`. Only the returned tasks may be published. Also returns the shards
        in `fence` that MySQL says are no longer ours at those epochs (fenced)."""
        wanted = {e.task_id: e for e in entries}
        shards = sorted({e.shard_id for e in entries if e.shard_id in fence})
        if not shards:
            return [], []
        with unavailable_on_failure(), self._engine.begin() as conn:
            held = {shard for shard, holder, epoch in conn.exec_driver_sql(
                f"SELECT shard_id, owner, epoch FROM {S.name} WHERE shard_id IN ({_marks(len(shards))}) "
                "LOCK IN SHARE MODE", tuple(shards))
                if holder == owner and epoch == fence[shard]}
            fenced = [s for s in shards if s not in held]
            if fenced:
                log.warning("not claiming tasks of shards %s: no longer ours at our epoch (fenced)", fenced)
            if not held:
                return [], fenced
            # By primary key: through the (shard, status, due) index the locking read would take
            # next-key locks over whole shards and block submits into them.
            rows = [r for r in conn.exec_driver_sql(
                f"SELECT task_id, topic, shard_id, due_ms, attempt, payload, ttr_ms, max_retries "
                f"FROM {T.name} FORCE INDEX (PRIMARY) WHERE task_id IN ({_ids(wanted)}) AND status = %s "
                f"AND shard_id IN ({_marks(len(held))}) FOR UPDATE",
                (int(Status.DELAY), *held))
                # A row re-timed later than the memory entry (reschedule, retry) is not due yet.
                if r[3] <= wanted[r[0]].due_ms]
            if not rows:
                return [], fenced
            conn.exec_driver_sql(
                f"UPDATE {T.name} SET status = %s, attempt = attempt + 1, node_id = %s, updated_ms = %s, "
                "deadline_ms = %s + IF(ttr_ms > 0, ttr_ms, %s) "
                f"WHERE task_id IN ({_ids(r[0] for r in rows)}) AND status = %s",
                (int(Status.READY), owner, now_ms, now_ms, UNCONFIRMED_GRACE_MS, int(Status.DELAY)))
        return [Claimed(task_id, topic, shard_id, due_ms, attempt + 1, bytes(payload), ttr_ms, max_retries)
                for task_id, topic, shard_id, due_ms, attempt, payload, ttr_ms, max_retries in rows], fenced

    def record_dispatched(self, confirmed: Sequence[tuple[Claimed, int]], node_id: str) -> list[Claimed]:
        """The broker confirmed these publishes: write their execlog rows. Tasks that expect no
        result (ttr 0) finish here. Returns the tasks finished."""
        if not confirmed:
            return []
        done = {c.task_id for c, _ in confirmed if c.ttr_ms == 0}
        with unavailable_on_failure(), self._engine.begin() as conn:
            # A fast consumer's report may have created the row already: the dispatch time and
            # node are ours to tell, the result stays. An attempt that expects no result has the
            # broker's confirm as its result.
            # The only value that may hold a percent sign, doubled for the driver's formatting pass.
            node = conn.connection.dbapi_connection.escape(node_id).replace("%", "%%")
            conn.exec_driver_sql(_UPSERT_DISPATCHED % ",".join(
                f"({_id(c.task_id)},{c.attempt:d},{node},{at:d},{_CONFIRMED if c.task_id in done else 'NULL'},"
                f"{at if c.task_id in done else 'NULL'})" for c, at in confirmed))
            if not done:
                return []
            at = max(t for _, t in confirmed)
            ids = self._finalize_many(conn, [(c.task_id, c.attempt) for c, _ in confirmed if c.task_id in done],
                                      (Status.READY,), Status.FINISHED, at, None)
            return [c for c, _ in confirmed if c.task_id in ids]

    def release(self, claimed: Sequence[Claimed], due_ms: int, sent: bool, node_id: str, now_ms: int) -> int:
        """The publish failed: back to DELAY, to be dispatched again at due_ms.

        sent=False: it never left this node, so the attempt did not happen and its number is
        given back. sent=True: it may have reached a queue (lost confirm, nack), so the number is
        used up (execlog result UNCONFIRMED) and the next dispatch carries a new one; a consumer
        that did get it can still finish the task by reporting for it."""
        if not claimed:
            return 0
        with unavailable_on_failure(), self._engine.begin() as conn:
            n = 0
            for c in claimed:
                n += conn.execute(
                    update(T).where(T.c.task_id == c.task_id, T.c.status == int(Status.READY),
                                    T.c.attempt == c.attempt)
                    .values(status=int(Status.DELAY), attempt=c.attempt if sent else c.attempt - 1, due_ms=due_ms,
                            deadline_ms=None, node_id=None, updated_ms=now_ms)).rowcount
            if sent:
                conn.execute(insert(X).prefix_with("IGNORE"), [
                    {"task_id": c.task_id, "attempt": c.attempt, "node_id": node_id, "dispatched_ms": now_ms,
                     "result": "UNCONFIRMED", "result_ms": now_ms, "message": "no confirm from the broker"}
                    for c in claimed])
            return n

    # ---- results, timeouts, cancel, reschedule ------------------------------------------------

    def apply_result(self, task_id: str, attempt: int, result: Result, message: str | None,
                     now_ms: int, policy: Callable[[str, int], RetryPolicy], node_id: str | None = None,
                     retry_shard: int | None = None) -> Transition:
        """Apply a result (or a timeout) to attempt `attempt`; a stale or duplicate one changes nothing.
        A retry moves the task to retry_shard when given (a shard of the caller's, so it can hold
        the retry in memory)."""
        message = message[:1024] if message else None
        with unavailable_on_failure(), self._engine.begin() as conn:
            row = conn.execute(select(T.c.status, T.c.attempt, T.c.topic, T.c.shard_id, T.c.max_retries,
                                      T.c.node_id).where(T.c.task_id == task_id).with_for_update()).first()
            if row is None:
                final = conn.execute(select(B.c.status).where(B.c.task_id == task_id)).first()
                if final is None:
                    raise NotFound(task_id)
                return Transition(False, Status(final.status))
            status = Status(row.status)
            decision = on_result(status, result, row.attempt, policy(row.topic, row.max_retries),
                                 now_ms, self._rng) if row.attempt == attempt else None
            if decision is None:
                return Transition(False, status, row.shard_id)
            if result is not Result.STARTED:
                self._log_result(conn, task_id, attempt, result, message, now_ms, node_id, row.node_id)
            shard = row.shard_id if retry_shard is None or decision.status is not Status.DELAY else retry_shard
            self._apply(conn, task_id, attempt, status, decision, now_ms, message, shard)
            return Transition(True, decision.status, shard, decision.due_ms, row.topic)

    @staticmethod
    def _log_result(conn: Connection, task_id: str, attempt: int, result: Result, message: str | None,
                    now_ms: int, node_id: str | None, claimer: str | None) -> None:
        """The attempt's execlog row gets its result. A consumer's result may arrive before the
        dispatch was recorded: the row is made with this time, and the recorder sets the real one.
        A time-out or misfire of an attempt with no recorded dispatch gets no made-up dispatch
        time; a time-out then says UNRECORDED: claimed (by the node named), never recorded as
        published, most likely because that node stopped first."""
        reached = result not in (Result.TIMEOUT, Result.MISFIRED)
        conn.execute(insert(X).prefix_with("IGNORE").values(
            task_id=task_id, attempt=attempt,
            node_id=(node_id if reached or not claimer else claimer.split("@")[0]) or "?",
            dispatched_ms=now_ms if reached else None))
        label = result.value if result is not Result.TIMEOUT else \
            case((X.c.dispatched_ms.is_(None), UNRECORDED), else_=result.value)
        conn.execute(update(X).where(X.c.task_id == task_id, X.c.attempt == attempt)
                     .values(result=label, result_ms=now_ms, message=message))

    def _apply(self, conn: Connection, task_id: str, attempt: int, status: Status, d: Decision,
               now_ms: int, message: str | None, shard_id: int) -> None:
        if d.status in FINAL:
            self._finalize(conn, task_id, attempt, (status,), d.status, now_ms, message)
        elif d.status is Status.RUNNING:
            conn.execute(update(T).where(T.c.task_id == task_id).values(status=int(Status.RUNNING), updated_ms=now_ms))
        else:
            conn.execute(update(T).where(T.c.task_id == task_id).values(
                status=int(Status.DELAY), due_ms=d.due_ms, shard_id=shard_id, deadline_ms=None, node_id=None,
                updated_ms=now_ms))

    def in_flight(self, shards: Iterable[int], now_ms: int) -> tuple[int, int]:
        """(READY/RUNNING tasks of these shards, how many of them are past their time-to-run)."""
        shards = sorted(shards)
        if not shards:
            return 0, 0
        with unavailable_on_failure(), self._engine.connect() as conn:
            row = conn.execute(select(func.count(), func.coalesce(func.sum(case((T.c.deadline_ms < now_ms, 1),
                                                                                   else_=0)), 0))
                               .where(T.c.shard_id.in_(shards),
                                      T.c.status.in_([int(Status.READY), int(Status.RUNNING)]))).one()
            return int(row[0]), int(row[1])

    def expired(self, shards: Iterable[int], now_ms: int, limit: int, owner: str) -> list[tuple[str, int]]:
        """(task id, attempt) of in-flight tasks of these shards whose time-to-run has passed,
        except fire-and-forget ones `owner` claimed itself (it settles those when the broker answers)."""
        shards = sorted(shards)
        if not shards:
            return []
        with unavailable_on_failure(), self._engine.connect() as conn:
            rows = conn.execute(select(T.c.task_id, T.c.attempt).where(
                T.c.shard_id.in_(shards), T.c.status.in_([int(Status.READY), int(Status.RUNNING)]),
                T.c.deadline_ms < now_ms,
                or_(T.c.ttr_ms != 0, T.c.node_id.is_(None), T.c.node_id != owner)).limit(limit))
            return [(r.task_id, r.attempt) for r in rows]

    def in_flight_deadlines(self, task_ids: Sequence[str]) -> list[tuple[str, int, int | None]]:
        """(task id, attempt, deadline ms) of those of these tasks still in flight (READY/RUNNING)."""
        if not task_ids:
            return []
        with unavailable_on_failure(), self._engine.connect() as conn:
            return [(r.task_id, r.attempt, r.deadline_ms) for r in conn.execute(
                select(T.c.task_id, T.c.attempt, T.c.deadline_ms).where(
                    T.c.task_id.in_(list(task_ids)), T.c.status.in_([int(Status.READY), int(Status.RUNNING)])))]

    def cancel(self, task_id: str, now_ms: int) -> tuple[str, str | None]:
        """(CANCELLED, ALREADY_DISPATCHED or NOT_FOUND; the topic when this call cancelled it)."""
        with unavailable_on_failure(), self._engine.begin() as conn:
            row = conn.execute(select(T.c.status, T.c.attempt, T.c.topic).where(T.c.task_id == task_id)
                               .with_for_update()).first()
            if row is not None:
                if row.status != Status.DELAY:
                    return "ALREADY_DISPATCHED", None
                self._finalize(conn, task_id, row.attempt, (Status.DELAY,), Status.CANCELLED, now_ms, "cancelled")
                return "CANCELLED", row.topic
            final = conn.execute(select(B.c.status).where(B.c.task_id == task_id)).first()
            if final is None:
                return "NOT_FOUND", None
            return ("CANCELLED" if final.status == Status.CANCELLED else "ALREADY_DISPATCHED"), None

    def reschedule(self, task_id: str, due_ms: int, shard_id: int | None, now_ms: int) -> tuple[int, int]:
        """Move a DELAY task to due_ms (and to shard_id when given); returns (shard, due)."""
        with unavailable_on_failure(), self._engine.begin() as conn:
            row = conn.execute(select(T.c.status, T.c.shard_id).where(T.c.task_id == task_id).with_for_update()).first()
            if row is None:
                if conn.execute(select(B.c.status).where(B.c.task_id == task_id)).first() is None:
                    raise NotFound(task_id)
                raise Conflict(task_id, "has ended; only a task that has not fired can be rescheduled")
            if row.status != Status.DELAY:
                raise Conflict(task_id, f"is {Status(row.status).name}; only a task that has not fired can be rescheduled")
            shard = row.shard_id if shard_id is None else shard_id
            conn.execute(update(T).where(T.c.task_id == task_id).values(due_ms=due_ms, shard_id=shard, updated_ms=now_ms))
            return shard, due_ms

    def get(self, task_id: str) -> tuple[Mapping, list[Mapping]]:
        """The task (live or archived) as a mapping, and its attempts from the execlog."""
        with unavailable_on_failure(), self._engine.connect() as conn:
            row = conn.execute(select(T).where(T.c.task_id == task_id)).mappings().first()
            if row is None:
                row = conn.execute(select(B).where(B.c.task_id == task_id)).mappings().first()
            if row is None:
                raise NotFound(task_id)
            attempts = conn.execute(select(X).where(X.c.task_id == task_id).order_by(X.c.attempt)).mappings().all()
            return dict(row), [dict(a) for a in attempts]

    # ---- dead letters -------------------------------------------------------------------------

    def dead_letters(self, shards: Iterable[int], limit: int) -> list[Mapping]:
        """FAILED tasks of these shards still to be published to a dead-letter exchange."""
        shards = sorted(shards)
        if not shards:
            return []
        with unavailable_on_failure(), self._engine.connect() as conn:
            # The last attempt's dispatch time, for the dead letter's x-delayq-dispatched-at.
            dispatched = select(X.c.dispatched_ms).where(X.c.task_id == B.c.task_id, X.c.attempt == B.c.attempt) \
                .scalar_subquery()
            return [dict(r) for r in conn.execute(
                select(B.c.task_id, B.c.topic, B.c.attempt, B.c.due_ms, B.c.payload, B.c.message,
                       dispatched.label("dispatched_ms"))
                .where(B.c.dead_letter == 1, B.c.shard_id.in_(shards)).limit(limit)).mappings()]

    def dead_lettered(self, task_ids: Sequence[str]) -> None:
        if task_ids:
            with unavailable_on_failure(), self._engine.begin() as conn:
                conn.execute(update(B).where(B.c.task_id.in_(list(task_ids))).values(dead_letter=0))

    # ---- shard ownership ----------------------------------------------------------------------

    def take_shards(self, owner: str, shards: Iterable[int], now_ms: int) -> dict[int, int]:
        """Make `owner` the holder of these shards at a new epoch each; returns shard -> epoch.
        Any previous holder's claims fail from the commit on."""
        shards = sorted(shards)
        with unavailable_on_failure(), self._engine.begin() as conn:
            top = conn.execute(select(func.coalesce(func.max(S.c.epoch), 0)).with_for_update()).scalar_one()
            epoch = top + 1
            conn.execute(update(S).where(S.c.shard_id.in_(shards)).values(owner=owner, epoch=epoch, updated_ms=now_ms))
            return {s: epoch for s in shards}

    def shard_ids(self) -> list[int]:
        with unavailable_on_failure(), self._engine.connect() as conn:
            return [r.shard_id for r in conn.execute(select(S.c.shard_id).order_by(S.c.shard_id))]

    def ping(self) -> None:
        with unavailable_on_failure(), self._engine.connect() as conn:
            conn.execute(select(literal(1)))

    # ---- helpers ------------------------------------------------------------------------------

    def _finalize(self, conn: Connection, task_id: str, attempt: int, statuses: Iterable[Status],
                  final: Status, now_ms: int, message: str | None) -> bool:
        """Move one live task to the backlog with its final status, if it is still as expected."""
        return bool(self._finalize_many(conn, [(task_id, attempt)], statuses, final, now_ms, message))

    def _finalize_many(self, conn: Connection, pairs: Sequence[tuple[str, int]], statuses: Iterable[Status],
                       final: Status, now_ms: int, message: str | None) -> set[str]:
        """Move live tasks, each at its attempt and in one of `statuses`, to the backlog with their
        final status, in three statements whatever their number. Returns the ids moved."""
        if not pairs:
            return set()
        wanted = dict(pairs)
        codes = {int(s) for s in statuses}
        # Lock first: INSERT ... SELECT takes a shared lock that the DELETE would have to upgrade,
        # which deadlocks against a concurrent result for the same task. Locked, the rows cannot
        # change under the two statements that follow, so those need only the ids that matched.
        locked = [task_id for task_id, attempt, status in conn.exec_driver_sql(
            f"SELECT task_id, attempt, status FROM {T.name} WHERE task_id IN ({_ids(wanted)}) FOR UPDATE")
            if attempt == wanted[task_id] and status in codes]
        if not locked:
            return set()
        ids = f"task_id IN ({_ids(locked)})"
        conn.exec_driver_sql(
            f"INSERT INTO {B.name} (task_id, topic, shard_id, due_ms, status, attempt, payload, spec_hash, "
            "max_retries, ttr_ms, created_ms, finished_ms, message, dead_letter) "
            "SELECT task_id, topic, shard_id, due_ms, %s, attempt, payload, spec_hash, max_retries, ttr_ms, "
            f"created_ms, %s, %s, %s FROM {T.name} WHERE {ids}",
            (int(final), now_ms, message, 1 if final is Status.FAILED else 0))
        conn.exec_driver_sql(f"DELETE FROM {T.name} WHERE {ids}")
        return set(locked)


def _marks(n: int) -> str:
    """n driver placeholders for an IN list."""
    return ", ".join(["%s"] * n)


# Task ids and topics hold only these (shared.validation): never a quote, a backslash or a percent
# sign, so the hot statements write them in as they are rather than have PyMySQL escape each
# value (a lookup and a call per value: most of the recorder's time in a burst). Checked here.
_PLAIN = re.compile(r"[A-Za-z0-9._:-]+")
_PLAIN_LIST = re.compile(r"[A-Za-z0-9._:,-]*")


def _id(task_id: str) -> str:
    """One task id as an SQL literal."""
    if not _PLAIN.fullmatch(task_id):
        raise ValueError(f"task id {task_id!r} holds characters not allowed")
    return f"'{task_id}'"


def _ids(task_ids: Iterable[str]) -> str:
    """Task ids as a list of SQL literals, for an IN list."""
    task_ids = list(task_ids)
    if not _PLAIN_LIST.fullmatch(",".join(task_ids)):
        raise ValueError(f"task ids hold characters not allowed: {task_ids[:5]!r}...")
    return "'" + "','".join(task_ids) + "'"


# status, attempt, deadline_ms and node_id take the schema's defaults: DELAY, attempt 0, NULL, NULL
# (sql/001_initial.sql).
_INSERT_TASK = (f"INSERT INTO {T.name} (task_id, topic, shard_id, due_ms, payload, spec_hash, max_retries, ttr_ms, "
                "created_ms, updated_ms) VALUES ")


def _insert_sql(rows: Sequence[NewTask]) -> str:
    """One INSERT of new tasks with their values written in: ids and topics as they are (they
    hold no quote, backslash or percent sign: checked here), bytes as hex literals, numbers as
    numbers. PyMySQL's escaping, a lookup per value, cost more than the insert itself."""
    values = []
    for t in rows:
        if not _PLAIN.fullmatch(t.topic):
            raise ValueError(f"topic {t.topic!r} holds characters not allowed")
        values.append("(%s,'%s',%d,%d,X'%s',X'%s',%d,%d,%d,%d)" % (
            _id(t.task_id), t.topic, t.shard_id, t.due_ms, t.payload.hex(), t.spec_hash.hex(), t.max_retries,
            t.ttr_ms, t.created_ms, t.created_ms))
    return _INSERT_TASK + ",".join(values)


_UPSERT_DISPATCHED = (
    f"INSERT INTO {X.name} (task_id, attempt, node_id, dispatched_ms, result, result_ms) VALUES %s "
    "ON DUPLICATE KEY UPDATE dispatched_ms = VALUES(dispatched_ms), node_id = VALUES(node_id)")
_CONFIRMED = "'CONFIRMED'"


# Rows of one INSERT at most, by size: well below MySQL's max_allowed_packet. A payload takes
# twice its size in hex; the other values less than 256 bytes.
_STATEMENT_BYTES = 1024 * 1024


def _by_size(rows: list[NewTask]) -> list[list[NewTask]]:
    """New tasks in parts that each make one INSERT statement."""
    parts: list[list[NewTask]] = [[]]
    size = 0
    for t in rows:
        n = 2 * len(t.payload) + 256
        if parts[-1] and size + n > _STATEMENT_BYTES:
            parts.append([])
            size = 0
        parts[-1].append(t)
        size += n
    return parts


class _Pipelined:
    """One statement in flight on a PyMySQL connection. send() writes a statement and returns; its
    answer is read by wait(), which the next send() calls first: the protocol takes one command at a
    time. The two steps are PyMySQL's Connection.query split in half. The connection's read and
    write timeouts bound each step."""

    def __init__(self, dbapi_connection):
        self._conn = dbapi_connection
        self._pending = False

    def send(self, sql: str) -> None:
        self.wait()
        self._conn._execute_command(COMMAND.COM_QUERY, sql.encode())
        self._pending = True

    def wait(self) -> None:
        if self._pending:
            self._pending = False
            self._conn._read_query_result()


def _in_transaction(conn: Connection, statements: list[str]) -> None:
    """Several statements as one transaction on an autocommit connection."""
    conn.exec_driver_sql("START TRANSACTION")
    try:
        for sql in statements:
            conn.exec_driver_sql(sql)
        conn.exec_driver_sql("COMMIT")
    except BaseException:
        try:
            conn.exec_driver_sql("ROLLBACK")
        except Exception:  # noqa: BLE001 - the connection is broken: the server ends the transaction
            conn.invalidate()
        raise


def _chunks(items: list, n: int) -> Iterable[list]:
    for i in range(0, len(items), n):
        yield items[i:i + n]
