"""Dispatcher: takes due tasks from the DelayQueue in batches, claims them in MySQL (fenced) and
hands the claimed ones to the publisher. There is one per lane (delayq.nodes.dispatchlanes), each taking
only the topics of its lane and publishing on its own connection.

Only a task whose claim matched may be published, and only while that claim is current
(delayq.nodes.lease): the releaser checks each claim's lease before handing it to the publisher,
and the publisher checks them again just before it writes the frames; a claim no longer current
goes back to DELAY unsent, at its due time (the Recorder's `returned`), into memory or to its
shard's new owner. What happens after the publish is the Recorder's job: it gets every publish
outcome. A task later than its service's misfire threshold, with the policy "fail", is failed
instead of published. A claim that fails because MySQL is down puts its batch back into memory
and is tried again a quarter of a second later, so firing resumes the moment MySQL answers; since
it may have committed all the same, it is noted as unsettled (delayq.nodes.unsettled) and undone
before the next claim. Tasks taken from memory whose shard is no longer ours (fenced in MySQL, or
lost meanwhile) are handed to their shard's owner. A claim that expects a result adds its deadline
to Deadlines.

Threads: `claimers` claiming threads, each taking its own batches from the DelayQueue (one entry per
task, so no two claims touch the same row; all take the shard rows in share mode), and the releaser
that publishes what they claimed at its due instant; all owned here. `stop()` joins the claiming
threads first, so the releaser still publishes what their last claims took.
"""
from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Callable

from delayq.clock import Clock
from delayq.errors import DelayqError, Unavailable
from delayq.lifecycle import Result
from delayq.nodes.amqp import messages
from delayq.nodes.amqp.exchanges import ExchangeGuard
from delayq.nodes.amqp.publisher import ConfirmedPublisher
from delayq.nodes.claimlead import ClaimLead
from delayq.nodes.deadlines import Deadlines
from delayq.nodes.flow import Flow
from delayq.nodes.delayqueue import BULK, PROMPT, DelayQueue, Entry
from delayq.nodes.lease import MOVED, ClaimLease, Lease
from delayq.nodes.metrics import Metrics
from delayq.nodes.ownership import Ownership
from delayq.nodes.results import ResultApplier
from delayq.nodes.services import ServiceRegistry
from delayq.nodes.threads import NodeThread
from delayq.nodes.unsettled import Unsettled
from delayq.store.tasks import TaskStore
from delayq.store.values import Claim, Claimed

log = logging.getLogger(__name__)

MAX_LEAD_MS = 250      # the furthest ahead of its due time a task is claimed (delayq.nodes.claimlead)
HELD_BATCHES = 2       # claimed, not yet handed to the publisher, at most (in the lane's batches)


class Dispatcher(NodeThread):
    name = "dispatcher"

    def __init__(self, store: TaskStore, queue: DelayQueue, ownership: Ownership, services: ServiceRegistry,
                 publisher: ConfirmedPublisher, results: ResultApplier, metrics: Metrics, clock: Clock, *,
                 batch: int, default_exchange: str, lead_ms: int = 20, claimers: int = 1,
                 lease_ms: int = 1500, guard: ExchangeGuard, deadlines: Deadlines,
                 hold: Callable[[list[Claimed], int, str], None], returned: Callable[[list[Claimed], str], None],
                 unsettled: Unsettled, on_fenced: Callable[[], None] = lambda: None,
                 flow: Flow | None = None, lane: str = BULK):
        super().__init__(claimers)
        self._lane = lane
        self.name = f"{lane}-lane"
        self._store, self._queue, self._ownership = store, queue, ownership
        self._results, self._metrics = results, metrics
        # A claim must be done by the due instant: the lead grows while claims are slow (at
        # most half the claim lease, which must still hold when the task is published).
        self._lead = ClaimLead(lead_ms, max_ms=min(MAX_LEAD_MS, lease_ms // 2))
        self._claimed = DelayQueue(clock)              # claimed ahead, released at their due time
        self._held: dict[str, tuple[Claimed, Lease]] = {}
        self._lease = ClaimLease(ownership, lease_ms)
        self._guard, self._hold, self._deadlines = guard, hold, deadlines
        self._returned, self._unsettled = returned, unsettled
        self._claim_failures = 0
        self._held_topics: dict[str, str] = {}    # topic -> the exchange its last tasks were held back for
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)    # signalled when the releaser takes claimed tasks
        self._releaser: threading.Thread | None = None
        self._claims_over = threading.Event()     # set on stop once no claiming thread runs
        self._services, self._publisher, self._clock = services, publisher, clock
        self._batch = batch
        self._default_exchange = default_exchange
        # Called when a claim was fenced on some shard: the loader re-reads the whole window, so
        # that the tasks taken from memory for it do not wait for the rolling re-read.
        self._on_fenced = on_fenced        # a shard was lost: the loader rescans
        self._flow = flow

    def _interrupt(self) -> None:
        self._queue.close()

    def start(self) -> None:
        super().start()
        self._releaser = threading.Thread(target=self._release_loop, name=f"{self._lane}-releaser", daemon=True)
        self._releaser.start()

    def stop(self, timeout: float = 5.0) -> None:
        super().stop(timeout)           # the claiming threads have ended (or timed out) here
        self._claims_over.set()
        self._claimed.close()
        if self._releaser is not None:
            self._releaser.join(timeout)

    def _run(self) -> None:
        # The prompt lane claims up to lead_ms ahead, so the claim's round trips and commit are
        # done by the due instant; the releaser publishes each claimed task at its due time. It
        # waits until its next task is due within half the lead and then claims the whole lead: a
        # claim per half lead, not one per task coming into the lead. The bulk lane takes only
        # tasks already due, in full batches (a backlog: claims of more tasks cost less per task).
        prompt = self._lane == PROMPT
        while not self._stop.is_set():
            if not self._ownership.claimable or not self._publisher.ready:
                # Claiming is suspended or nothing could be published: leave due tasks queued.
                self._stop.wait(0.1)
                continue
            if not self._wait_for_room():
                continue
            lead_ms = self._lead.ms if prompt else 0
            try:
                due = self._queue.take_due(self._batch, timeout=0.5, lead_ms=lead_ms, gather_ms=lead_ms // 2,
                                           lane=self._lane)
            except Exception:  # noqa: BLE001 - a bug in a topic's gate must not end the claiming thread
                log.exception("taking due tasks failed; trying again in 0.5 s")
                self._stop.wait(0.5)
                continue
            if due:
                self._claim(due)

    def _wait_for_room(self) -> bool:
        """Claim no further ahead of the publisher than HELD_BATCHES batches: what is claimed and
        not yet published waits in due order, so during a burst a task of another topic taken from
        memory would otherwise wait behind everything claimed before it (memory is where topics
        take turns). One batch would wait less but leaves the claims no time to overlap the
        publishes: the burst drains slower."""
        with self._room:
            if len(self._held) >= self._batch * HELD_BATCHES:
                self._room.wait(0.05)
            return len(self._held) < self._batch * HELD_BATCHES

    def _claim(self, due: list[Entry]) -> None:
        lease, now = None, 0
        try:
            if self._unsettled.pending:
                self._unsettled.settle()
            lease = self._lease.take()
            now = self._clock.now_ms()
            started = time.monotonic()
            claim = self._store.claim(due, lease.owner, lease.fence, now, self._flow.caps() if self._flow else None)
            if self._lane == PROMPT:
                self._lead.claimed((time.monotonic() - started) * 1000)
            claimed, fenced = claim.claimed, claim.fenced
        except Unavailable as e:
            if lease is not None:       # the claim was sent: it may have committed
                self._unsettled.note(due, lease.owner, now)
            self._put_back(due, e)
            return
        except Exception:  # noqa: BLE001 - the dispatcher must outlive any bug in one batch
            log.exception("claiming %d due tasks failed", len(due))
            self._dropped(due, None)
            return
        if self._claim_failures:
            log.info("claims work again after %d failed attempts", self._claim_failures)
            self._claim_failures = 0
        self._deadlines.add((now + c.ttr_ms, c.task_id, c.attempt) for c in claimed if c.ttr_ms > 0)
        if claim.rooms:
            self._kept_to_caps(claim, now)
        # Taken from memory but not ours to claim: their shard's owner takes them (a hint).
        lost = set(fenced) | {e.shard_id for e in due if e.shard_id not in lease.fence}
        if lost:
            self._queue.hand_over([e for e in due if e.shard_id in lost])
        if fenced:
            # If the shard is ours again at a newer epoch than we knew, its tasks are in MySQL only.
            self._on_fenced()
        with self._lock:
            for c in claimed:
                self._held[c.task_id] = (c, lease)
        # Released at the instant memory had it for: its due time, or its catch-up slot (so that
        # concurrent claims of paced tasks still go out in due order).
        at = {e.task_id: e.at_ms for e in due}
        self._claimed.offer_many(Entry(c.task_id, c.shard_id, at.get(c.task_id, c.due_ms)) for c in claimed)

    def _kept_to_caps(self, claim: Claim, now: int) -> None:
        """Tell the flow how much room each capped topic has left; the tasks the cap kept back go
        back to memory (they are still DELAY) and wait for a slot."""
        got = collections.Counter(c.topic for c in claim.claimed)
        for topic, (in_flight, left) in claim.rooms.items():
            self._flow.claimed(topic, in_flight + got[topic], left)
        if claim.deferred:
            for topic, n in collections.Counter(e.topic for e in claim.deferred).items():
                self._metrics.throttled.labels(topic, "in_flight").inc(n)
            self._queue.put_back(claim.deferred)

    def _release_loop(self) -> None:
        """The releaser thread: publishes claimed tasks the moment they are due, never before.
        On stop it still publishes what is claimed (due within lead_ms), then ends."""
        while True:
            stopping = self._claims_over.is_set()
            entries = self._claimed.take_due(self._batch, timeout=0.5)
            with self._lock:
                ready = [self._held.pop(e.task_id) for e in entries if e.task_id in self._held]
                left = len(self._held)
                if ready:
                    self._room.notify_all()
            if ready:
                try:
                    self._publish(ready)
                except Exception:  # noqa: BLE001 - left READY: their time-to-run brings them back
                    log.exception("publishing %d claimed tasks failed", len(ready))
            if stopping and not left:
                return
            if stopping and not entries:
                # Closed queue: wait out the claim lead for what is still held, then publish it.
                time.sleep(self._lead.ms / 1000.0)
                with self._lock:
                    rest, self._held = list(self._held.values()), {}
                if rest:
                    self._publish(rest)
                return

    @property
    def held_topics(self) -> dict[str, str]:
        """Topic -> why its tasks are held back, while its exchange is still unusable (a topic whose
        held tasks were all cancelled leaves the list once its exchange is fixed)."""
        unusable = self._guard.unusable()
        return {t: f"exchange {ex!r}: {unusable[ex]}" for t, ex in list(self._held_topics.items()) if ex in unusable}

    def _hold_back(self, exchange: str, reason: str, tasks: list[Claimed], now: int) -> None:
        """Not published: back to DELAY until the exchange is checked again (the guard logs the
        verdict once; this counts the tasks and names the topics)."""
        due = now + max(1000, int(self._guard.retry_in(exchange) * 1000))
        for c in tasks:
            self._metrics.held.labels(c.topic).inc()
            self._held_topics[c.topic] = exchange
        self._hold(tasks, due, reason)

    def _current(self, held: list[tuple[Claimed, Lease]]) -> list[tuple[Claimed, Lease]]:
        """The claims still current; the others go back to DELAY unsent, at their due time."""
        current, refused = self._lease.split(held)
        for why, claims in refused.items():
            self._metrics.claims_expired.inc(len(claims))
            if why != MOVED:
                log.warning("not publishing %d claimed tasks: %s; back to DELAY", len(claims), why)
            self._returned(claims, why)
        return current

    def _put_back(self, due: list[Entry], e: Exception) -> None:
        """MySQL is down: the batch goes back into memory (still DELAY in MySQL) and is claimed
        again shortly; the horizon stands, so the window need not be read again afterwards."""
        self._claim_failures += 1
        self._metrics.errors.labels("mysql").inc()
        log.log(logging.WARNING if self._claim_failures == 1 else logging.DEBUG,
                "claim of %d due tasks failed: %s; trying again every 0.25 s", len(due), e)
        self._queue.put_back(due)
        self._stop.wait(0.25)

    def _dropped(self, due: list, reason: str | None) -> None:
        """The batch is left to MySQL (still DELAY, or READY until its time-to-run); the loader's
        next scan brings DELAY ones back."""
        if reason:
            self._metrics.errors.labels("mysql").inc()
            log.warning(reason)
        self._queue.set_horizon(0)
        self._stop.wait(0.5)

    def _publish(self, held: list[tuple[Claimed, Lease]]) -> None:
        held = self._current(held)
        now = self._clock.now_ms()
        out, published, misfired = [], [], []
        services = {}                   # per topic, looked up once per batch
        verdicts: dict[str, str | None] = {}
        kept_back: dict[str, list[Claimed]] = {}
        sent = collections.Counter()
        for c, lease in held:
            if c.topic not in services:
                services[c.topic] = self._services.find(c.topic)
            svc = services[c.topic]
            if svc is not None and svc.misfire_policy == "fail" and svc.misfire_threshold_ms is not None \
                    and now - c.due_ms > svc.misfire_threshold_ms:
                misfired.append((c, now - c.due_ms))
                continue
            exchange = svc.exchange if svc else self._default_exchange
            if exchange not in verdicts:
                verdicts[exchange] = self._guard.verdict(exchange)
            if verdicts[exchange] is not None:
                kept_back.setdefault(exchange, []).append(c)
                continue
            routing_key = svc.routing_key if svc else c.topic
            out.append(messages.fired(c, exchange, routing_key, now))
            published.append((c, lease))
            sent[c.topic] += 1
        for topic, n in sent.items():
            self._metrics.dispatched.labels(topic).inc(n)
            self._held_topics.pop(topic, None)
        for exchange, tasks in kept_back.items():
            self._hold_back(exchange, verdicts[exchange], tasks, now)
        if out:
            self._publisher.publish(out, veto=lambda: self._lease.refusal_of(published))
        for c, late in misfired:
            try:
                self._results.apply(c.task_id, c.attempt, Result.MISFIRED,
                                    f"{late} ms late, past the service's misfire threshold")
            except DelayqError as e:    # left READY: its time-to-run will bring it back
                log.warning("misfire of %s not recorded: %s", c.task_id, e)
