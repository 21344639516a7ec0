"""MySQL's task tables in memory: job_delay_task and job_shard as the node's core claims, releases,
records, scans and times out (`ClaimTable`), and the submit path's new tasks (`TaskInserts`).

They keep the contracts the real ones keep (a claim only of DELAY rows of shards held at their
epoch, attempt + 1, and of a capped topic's earliest tasks up to its room, counted in the claim as
delayq.store.inflight does; no second attempt of a KEEP_IF_ACTIVE key in flight, the task left
DELAY and answered as waiting, as delayq.store.oneflight's unique key does; a release conditional
on READY and the attempt; a fire-and-forget attempt overdue to another node only after
delayq.store.tasks.UNCONFIRMED_GRACE_MS; a client's id seen before answered as it was written)
and nothing more: delayq.testing.conformance holds them to MySQL.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from delayq.errors import Conflict, StoreUnavailable
from delayq.lifecycle import Status
from delayq.store.overdue import Attempt, AttemptDeadline
from delayq.store.tasks import UNCONFIRMED_GRACE_MS
from delayq.store.values import Claim, Claimed, Entry, KeyWait, NewTask, Outcome as Written, Submitted


@dataclass
class Row:
    task_id: str
    topic: str
    shard_id: int
    due_ms: int
    status: Status = Status.DELAY
    attempt: int = 0
    owner: str | None = None          # node_id: who claimed it
    claimed_ms: int | None = None     # updated_ms of the claim
    deadline_ms: int | None = None    # when its attempt in flight times out
    ttr_ms: int = 3000
    payload: bytes = b""
    dispatched: dict[int, int] = field(default_factory=dict)     # attempt -> dispatched ms (execlog)
    key: bytes | None = None
    keep_one: bool = False            # submitted under KEEP_IF_ACTIVE: one attempt of its key in flight

    @property
    def flight_key(self) -> tuple[str, bytes] | None:
        """job_delay_task's computed (topic, flight_key) under its unique key (sql/012)."""
        in_flight = self.status in (Status.READY, Status.RUNNING)
        return (self.topic, self.key) if self.keep_one and in_flight and self.key is not None else None


class ClaimTable:
    def __init__(self, shards: Mapping[int, tuple[str, int]]):
        self.shards = dict(shards)            # shard -> (owner, epoch): job_shard
        self.rows: dict[str, Row] = {}
        self.down = False                     # every call fails as with MySQL away
        self.lose_next_answer = False         # the next claim commits, then its answer is lost

    def add(self, task_id: str, shard_id: int, due_ms: int, topic: str = "t", ttr_ms: int = 3000,
            key: bytes | None = None, keep_one: bool = False) -> Entry:
        self.rows[task_id] = Row(task_id, topic, shard_id, due_ms, ttr_ms=ttr_ms, key=key, keep_one=keep_one)
        return Entry(task_id, shard_id, due_ms, topic=topic)

    def _check(self) -> None:
        if self.down:
            raise StoreUnavailable("MySQL unavailable: (2003, \"Can't connect\")")

    def scan_due(self, shards: Iterable[int], before_ms: int, limit: int, from_ms: int = 0,
                 skip: Iterable[str] = ()) -> list[Entry]:
        """delayq.store.tasks.TaskStore.scan_due: the loader's window scan."""
        self._check()
        shards, skip = set(shards), set(skip)
        return self._due(lambda r: r.shard_id in shards and from_ms <= r.due_ms < before_ms
                         and r.topic not in skip, limit)

    def scan_topic(self, shards: Iterable[int], topic: str, before_ms: int, limit: int) -> list[Entry]:
        """delayq.store.tasks.TaskStore.scan_topic: a limited topic's earliest tasks."""
        self._check()
        shards = set(shards)
        return self._due(lambda r: r.shard_id in shards and r.topic == topic and r.due_ms < before_ms, limit)

    def _due(self, wanted: Callable[[Row], bool], limit: int) -> list[Entry]:
        found = sorted((r for r in self.rows.values() if r.status is Status.DELAY and wanted(r)),
                       key=lambda r: r.due_ms)
        return [Entry(r.task_id, r.shard_id, r.due_ms, topic=r.topic) for r in found[:limit]]

    def claim(self, entries: Sequence[Entry], owner: str, fence: Mapping[int, int], now_ms: int,
              caps: Mapping[str, int] | None = None) -> Claim:
        self._check()
        asked = {e.shard_id for e in entries if e.shard_id in fence}
        held = {s for s in asked if self.shards.get(s) == (owner, fence[s])}
        deferred: list[Entry] = []
        rooms: dict[str, tuple[int, int]] = {}
        if caps and held:
            entries, deferred, rooms = self._trim([e for e in entries if e.shard_id in held], caps)
        out, waits = [], []
        flying = {r.flight_key for r in self.rows.values()} - {None}
        for e in entries:
            r = self.rows.get(e.task_id)
            if r is None or r.shard_id not in held or r.status is not Status.DELAY or r.due_ms > e.due_ms:
                continue
            if r.keep_one and r.key is not None and (r.topic, r.key) in flying:
                waits.append(KeyWait(e, r.topic, r.key))
                continue
            r.status, r.attempt, r.owner, r.claimed_ms = Status.READY, r.attempt + 1, owner, now_ms
            # A fire-and-forget attempt (ttr 0) has the grace of an unconfirmed one, as in MySQL.
            r.deadline_ms = now_ms + (r.ttr_ms if r.ttr_ms > 0 else UNCONFIRMED_GRACE_MS)
            flying.add(r.flight_key)
            out.append(Claimed(r.task_id, r.topic, r.shard_id, r.due_ms, r.attempt, r.payload, r.ttr_ms, 3, r.key))
        if self.lose_next_answer:
            self.lose_next_answer = False
            raise StoreUnavailable("MySQL unavailable: (2013, 'Lost connection to MySQL server during query')")
        return Claim(out, sorted(asked - held), deferred, rooms, waits)

    def _trim(self, entries: list[Entry], caps: Mapping[str, int]
              ) -> tuple[list[Entry], list[Entry], dict[str, tuple[int, int]]]:
        """delayq.store.inflight.trim on the rows here: per capped topic, its attempts in flight
        (READY, RUNNING) are counted, its earliest entries kept up to the room left, the rest
        deferred; (in flight before, slots left after) per capped topic."""
        kept, deferred, rooms = [], [], {}
        by_topic: dict[str, list[Entry]] = {}
        for e in entries:
            if e.topic in caps:
                by_topic.setdefault(e.topic, []).append(e)
            else:
                kept.append(e)
        for topic, mine in by_topic.items():
            in_flight = sum(1 for r in self.rows.values()
                            if r.topic == topic and r.status in (Status.READY, Status.RUNNING))
            room = max(0, caps[topic] - in_flight)
            mine.sort(key=lambda e: e.due_ms)
            kept += mine[:room]
            deferred += mine[room:]
            rooms[topic] = (in_flight, room - min(room, len(mine)))
        return kept, deferred, rooms

    def unclaim(self, task_ids: Sequence[str], owner: str, claimed_ms: int, now_ms: int) -> int:
        self._check()
        n = 0
        for t in task_ids:
            r = self.rows.get(t)
            if r and r.status is Status.READY and r.owner == owner and r.claimed_ms == claimed_ms:
                r.status, r.attempt, r.owner, r.claimed_ms = Status.DELAY, r.attempt - 1, None, None
                n += 1
        return n

    def release(self, claimed: Sequence[Claimed], due_ms: int, sent: bool, node_id: str, now_ms: int) -> int:
        self._check()
        n = 0
        for c in claimed:
            r = self.rows.get(c.task_id)
            if r and r.status is Status.READY and r.attempt == c.attempt:
                r.status, r.due_ms, r.owner = Status.DELAY, due_ms, None
                r.attempt = c.attempt if sent else c.attempt - 1
                n += 1
            if r and sent:
                # It may have reached a queue: its execlog row (UNCONFIRMED) says it was dispatched.
                r.dispatched.setdefault(c.attempt, now_ms)
        return n

    def expired(self, shards: Sequence[int] | set[int], now_ms: int, limit: int, owner: str) -> list[Attempt]:
        """In-flight attempts of these shards past their deadline, but fire-and-forget ones `owner` claimed."""
        self._check()
        return [Attempt(r.task_id, r.attempt) for r in self.rows.values()
                if r.shard_id in shards and r.status in (Status.READY, Status.RUNNING)
                and r.deadline_ms is not None and r.deadline_ms < now_ms
                and (r.ttr_ms != 0 or r.owner != owner)][:limit]

    def deadlines(self, task_ids: Sequence[str]) -> list[AttemptDeadline]:
        self._check()
        return [AttemptDeadline(r.task_id, r.attempt, r.deadline_ms) for t in task_ids if (r := self.rows.get(t)) is not None
                and r.status in (Status.READY, Status.RUNNING)]

    def record_dispatched(self, confirmed: Sequence[tuple[Claimed, int]], node_id: str) -> list[Claimed]:
        self._check()
        done = []
        for c, at in confirmed:
            r = self.rows.get(c.task_id)
            if r is not None:
                r.dispatched[c.attempt] = at
                # An attempt that expects no result (ttr 0) finishes at the broker's confirm.
                if c.ttr_ms == 0 and r.status is Status.READY and r.attempt == c.attempt:
                    r.status = Status.FINISHED
                    done.append(c)
        return done


class TaskInserts:
    """delayq.store.submits.TaskWriter.insert_groups for groups that hold no key: new tasks by
    id (`rows`), a client's id seen before answered as it was written, or the group's Conflict
    when its content differs; each call one statement (`statements`)."""

    def __init__(self) -> None:
        self.rows: dict[str, NewTask] = {}
        self.statements = 0

    def insert_groups(self, groups: Sequence[Sequence[NewTask]]) -> list[list[Submitted] | Exception]:
        self.statements += 1
        out: list[list[Submitted] | Exception] = []
        for group in groups:
            seen = dict(self.rows)          # a group sees earlier groups' tasks, and its own
            answers: list[Submitted] = []
            for t in group:
                before = seen.get(t.task_id)
                if before is not None and before.spec_hash != t.spec_hash:
                    out.append(Conflict(t.task_id, "exists with different content"))
                    break
                if before is not None:
                    answers.append(Submitted(t.task_id, before.shard_id, before.due_ms, False, Written.DEDUPLICATED))
                else:
                    seen[t.task_id] = t
                    answers.append(Submitted(t.task_id, t.shard_id, t.due_ms, True))
            else:
                self.rows = seen
                out.append(answers)
        return out
