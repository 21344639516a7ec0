"""In-memory stand-ins for what the node's dispatch core talks to, so that claim -> publish ->
confirm -> record runs in a unit test in milliseconds, no server involved:

    ManualClock  time that moves only when the test moves it (both the wall and the monotonic clock)
    ClaimTable   job_delay_task and job_shard as far as window scans, claims, releases, records and
                 time-outs go (delayq.nodes.dispatch.ports.ClaimStore and RecordStore, the loader's
                 scans of delayq.store.tasks.TaskStore, and delayq.store.overdue.OverdueRows)
    TaskInserts  new tasks written by the submit path (delayq.store.submits.TaskWriter, groups that
                 hold no key)
    Outbox       a publisher whose broker answers when the test says (delayq.nodes.dispatch.ports.Outbox)
    Exchanges    the exchange guard's verdicts, set by the test
    Services     topic -> ServiceSpec, and its flow controls
    Clients      the clients and grants Access reads (delayq.store.clients.ClientStore)

They keep the contracts the real ones keep (a claim only of DELAY rows of shards held at their
epoch, attempt + 1, and of a capped topic's earliest tasks up to its room, counted in the claim as
delayq.store.inflight does; no second attempt of a KEEP_IF_ACTIVE key in flight, the task left
DELAY and answered as waiting, as delayq.store.oneflight's unique key does; a release conditional on READY and the attempt; a fire-and-forget
attempt overdue to another node only after delayq.store.tasks.UNCONFIRMED_GRACE_MS; every published
message one outcome, to its batch's handler) and nothing more. delayq.testing.conformance holds
them to it: the same expectations run on these and on the real MySQL and RabbitMQ.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from delayq.access.grants import Client
from delayq.errors import Conflict, StoreUnavailable, UnknownTopic
from delayq.lifecycle import Status
from delayq.nodes.amqp.frames import Outgoing
from delayq.nodes.front.caller import Caller, serving
from delayq.nodes.amqp.confirms import CONFIRMED, FAILED, NOT_SENT, UNROUTABLE, VETOED, Outcome
from delayq.nodes.validation import ServiceSpec
from delayq.store.controls import NONE as NO_CONTROLS, Controls
from delayq.store.overdue import Attempt, AttemptDeadline
from delayq.store.tasks import UNCONFIRMED_GRACE_MS
from delayq.store.values import Claim, Claimed, Entry, KeyWait, NewTask, Outcome as Written, Submitted


class ManualClock:
    """delayq.clock.Clock, set by the test: `now` in epoch ms; monotonic() follows it."""

    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def now_ms(self) -> int:
        return self.now

    def monotonic(self) -> float:
        return self.now / 1000.0


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


@dataclass
class Sent:
    message: Outgoing
    on_outcome: Outcome


class Outbox:
    """A publisher that takes every batch at once and settles its messages when the test says:
    `answer(CONFIRMED)` for everything sent, or `answer(FAILED, ids)` for some."""

    def __init__(self) -> None:
        self.ready = True
        self.sent: list[Sent] = []
        self.vetoed: list[tuple[Outgoing, str]] = []

    def publish(self, batch: list[Outgoing], on_outcome: Outcome, veto: Callable[[], str | None] | None = None) -> None:
        # As the publisher: nothing to write asks no veto, and a batch with no connection to
        # write to never gets as far as asking it.
        if not batch:
            return
        if not self.ready:
            for msg in batch:
                on_outcome(msg.ref, NOT_SENT, "broker not connected")
            return
        why = veto() if veto is not None else None
        for msg in batch:
            if why is not None:
                self.vetoed.append((msg, why))
                on_outcome(msg.ref, VETOED, why)
            else:
                self.sent.append(Sent(msg, on_outcome))

    def answer(self, outcome: str = CONFIRMED, message_ids: Sequence[str] | None = None,
               reason: str | None = None) -> int:
        """Settle the messages sent (those with these message ids, or all) with one outcome."""
        chosen = [s for s in self.sent if message_ids is None or s.message.message_id in message_ids]
        self.sent = [s for s in self.sent if s not in chosen]
        for s in chosen:
            s.on_outcome(s.message.ref, outcome, reason or {FAILED: "nacked by the broker",
                                                            UNROUTABLE: "no queue bound"}.get(outcome))
        return len(chosen)

    @property
    def message_ids(self) -> list[str]:
        return [s.message.message_id for s in self.sent]


class Exchanges:
    """The exchange guard as the dispatcher asks it: why an exchange may not be used (None: it may)."""

    def __init__(self) -> None:
        self.bad: dict[str, str] = {}

    def verdict(self, exchange: str) -> str | None:
        return self.bad.get(exchange)

    def retry_in(self, exchange: str) -> float:
        return 1.0

    def unusable(self) -> dict[str, str]:
        return dict(self.bad)


class Services:
    """delayq.nodes.cluster.services.ServiceRegistry's reads: the services, by topic, and the flow
    controls a test sets (`limits`, by topic; a registered topic without any has none)."""

    def __init__(self, *services: ServiceSpec):
        self.by_topic = {s.topic: s for s in services}
        self.limits: dict[str, Controls] = {}

    def find(self, topic: str) -> ServiceSpec | None:
        return self.by_topic.get(topic)

    def get(self, topic: str) -> ServiceSpec:
        svc = self.by_topic.get(topic)
        if svc is None or not svc.enabled:
            raise UnknownTopic(topic, disabled=svc is not None)
        return svc

    def controls(self, topic: str) -> Controls:
        return self.limits.get(topic, NO_CONTROLS)

    def all_controls(self) -> dict[str, Controls]:
        return {**{topic: NO_CONTROLS for topic in self.by_topic}, **self.limits}


class Clients:
    """delayq.store.clients.ClientStore as Access reads it: these clients, at a version a test
    bumps (with `clients` changed) to make Access load them again."""

    def __init__(self, *clients: Client):
        self.clients = {c.name: c for c in clients}
        self.version_ = "1"

    def version(self) -> str:
        return self.version_

    def load(self) -> tuple[str, dict[str, Client]]:
        return self.version_, dict(self.clients)


def call_as(name: str | None) -> None:
    """This thread serves calls of the client `name` (None: a caller with no identity), as the
    CallPool sets its caller before each call."""
    caller = Caller(("127.0.0.1", 1))
    caller.name, caller.credential = name, "digest"
    serving(caller)
