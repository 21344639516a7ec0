"""TaskStore: a written task's life in MySQL: window scans, claims, dispatch records, results and
time-outs, the move to the backlog. (New tasks are written by delayq.store.submits.TaskWriter;
a caller's cancel, reschedule and get by delayq.store.requests.TaskRequests; shard ownership by
delayq.store.epochs.ShardEpochs; dead letters by delayq.store.deadletters.DeadLetterRows; which
attempts are overdue by delayq.store.overdue.OverdueRows.)

The hot paths (window scan, claim, execlog, finishing fire-and-forget tasks) run fixed SQL text
through the driver (`exec_driver_sql`, values written in by delayq.store.sqltext): building and
compiling a Core statement with a thousand-element IN list cost more CPU than the round trip it
describes. Everything else is SQLAlchemy Core.

MySQL is the truth (docs/ARCHITECTURE.md, invariant 1). Each state change is conditional on the
row's current status and attempt, so whatever races it (another node, a late report, a stale
memory entry) it either applies once or changes nothing. The claim is fenced (invariant 3): it
locks the shard rows in share mode and only takes tasks of shards this node owns at its epoch.

Thread-safe: it holds only its engine; each call checks a connection out of the pool.
"""
from __future__ import annotations

from sys import intern

import logging
import random
from typing import Callable, Iterable, Mapping, Sequence

from sqlalchemy import Connection, Engine, case, insert, literal, select, update

from delayq import tables
from delayq.db import unavailable_on_failure
from delayq.errors import NotFound
from delayq.lifecycle import FINAL, Decision, Result, RetryPolicy, Status, on_result
from delayq.store import inflight, oneflight
from delayq.store.backlog import move_to_backlog
from delayq.store.sqltext import CONFIRMED, UPSERT_DISPATCHED, literal_bytes, literal_id, literal_ids, marks
from delayq.store.values import Claim, Claimed, Entry, KeyWait, Transition

log = logging.getLogger(__name__)
TASK, EXECLOG, BACKLOG, SHARD = tables.task, tables.execlog, tables.backlog, tables.shard

# A fire-and-forget attempt (ttr 0) claimed by another node (dead, or no longer the shard's owner)
# and still not confirmed after this is dispatched again. A node's own such claims are never timed
# out by itself: its publisher and recorder settle every one of them.
UNCONFIRMED_GRACE_MS = 2_000
UNRECORDED = "UNRECORDED"         # execlog result: claimed, timed out, no publish ever recorded
_SET_READY = ("status = %s, attempt = attempt + 1, node_id = %s, updated_ms = %s, "
              "deadline_ms = %s + IF(ttr_ms > 0, ttr_ms, %s)")


class TaskStore:
    def __init__(self, engine: Engine, rng: random.Random | None = None, *,
                 locked: Callable[[], None] | None = None):
        """rng draws the jitter of retry back-offs (seeded in tests); `locked` is called inside a
        claim's transaction once it holds the rows' locks (fault tests: delayq.nodes.dispatch.freeze)."""
        self._engine = engine
        self._rng = rng or random.Random()
        self._locked = locked

    # ---- loading and claiming -----------------------------------------------------------------

    def scan_due(self, shards: Iterable[int], before_ms: int, limit: int, from_ms: int = 0,
                 skip: Iterable[str] = ()) -> list[Entry]:
        """DELAY tasks of these shards due in [from_ms, before_ms), earliest first (a range scan per
        shard), but for the topics in `skip` (paused)."""
        shards, skip = sorted(shards), sorted(skip)
        if not shards:
            return []
        skipped = f" AND topic NOT IN ({marks(len(skip))})" if skip else ""
        with unavailable_on_failure(), self._engine.connect() as conn:
            rows = conn.exec_driver_sql(
                f"SELECT task_id, shard_id, due_ms, topic FROM {TASK.name} WHERE shard_id IN ({marks(len(shards))}) "
                f"AND status = %s AND due_ms >= %s AND due_ms < %s{skipped} ORDER BY due_ms LIMIT %s",
                (*shards, int(Status.DELAY), from_ms, before_ms, *skip, limit))
            # One string per topic, however many of its tasks memory holds.
            return [Entry(task_id, shard_id, due_ms, topic=intern(topic)) for task_id, shard_id, due_ms, topic in rows]

    def scan_topic(self, shards: Iterable[int], topic: str, before_ms: int, limit: int) -> list[Entry]:
        """The earliest `limit` DELAY tasks of one topic in these shards due before before_ms (a
        range of the (topic, status, due) index, read in due order)."""
        shards = sorted(shards)
        if not shards:
            return []
        with unavailable_on_failure(), self._engine.connect() as conn:
            rows = conn.exec_driver_sql(
                f"SELECT task_id, shard_id, due_ms FROM {TASK.name} "
                f"WHERE topic = %s AND status = %s AND due_ms < %s AND shard_id IN ({marks(len(shards))}) "
                "ORDER BY due_ms LIMIT %s", (topic, int(Status.DELAY), before_ms, *shards, limit))
            topic = intern(topic)
            return [Entry(task_id, shard_id, due_ms, topic=topic) for task_id, shard_id, due_ms in rows]

    def claim(self, entries: Sequence[Entry], owner: str, fence: Mapping[int, int], now_ms: int,
              caps: Mapping[str, int] | None = None) -> Claim:
        """DELAY -> READY, attempt + 1, for the entries still due and of shards `owner` holds at
        the epochs in `fence`. Only the returned tasks may be published. Also returns the shards
        in `fence` that MySQL says are no longer ours at those epochs (fenced), and for topics with
        a maxInFlight (`caps`) the tasks left unclaimed to keep to it (delayq.store.inflight)."""
        wanted = {e.task_id: e for e in entries}
        shards = sorted({e.shard_id for e in entries if e.shard_id in fence})
        if not shards:
            return Claim([], [])
        with unavailable_on_failure(), self._engine.begin() as conn:
            held = {shard for shard, holder, epoch in conn.exec_driver_sql(
                f"SELECT shard_id, owner, epoch FROM {SHARD.name} WHERE shard_id IN ({marks(len(shards))}) "
                "LOCK IN SHARE MODE", tuple(shards))
                if holder == owner and epoch == fence[shard]}
            fenced = [s for s in shards if s not in held]
            if fenced:
                # Routine while shards move: MySQL hears of a move before this node's ZooKeeper view
                # does. The dispatcher hands the tasks to the new owner.
                log.info("not claiming tasks of shards %s: no longer ours at our epoch (fenced); their new owner "
                         "takes them", fenced)
            if not held:
                return Claim([], fenced)
            deferred: list[Entry] = []
            rooms: dict[str, inflight.Room] = {}
            if caps:
                kept, deferred, rooms = inflight.trim(conn, [e for e in entries if e.shard_id in held], caps)
                wanted = {e.task_id: e for e in kept}
                if not wanted:
                    return Claim([], fenced, deferred, rooms)
            # By primary key: through the (shard, status, due) index the locking read would take
            # next-key locks over whole shards and block submits into them.
            rows = [r for r in conn.exec_driver_sql(
                f"SELECT task_id, topic, shard_id, due_ms, attempt, payload, ttr_ms, max_retries, task_key, tags, "
                "traceparent, key_mode "
                f"FROM {TASK.name} FORCE INDEX (PRIMARY) WHERE task_id IN ({literal_ids(wanted)}) AND status = %s "
                f"AND shard_id IN ({marks(len(held))}) FOR UPDATE",
                (int(Status.DELAY), *held))
                # A row re-timed later than the memory entry (reschedule, retry) is not due yet.
                if r[3] <= wanted[r[0]].due_ms]
            if not rows:
                return Claim([], fenced, deferred, rooms)
            if self._locked is not None:
                self._locked()
            params = (int(Status.READY), owner, now_ms, now_ms, UNCONFIRMED_GRACE_MS)
            plain = [r for r in rows if r[11] != oneflight.KEEP_IF_ACTIVE]
            if plain:
                conn.exec_driver_sql(f"UPDATE {TASK.name} SET {_SET_READY} "
                                     f"WHERE task_id IN ({literal_ids(r[0] for r in plain)}) AND status = %s",
                                     (*params, int(Status.DELAY)))
            waits: list[KeyWait] = []
            if len(plain) < len(rows):
                keeping = [r for r in rows if r[11] == oneflight.KEEP_IF_ACTIVE]
                won = oneflight.claim_keeping_one(conn, TASK.name, [(r[0], r[1], bytes(r[8])) for r in keeping],
                                                  _SET_READY, params)
                waits = [KeyWait(wanted[r[0]], r[1], bytes(r[8])) for r in keeping if r[0] not in won]
                rows = plain + [r for r in keeping if r[0] in won]
        return Claim([Claimed(task_id, topic, shard_id, due_ms, attempt + 1, bytes(payload), ttr_ms, max_retries,
                              None if key is None else bytes(key), None if tags is None else bytes(tags), traceparent)
                      for task_id, topic, shard_id, due_ms, attempt, payload, ttr_ms, max_retries, key, tags, traceparent, _
                      in rows],
                     fenced, deferred, rooms, waits)

    def unclaim(self, task_ids: Sequence[str], owner: str, claimed_ms: int, now_ms: int) -> int:
        """Undo a claim whose answer was lost (delayq.nodes.dispatch.unsettled): READY -> DELAY with the
        attempt given back, for the rows the claim made READY (`owner` at `claimed_ms`) and nothing
        has touched since. Returns the rows given back."""
        if not task_ids:
            return 0
        with unavailable_on_failure(), self._engine.begin() as conn:
            return conn.exec_driver_sql(
                f"UPDATE {TASK.name} SET status = %s, attempt = attempt - 1, node_id = NULL, deadline_ms = NULL, "
                f"updated_ms = %s WHERE task_id IN ({literal_ids(task_ids)}) AND status = %s AND node_id = %s "
                "AND updated_ms = %s",
                (int(Status.DELAY), now_ms, int(Status.READY), owner, claimed_ms)).rowcount

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
            dbapi = conn.connection.dbapi_connection
            assert dbapi is not None      # a connection within its transaction holds PyMySQL's
            node = dbapi.escape(node_id).replace("%", "%%")
            conn.exec_driver_sql(UPSERT_DISPATCHED % ",".join(
                f"({literal_id(c.task_id)},{c.attempt:d},{c.due_ms:d},{node},{at:d},"
                f"{CONFIRMED if c.task_id in done else 'NULL'},{at if c.task_id in done else 'NULL'},"
                f"{literal_bytes(c.key)},{literal_bytes(c.tags)})" for c, at in confirmed))
            if not done:
                return []
            at = max(t for _, t in confirmed)
            ids = move_to_backlog(conn, [(c.task_id, c.attempt) for c, _ in confirmed if c.task_id in done],
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
                    update(TASK).where(TASK.c.task_id == c.task_id, TASK.c.status == int(Status.READY),
                                    TASK.c.attempt == c.attempt)
                    .values(status=int(Status.DELAY), attempt=c.attempt if sent else c.attempt - 1, due_ms=due_ms,
                            deadline_ms=None, node_id=None, updated_ms=now_ms)).rowcount
            if sent:
                conn.execute(insert(EXECLOG).prefix_with("IGNORE"), [
                    {"task_id": c.task_id, "attempt": c.attempt, "due_ms": c.due_ms, "node_id": node_id,
                     "dispatched_ms": now_ms,
                     "result": "UNCONFIRMED", "result_ms": now_ms, "message": "no confirm from the broker",
                     "task_key": c.key, "tags": c.tags}
                    for c in claimed])
            return n

    # ---- results and time-outs ---------------------------------------------------------------

    def apply_result(self, task_id: str, attempt: int, result: Result, message: str | None,
                     now_ms: int, policy: Callable[[str, int], RetryPolicy], node_id: str | None = None,
                     retry_shard: int | None = None) -> Transition:
        """Apply a result (or a timeout) to attempt `attempt`; a stale or duplicate one changes nothing.
        A retry moves the task to retry_shard when given (a shard of the caller's, so it can hold
        the retry in memory)."""
        message = message[:1024] if message else None
        with unavailable_on_failure(), self._engine.begin() as conn:
            row = conn.execute(select(TASK.c.status, TASK.c.attempt, TASK.c.topic, TASK.c.shard_id, TASK.c.max_retries,
                                      TASK.c.node_id, TASK.c.due_ms, TASK.c.deadline_ms, TASK.c.cancel_ms,
                                      TASK.c.flight_key)
                               .where(TASK.c.task_id == task_id).with_for_update()).first()
            if row is None:
                final = conn.execute(select(BACKLOG.c.status).where(BACKLOG.c.task_id == task_id)).first()
                if final is None:
                    raise NotFound(task_id)
                return Transition(False, Status(final.status))
            status = Status(row.status)
            if result is Result.TIMEOUT and row.deadline_ms is not None and row.deadline_ms >= now_ms:
                # Extended (a touch) since the caller read it: checked again under the row lock, so
                # an attempt whose consumer was told it has more time is not timed out meanwhile.
                return Transition(False, status, row.shard_id)
            unsent = result is Result.TIMEOUT and row.attempt == attempt and conn.execute(
                select(EXECLOG.c.dispatched_ms).where(EXECLOG.c.task_id == task_id, EXECLOG.c.attempt == attempt,
                                                      EXECLOG.c.dispatched_ms.is_not(None))).first() is None
            decision = on_result(status, result, row.attempt, policy(row.topic, row.max_retries),
                                 now_ms, self._rng, unsent, row.cancel_ms is not None) if row.attempt == attempt else None
            if decision is None:
                return Transition(False, status, row.shard_id)
            if result is not Result.STARTED:
                self._log_result(conn, task_id, attempt, row.due_ms, result, message, now_ms, node_id, row.node_id)
            shard = row.shard_id if retry_shard is None or decision.status is not Status.DELAY else retry_shard
            self._apply(conn, task_id, attempt, status, decision, now_ms, message, shard)
            # An attempt of a KEEP_IF_ACTIVE key that ends frees the key for its waiting task.
            freed = None if row.flight_key is None or decision.status is Status.RUNNING else bytes(row.flight_key)
            return Transition(True, decision.status, shard, decision.due_ms, row.topic, freed)

    @staticmethod
    def _log_result(conn: Connection, task_id: str, attempt: int, due_ms: int, result: Result, message: str | None,
                    now_ms: int, node_id: str | None, claimer: str | None) -> None:
        """The attempt's execlog row gets its result. A consumer's result may arrive before the
        dispatch was recorded: the row is made with this time, and the recorder sets the real one.
        A time-out or misfire of an attempt with no recorded dispatch gets no made-up dispatch
        time; a time-out then says UNRECORDED: claimed (by the node named), never recorded as
        published, most likely because that node stopped first."""
        reached = result not in (Result.TIMEOUT, Result.MISFIRED)
        # The row is keyed by the attempt's due time too (its day partition), which every writer
        # takes from the claim. A release that was maybe sent re-times the task but keeps the
        # attempt, and wrote the row at the claim's due time: look before making one.
        if conn.execute(select(EXECLOG.c.due_ms).where(EXECLOG.c.task_id == task_id,
                                                       EXECLOG.c.attempt == attempt)).first() is None:
            conn.execute(insert(EXECLOG).prefix_with("IGNORE").values(
                task_id=task_id, attempt=attempt, due_ms=due_ms,
                node_id=(node_id if reached or not claimer else claimer.split("@")[0]) or "?",
                dispatched_ms=now_ms if reached else None))
        label = result.value if result is not Result.TIMEOUT else \
            case((EXECLOG.c.dispatched_ms.is_(None), UNRECORDED), else_=result.value)
        conn.execute(update(EXECLOG).where(EXECLOG.c.task_id == task_id, EXECLOG.c.attempt == attempt)
                     .values(result=label, result_ms=now_ms, message=message))

    def _apply(self, conn: Connection, task_id: str, attempt: int, status: Status, d: Decision,
               now_ms: int, message: str | None, shard_id: int) -> None:
        if d.status is Status.CANCELLED:       # a cancel asked while the attempt ran (its result is in the execlog)
            move_to_backlog(conn, [(task_id, attempt)], (status,), d.status, now_ms, "cancelled while it ran")
        elif d.status in FINAL:
            move_to_backlog(conn, [(task_id, attempt)], (status,), d.status, now_ms, message)
        elif d.status is Status.RUNNING:
            conn.execute(update(TASK).where(TASK.c.task_id == task_id).values(status=int(Status.RUNNING), updated_ms=now_ms))
        else:
            conn.execute(update(TASK).where(TASK.c.task_id == task_id).values(
                status=int(Status.DELAY), due_ms=d.due_ms, shard_id=shard_id, deadline_ms=None, node_id=None,
                updated_ms=now_ms))

    def ping(self) -> None:
        with unavailable_on_failure(), self._engine.connect() as conn:
            conn.execute(select(literal(1)))
