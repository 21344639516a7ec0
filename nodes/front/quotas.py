"""Quotas: checks each submit call against the quotas of its topics' tenants (delayq.store.tenants)
before anything is written, all or nothing per call. A call over a quota gets QuotaExceeded naming
it; the other calls of its group go on.

    payloadSize, horizon   per task; in a submitBatch, QuotaExceeded carries the task's index
    submitRate             tasks/s, a token bucket per tenant on each node. The cluster-wide rate
                           is split evenly between the live nodes (members in ZooKeeper; 1 when
                           standalone): each node lets through rate/N a second, with a burst of one
                           second of that share (at least one task). The cluster never exceeds the
                           quota, but a tenant whose submits reach fewer nodes than there are
                           (one DelayqClient talks to one node at a time) gets only their share.
                           A batch larger than the burst goes when the bucket is full and leaves it
                           in debt, so the average holds.
    pending                live tasks of the tenant's topics, as counted in MySQL at most ~1 s ago
                           (longer when the count itself is slow: five times its duration), plus
                           the tasks this node accepted since. Nodes do not see each other's recent
                           submits: together they may overshoot by what the other nodes accept
                           within one count interval (bounded by the submit rate, when one is set).

Cost on the submit path: no MySQL round trip. Only topics whose tenant has a quota are in the
table `charge` looks in; when no tenant has one, `charge` returns at its first line.

Threads: `charge` and `refund` run on the submit path (the Thrift I/O thread or the
SubmitBatcher's), `reload` on the services watch's (delayq.nodes.cluster.watch), and the thread "quotas",
owned here, re-counts pending tasks. One lock guards the counters; the table is replaced whole.
"""
from __future__ import annotations

import logging
import math
import threading
from typing import Callable, Sequence

from sqlalchemy import Engine

from delayq import errors
from delayq.client.gen.delayq_thrift import ttypes
from delayq.clock import Clock
from delayq.nodes.metrics import Metrics
from delayq.nodes.threads import NodeThread
from delayq.nodes.cluster.watch import ServicesWatch
from delayq.store.tenants import Tenant, TenantStore

log = logging.getLogger(__name__)

COUNT_INTERVAL_S = 1.0
SLOW_COUNT_FACTOR = 5       # a count that takes d seconds is run again no sooner than 5 d later


def node_share(cluster_rate: float, live: int) -> tuple[float, float]:
    """(this node's rate, its burst): an even share of the cluster-wide rate, and one second of it."""
    rate = cluster_rate / max(1, live)
    return rate, max(1.0, rate)


class TokenBucket:
    """Tokens accrue at a rate up to a burst; it starts full. A take of n goes through when the
    bucket holds min(n, burst) tokens."""

    __slots__ = ("tokens", "burst", "_at")

    def __init__(self, now: float):
        self.tokens, self.burst, self._at = math.inf, math.inf, now

    def fill(self, now: float, rate: float, burst: float) -> None:
        self.tokens = min(burst, self.tokens + max(0.0, now - self._at) * rate)
        self.burst, self._at = burst, now

    def can_take(self, n: int) -> bool:
        return self.tokens >= min(n, self.burst) - 1e-9

    def take(self, n: int) -> None:
        self.tokens -= n

    def give_back(self, n: int) -> None:
        self.tokens = min(self.burst, self.tokens + n)


class _Account:
    """One tenant's counters on this node (kept across reloads while the tenant has quotas)."""

    __slots__ = ("tenant", "per_task", "bucket", "counted", "accepted", "counts")

    def __init__(self, tenant: Tenant, now: float):
        self.bucket = TokenBucket(now)
        self.counted: int | None = None     # live tasks at the last count (None: not counted yet)
        self.accepted = 0                   # tasks let through since that count began
        self.counts = 0                     # counts begun; a refund after one began leaves `accepted` alone
        self.set(tenant)

    def set(self, tenant: Tenant) -> None:
        if tenant.max_pending is None:      # not counted while it has no pending quota
            self.counted, self.accepted = None, 0
        self.tenant = tenant
        self.per_task = tenant.max_payload_bytes is not None or tenant.max_horizon_ms is not None


Charge = tuple[tuple[_Account, int, int], ...]      # (account, tasks, counts at the charge)


class Quotas(NodeThread):
    name = "quotas"

    def __init__(self, store: TenantStore, metrics: Metrics, clock: Clock, live: Callable[[], int],
                 interval_s: float = COUNT_INTERVAL_S):
        super().__init__()
        self._store, self._metrics, self._clock, self._live = store, metrics, clock, live
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._counting = threading.Lock()   # one count at a time: each subtracts what it saw accepted
        self._by_topic: dict[str, _Account] = {}
        self._topics: dict[_Account, list[str]] = {}
        self._took = 0.0
        self._failing = False
        self._reload = False                # the last reload could not read MySQL
        self._loaded: tuple = ({}, {})

    # ---- the submit path ----------------------------------------------------------------------

    def charge(self, specs: Sequence[ttypes.TaskSpec | None] | None, batch: bool, now_ms: int) -> Charge | None:
        """Let one call's tasks through and count them (a Charge to refund if the call then
        fails), or raise QuotaExceeded having counted nothing. None: no quota applies."""
        accounts = self._by_topic
        if not accounts or not specs:
            return None
        wanted: dict[_Account, int] = {}
        for i, spec in enumerate(specs):
            if spec is None:
                continue
            account = accounts.get(spec.topic)
            if account is not None:
                wanted[account] = wanted.get(account, 0) + 1
                if account.per_task:
                    self._check_task(account.tenant, spec, now_ms, i if batch else None)
        if not wanted:
            return None
        with self._lock:
            now, live = self._clock.monotonic(), self._live()
            for account, n in wanted.items():
                t = account.tenant
                if t.max_pending is not None and account.counted is not None \
                        and account.counted + account.accepted + n > t.max_pending:
                    raise self._refused(t, "pending", t.max_pending)
                if t.max_submit_rate is not None:
                    account.bucket.fill(now, *node_share(t.max_submit_rate, live))
                    if not account.bucket.can_take(n):
                        raise self._refused(t, "submitRate", math.ceil(t.max_submit_rate))
            for account, n in wanted.items():
                account.accepted += n
                if account.tenant.max_submit_rate is not None:
                    account.bucket.take(n)
            return tuple((account, n, account.counts) for account, n in wanted.items())

    def refund(self, charge: Charge) -> None:
        """The charged call was not written (refused later, or MySQL failed): give its tasks back."""
        with self._lock:
            for account, n, counts in charge:
                if account.counts == counts:
                    account.accepted -= n
                account.bucket.give_back(n)

    def _check_task(self, t: Tenant, spec: ttypes.TaskSpec, now_ms: int, index: int | None) -> None:
        # Malformed input (no payload, both or neither of the times, negative) is the handler's
        # to refuse as InvalidTask; only what is well formed and over the quota is refused here.
        if t.max_payload_bytes is not None and spec.payload is not None and len(spec.payload) > t.max_payload_bytes:
            raise self._refused(t, "payloadSize", t.max_payload_bytes, index)
        if t.max_horizon_ms is not None:
            delay, due_at = spec.delayMs, spec.dueAtMs
            if (delay is not None and delay > t.max_horizon_ms) or (
                    delay is None and due_at is not None and due_at > now_ms + t.max_horizon_ms):
                raise self._refused(t, "horizon", t.max_horizon_ms, index)

    def _refused(self, t: Tenant, quota: str, limit: int, index: int | None = None) -> errors.QuotaExceeded:
        self._metrics.quota_refusals.labels(t.name, quota).inc()
        return errors.QuotaExceeded(t.name, quota, int(limit), index)

    # ---- tenants and counts -------------------------------------------------------------------

    def reload(self) -> None:
        """Read the tenants again (the services watch calls this after every change). When MySQL
        cannot be read, the quotas read before stay and the thread tries again."""
        try:
            tenants, topic_tenant = self._store.load()
        except errors.DelayqError as e:
            log.warning("could not read the tenants (%s): keeping the quotas read before", e)
            self._reload = True
            return
        self._reload = False
        now = self._clock.monotonic()
        with self._lock:
            kept = {a.tenant.name: a for a in self._topics}
            accounts = {}
            for name, tenant in tenants.items():
                if tenant.limited:
                    account = accounts[name] = kept.get(name) or _Account(tenant, now)
                    account.set(tenant)
            by_topic = {topic: accounts[name] for topic, name in topic_tenant.items() if name in accounts}
            topics: dict[_Account, list[str]] = {a: [] for a in accounts.values()}
            for topic, account in by_topic.items():
                topics[account].append(topic)
            # A new pending quota, or one whose topics changed, is counted before it is used.
            recount = any(a.tenant.max_pending is not None and (a.counted is None or mine != self._topics.get(a))
                          for a, mine in topics.items())
            self._topics = topics
        if recount:
            try:
                self.count()
            except errors.DelayqError as e:     # counted by the thread; until then, not checked
                log.warning("could not count pending tasks of new quotas (%s)", e)
        self._by_topic = by_topic
        if (tenants, topic_tenant) != self._loaded:       # every service change calls this
            log.info("tenants read: %d with quotas, over %d topics", len(accounts), len(by_topic))
            self._loaded = (tenants, topic_tenant)

    def count(self) -> None:
        """Count the live tasks of every tenant with a pending quota, in one statement."""
        with self._counting:
            with self._lock:
                targets = {a: (list(topics), a.accepted) for a, topics in self._topics.items()
                           if a.tenant.max_pending is not None}
                for a in targets:
                    a.counts += 1
            if not targets:
                return
            started = self._clock.monotonic()
            per_topic = self._store.pending(t for topics, _ in targets.values() for t in topics)
            self._took = self._clock.monotonic() - started
            with self._lock:
                for a, (topics, seen) in targets.items():
                    # Tasks let through before the count began are in it (or already done);
                    # those let through while it ran may be counted twice until the next one.
                    a.counted = sum(per_topic.get(t, 0) for t in topics)
                    a.accepted -= seen

    def _run(self) -> None:
        while not self._stop.wait(max(self._interval_s, SLOW_COUNT_FACTOR * self._took)):
            try:
                if self._reload:
                    self.reload()
                self.count()
                if self._failing:
                    log.info("pending tasks counted again")
                self._failing = False
            except errors.DelayqError as e:
                if not self._failing:
                    log.warning("could not count pending tasks (%s): quotas use the last count", e)
                self._failing = True
            except Exception:  # noqa: BLE001 - the counts must go on
                log.exception("counting pending tasks failed")


def build(engine: Engine, metrics: Metrics, clock: Clock, watch: ServicesWatch, live: Callable[[], int]) -> Quotas:
    """The node's Quotas, read again whenever the services watch sees a change; `live` gives the
    number of live nodes the submit rates are split between."""
    quotas = Quotas(TenantStore(engine), metrics, clock, live)
    watch.on_change(quotas.reload)
    return quotas
