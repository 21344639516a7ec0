"""Dispatcher: takes due tasks from the DelayQueue in batches, claims them in MySQL (fenced) and
hands the claimed ones to the publisher. There is one per lane (delayq.nodes.dispatch.lanes), each taking
only the topics of its lane and publishing on its own connection.

Only a task whose claim matched may be published, and only while that claim is current
(delayq.nodes.dispatch.lease): the releaser checks each claim's lease before handing it to the publisher,
and the publisher checks them again just before it writes the frames; a claim no longer current
goes back to DELAY unsent, at its due time (RETURNED, which the Recorder records), into memory or to its
shard's new owner. What happens after the publish is the Recorder's job: it gets every publish
outcome. A task later than its service's misfire threshold, with the policy "fail", is failed
instead of published. A claim that fails because MySQL is down puts its batch back into memory
and is tried again a quarter of a second later, so firing resumes the moment MySQL answers; since
it may have committed all the same, it is noted as unsettled (delayq.nodes.dispatch.unsettled) and undone
before the next claim. Tasks taken from memory whose shard is no longer ours (fenced in MySQL, or
lost meanwhile) are handed to their shard's owner. A claim that expects a result adds its deadline
to Deadlines.

Each claimed task travels as one typed value, an Attempt (delayq.nodes.dispatch.attempts), from its claim
through the release heap, decide() (delayq.nodes.dispatch.decide: misfire, route, hold-back), the publish
and its outcome to the Recorder, which is each published batch's outcome handler. What a
Dispatcher is built from, in four bundles and its settings: delayq.nodes.dispatch.wiring.

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

from delayq.clock import Clock, pause
from delayq.errors import DelayqError, Unavailable
from delayq.lifecycle import Result
from delayq.nodes.amqp import messages
from delayq.nodes.dispatch.attempts import HELD, RETURNED, Attempt, ReleaseHeap, Settled
from delayq.nodes.dispatch.claimlead import ClaimLead
from delayq.nodes.dispatch.decide import decide
from delayq.nodes.dispatch.lease import MOVED, ClaimLease
from delayq.nodes.dispatch.pace import ClaimPace
from delayq.nodes.dispatch.wiring import Claims, DispatchSettings, Memory, Outcomes, Publishing
from delayq.nodes.memory.delayqueue import PROMPT, Entry
from delayq.nodes.memory.keyholds import KeyHolds
from delayq.nodes.metrics import Metrics
from delayq.nodes.threads import NodeThread
from delayq.store.values import Claim

log = logging.getLogger(__name__)

MAX_LEAD_MS = 250      # the furthest ahead of its due time a task is claimed (delayq.nodes.dispatch.claimlead)
HELD_BATCHES = 2       # claimed, not yet handed to the publisher, at most (in the lane's batches)


class Dispatcher(NodeThread):
    name = "dispatcher"

    def __init__(self, claims: Claims, memory: Memory, publishing: Publishing, outcomes: Outcomes,
                 metrics: Metrics, clock: Clock, settings: DispatchSettings = DispatchSettings()):
        super().__init__(settings.claimers)
        self._lane = settings.lane
        self.name = f"{self._lane}-lane"
        self._store, self._ownership, self._unsettled = claims.store, claims.ownership, claims.unsettled
        self._queue, self._flow, self._rescan = memory.queue, memory.flow, memory.rescan
        self._keys = memory.keys or KeyHolds(memory.queue, clock)
        self._publisher, self._services, self._guard = publishing.outbox, publishing.services, publishing.guard
        self._default_exchange = publishing.default_exchange
        self._recorder, self._results, self._deadlines = outcomes.recorder, outcomes.results, outcomes.deadlines
        self._metrics, self._clock = metrics, clock
        self._batch = settings.batch
        # A claim must be done by the due instant: the lead grows while claims are slow (at
        # most half the claim lease, which must still hold when the task is published).
        self._lead = ClaimLead(settings.lead_ms, max_ms=min(MAX_LEAD_MS, settings.lease_ms // 2))
        self._claimed = ReleaseHeap(clock.now_ms)       # claimed ahead, released at their due time
        self._lease = ClaimLease(self._ownership, settings.lease_ms, claims.lease_clock, claims.pauses)
        self._lease_clock = claims.lease_clock
        # How much may be claimed and not yet written, so that every claim is written within its lease.
        self._pace = ClaimPace(self._lease.seconds, self._batch, HELD_BATCHES, claims.lease_clock)
        self._claim_failures = 0
        self._held_topics: set[str] = set()       # topics whose last tasks were held back
        self._releaser: threading.Thread | None = None
        self._claims_over = threading.Event()     # set on stop once no claiming thread runs

    def _interrupt(self) -> None:
        self._queue.close()

    def start(self) -> None:
        super().start()
        self._releaser = threading.Thread(target=self._release_loop, name=f"{self._lane}-releaser", daemon=True)
        self._releaser.start()

    def stop(self, timeout: float = 5.0) -> None:
        super().stop(timeout)           # the claiming threads have ended (or timed out) here
        self._claims_over.set()
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
            # Claim no further ahead of the publisher than HELD_BATCHES batches: what is claimed
            # and not yet published waits in due order, so during a burst a task of another topic
            # taken from memory would otherwise wait behind everything claimed before it (memory
            # is where topics take turns). One batch would wait less but leaves the claims no time
            # to overlap the publishes: the burst drains slower. And no more than the lane writes
            # within the claim lease, at the pace it has been writing (delayq.nodes.dispatch.pace):
            # a catch-up on a busy node claims less at a time rather than claims that expire.
            room = self._pace.room(wait_s=0.05)
            if room <= 0:
                continue
            lead_ms = self._lead.ms if prompt else 0
            with self._pace.reserving(room):
                try:
                    due = self._queue.take_due(room, timeout=0.5, lead_ms=lead_ms, gather_ms=lead_ms // 2,
                                               lane=self._lane)
                except Exception:  # noqa: BLE001 - a bug in a topic's gate must not end the claiming thread
                    log.exception("taking due tasks failed; trying again in 0.5 s")
                    self._stop.wait(0.5)
                    continue
                if due:
                    self.claim(due)

    def claim(self, due: list[Entry]) -> None:
        """Claim a batch taken from memory (what each claiming thread does with it): the claimed
        attempts wait in the release heap; the rest go back to memory or to their shard's owner."""
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
        except Unavailable as e:
            if lease is not None:       # the claim was sent: it may have committed
                self._unsettled.note(due, lease.owner, now)
            self._put_back(due, e)
            return
        except Exception:  # noqa: BLE001 - the dispatcher must outlive any bug in one batch
            log.exception("claiming %d due tasks failed", len(due))
            self._dropped()
            return
        if self._claim_failures:
            log.info("claims work again after %d failed attempts", self._claim_failures)
            self._claim_failures = 0
        self._deadlines.add((now + c.ttr_ms, c.task_id, c.attempt) for c in claim.claimed if c.ttr_ms > 0)
        if claim.rooms:
            self._kept_to_caps(claim)
        if claim.waits:
            self._keys.hold(claim.waits)
        # Taken from memory but not ours to claim: their shard's owner takes them (a hint).
        lost = set(claim.fenced) | {e.shard_id for e in due if e.shard_id not in lease.fence}
        if lost:
            self._queue.hand_over([e for e in due if e.shard_id in lost])
        if claim.fenced:
            self._rescan()
        # Released at the instant memory had it for: its due time, or its catch-up slot (so that
        # concurrent claims of paced tasks still go out in due order).
        at = {e.task_id: e.at_ms for e in due}
        self._pace.claimed(len(claim.claimed), self._lease_clock() - lease.taken)
        self._claimed.push(Attempt(c, lease, at.get(c.task_id, c.due_ms)) for c in claim.claimed)

    def _kept_to_caps(self, claim: Claim) -> None:
        """Tell the flow how much room each capped topic has left; the tasks the cap kept back go
        back to memory (they are still DELAY) and wait for a slot."""
        assert self._flow is not None
        got = collections.Counter(c.topic for c in claim.claimed)
        for topic, (in_flight, left) in claim.rooms.items():
            self._flow.claimed(topic, in_flight + got[topic], left)
        if claim.deferred:
            for topic, n in collections.Counter(e.topic for e in claim.deferred).items():
                self._metrics.throttled.labels(topic, "in_flight").inc(n)
            self._queue.put_back(claim.deferred)

    def release_due(self, timeout: float = 0.0) -> int:
        """Publish the claimed attempts released by now (what the releaser does each turn),
        waiting up to `timeout` s for the first; returns how many were taken."""
        ready = self._claimed.take_due(self._batch, timeout=timeout)
        if ready:
            self._release(ready)
        return len(ready)

    def _release_loop(self) -> None:
        """The releaser thread: publishes claimed tasks the moment they are due, never before.
        On stop it still publishes what is claimed (due within lead_ms), then ends."""
        while True:
            stopping = self._claims_over.is_set()
            if not self.release_due(0.05 if stopping else 0.5) and stopping:
                # No claims come any more: wait out the claim lead for what is still held, then
                # publish it. (time.sleep raised EINVAL here under libfaketime, and the releaser
                # died with its last claims unpublished: delayq.clock.pause.)
                pause(self._lead.ms / 1000.0)
                rest = self._claimed.take_all()
                if rest:
                    self._release(rest)
                self._claimed.close()
                return

    def _release(self, attempts: list[Attempt]) -> None:
        released = self._pace.released()
        try:
            self._publish(attempts, released)
        except Exception:  # noqa: BLE001 - left READY: their time-to-run brings them back
            log.exception("publishing %d claimed tasks failed", len(attempts))
            self._pace.dropped(len(attempts))

    @property
    def held_topics(self) -> dict[str, str]:
        """Topic -> why its tasks are held back, while the exchange its service uses now is
        unusable: a topic leaves the list once its exchange is fixed, or once it is registered on
        another one (its held tasks may then go out from the other lane, which never held them)."""
        unusable = self._guard.unusable()
        held = {}
        for topic in list(self._held_topics):
            svc = self._services.find(topic)
            exchange = svc.exchange if svc else self._default_exchange
            if exchange in unusable:
                held[topic] = f"exchange {exchange!r}: {unusable[exchange]}"
        return held

    def _current(self, attempts: list[Attempt]) -> list[Attempt]:
        """The attempts whose claim is still current; the others go back to DELAY unsent, at
        their due time (to the shard's new owner when it moved)."""
        current, refused = self._lease.split([(a, a.lease) for a in attempts])
        for why, gone in refused.items():
            self._metrics.claims_expired.inc(len(gone))
            if why != MOVED:
                log.warning("not publishing %d claimed tasks: %s; back to DELAY", len(gone), why)
            self._recorder.put([Settled(a, RETURNED, why, a.task.due_ms) for a in gone])
        return [a for a, _ in current]

    def _put_back(self, due: list[Entry], e: Exception) -> None:
        """MySQL is down: the batch goes back into memory (still DELAY in MySQL) and is claimed
        again shortly; the horizon stands, so the window need not be read again afterwards."""
        self._claim_failures += 1
        self._pace.restart()
        self._metrics.errors.labels("mysql").inc()
        log.log(logging.WARNING if self._claim_failures == 1 else logging.DEBUG,
                "claim of %d due tasks failed: %s; trying again every 0.25 s", len(due), e)
        self._queue.put_back(due)
        self._stop.wait(0.25)

    def _dropped(self) -> None:
        """The batch is left to MySQL (still DELAY, or READY until its time-to-run); the loader's
        next scan brings DELAY ones back."""
        self._queue.set_horizon(0)
        self._stop.wait(0.5)

    def _publish(self, attempts: list[Attempt], released: float) -> None:
        now = self._clock.now_ms()
        current = self._current(attempts)
        try:
            plan = decide(current, self._services.find, self._guard.verdict, self._default_exchange, now)
        except Unavailable as e:
            # A topic's service could not be read (MySQL away): nothing was sent, so back to DELAY
            # with their attempt numbers, due at once. Left READY, a task with no time-to-run would
            # have nothing to bring it back.
            self._pace.dropped(len(attempts))
            self._recorder.put([Settled(a, RETURNED, f"its service could not be read: {e}", a.task.due_ms)
                                for a in current])
            return
        self._pace.dropped(len(attempts) - len(plan.publish))
        for exchange, (why, held) in plan.held.items():
            # Not published: back to DELAY until the exchange is checked again (the guard logs
            # the verdict once; this counts the tasks and names the topics).
            due = now + max(1000, int(self._guard.retry_in(exchange) * 1000))
            for a in held:
                self._metrics.held.labels(a.task.topic).inc()
                self._held_topics.add(a.task.topic)
            self._recorder.put([Settled(a, HELD, why, due) for a in held])
        if plan.publish:
            sent = collections.Counter(a.task.topic for a, _ in plan.publish)
            for topic, n in sent.items():
                self._metrics.dispatched.labels(topic).inc(n)
                self._held_topics.discard(topic)
            out = []
            for a, route in plan.publish:
                a.sent_ms = now
                out.append(messages.fired(a.task, route.exchange, route.routing_key, now, ref=a))
            published = [(a, a.lease) for a, _ in plan.publish]
            handoff = self._pace.handoff(len(published), released)

            def veto() -> str | None:       # on the publisher's thread, just before the write
                handoff.done(written=True)
                return self._lease.refusal_of(published)

            def on_outcome(ref: Attempt, outcome: str, reason: str | None) -> None:
                handoff.done(written=False)             # settled unwritten (the broker away), or after the write
                self._recorder.on_outcome(ref, outcome, reason)
            self._publisher.publish(out, on_outcome, veto=veto)
        for a, late in plan.misfired:
            c = a.task
            try:
                self._results.apply(c.task_id, c.attempt, Result.MISFIRED,
                                    f"{late} ms late, past the service's misfire threshold")
            except DelayqError as e:    # left READY: its time-to-run will bring it back
                log.warning("misfire of %s not recorded: %s", c.task_id, e)

