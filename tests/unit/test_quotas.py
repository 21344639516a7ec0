"""Unit tests for tenants and quotas without servers: the quotas' validation
(delayq.store.tenants), the token bucket and the split of a rate between nodes, and the check of a
group of submits (delayq.nodes.front.quotas.Quotas on delayq.testing.fakes.Tenants and a driven clock)."""
from __future__ import annotations

import pytest

from delayq.client.gen.delayq_thrift import ttypes
from delayq.errors import QuotaExceeded
from delayq.nodes.front.quotas import Quotas, TokenBucket, node_share
from delayq.nodes.metrics import Metrics
from delayq.store.tenants import Tenant, check_name, checked
from delayq.testing.fakes import Tenants

NOW_MS = 1_700_000_000_000


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def monotonic(self) -> float:
        return self.t

    def now_ms(self) -> int:
        return NOW_MS + int(self.t * 1000)


def make(tenants, topics, pending=None, live=1):
    store, clock, metrics = Tenants(tenants, topics, pending), Clock(), Metrics()
    q = Quotas(store, metrics, clock, live=lambda: live)
    q.reload()
    return q, store, clock, metrics


def task(topic="a", payload=b"x", delay=1000, due_at=None) -> ttypes.TaskSpec:
    return ttypes.TaskSpec(topic=topic, payload=payload, delayMs=None if due_at is not None else delay, dueAtMs=due_at)


def refused(q, specs, batch=False, now_ms=NOW_MS) -> QuotaExceeded:
    with pytest.raises(QuotaExceeded) as e:
        q.charge(specs, batch, now_ms)
    return e.value


def refusals(metrics, tenant, quota) -> float:
    return metrics.registry.get_sample_value("delayq_quota_refusals_total", {"tenant": tenant, "quota": quota}) or 0


# ---- validation ------------------------------------------------------------------------------------

def test_quotas_are_optional_positive_and_bounded():
    assert checked({}) == {}
    assert checked({"max_pending": 10, "max_submit_rate": 2, "max_horizon_ms": 1000, "max_payload_bytes": 1}) == {
        "max_pending": 10, "max_submit_rate": 2.0, "max_horizon_ms": 1000, "max_payload_bytes": 1}
    assert checked({"max_pending": None}) == {"max_pending": None}        # clears it
    for column, bad, says in [("max_pending", 0, "pending quota"), ("max_pending", -5, "between 1 and"),
                              ("max_pending", 10**13, "between 1 and"), ("max_pending", 1.5, "whole number"),
                              ("max_pending", True, "whole number"), ("max_submit_rate", 0, "submitRate"),
                              ("max_submit_rate", float("nan"), "submitRate"), ("max_submit_rate", 2e6, "and 1000000 tasks"),
                              ("max_horizon_ms", 0, "horizon"), ("max_payload_bytes", 2**31, "payloadSize"),
                              ("max_weight", 3, "not a quota")]:
        with pytest.raises(ValueError, match=says):
            checked({column: bad})


def test_tenant_names_are_like_client_names():
    assert check_name("acme-eu_1") == "acme-eu_1"
    for bad in ("", "Acme", "-x", "a" * 65, "a b", None):
        with pytest.raises(ValueError, match="tenant name"):
            check_name(bad)


# ---- the token bucket and the split ----------------------------------------------------------------

def test_a_cluster_rate_is_split_evenly_between_live_nodes_with_a_burst_of_one_second():
    assert node_share(300, 3) == (100, 100)
    assert node_share(300, 1) == (300, 300)
    assert node_share(300, 0) == (300, 300)        # no member seen yet: this node alone
    assert node_share(2, 4) == (0.5, 1.0)          # a burst holds at least one task


def test_the_bucket_starts_full_refills_at_its_rate_and_lets_a_large_batch_through_in_debt():
    b = TokenBucket(0.0)
    b.fill(0.0, rate=10, burst=10)
    assert b.can_take(10)
    b.take(10)
    assert not b.can_take(1)
    b.fill(0.25, rate=10, burst=10)                 # 2.5 tokens
    assert b.can_take(2) and not b.can_take(3)
    b.fill(10.0, rate=10, burst=10)                 # never above the burst
    assert b.tokens == 10
    assert b.can_take(25)                           # larger than the burst: goes when full...
    b.take(25)
    b.fill(11.0, rate=10, burst=10)                 # ...and is paid back before the next
    assert b.tokens == pytest.approx(-5) and not b.can_take(1)
    b.give_back(100)
    assert b.tokens == 10


# ---- the check of a group --------------------------------------------------------------------------

def test_topics_without_a_tenant_or_tenants_without_quotas_cost_nothing():
    q, store, _, _ = make([Tenant("free")], {"a": "free"})
    assert q.charge([task("a")] * 1000, True, NOW_MS) is None
    assert q.charge([task("other")], False, NOW_MS) is None
    assert store.reads == 0


def test_payload_and_horizon_are_checked_per_task_with_the_index_in_a_batch():
    q, _, _, metrics = make([Tenant("acme", max_payload_bytes=4, max_horizon_ms=60_000)], {"a": "acme"})
    assert q.charge([task(payload=b"1234"), task(delay=60_000), task(due_at=NOW_MS + 60_000)], True, NOW_MS)
    e = refused(q, [task(), task("b", payload=b"12345"), task(payload=b"12345")], batch=True)
    assert (e.tenant, e.quota, e.limit, e.index) == ("acme", "payloadSize", 4, 2)
    e = refused(q, [task(delay=60_001)])
    assert (e.quota, e.limit, e.index) == ("horizon", 60_000, None)
    assert refused(q, [task(), task(due_at=NOW_MS + 60_001)], batch=True).index == 1
    # Malformed times are the handler's to refuse (InvalidTask), not a quota's.
    assert q.charge([task(delay=None), task(delay=-5)], True, NOW_MS)
    assert refusals(metrics, "acme", "payloadSize") == 1 and refusals(metrics, "acme", "horizon") == 2


def test_pending_counts_mysql_plus_what_this_node_accepted_since_and_refuses_a_batch_whole():
    q, store, _, metrics = make([Tenant("acme", max_pending=10)], {"a": "acme", "a2": "acme"}, {"a": 4, "a2": 3})
    assert store.reads == 1                        # counted before the quota was used
    assert q.charge([task()] * 3, True, NOW_MS)     # 7 + 3 = 10
    e = refused(q, [task("a2")])
    assert (e.tenant, e.quota, e.limit, e.index) == ("acme", "pending", 10, None)
    store.live = {"a": 2}                           # tasks finished; the next count sees it
    q.count()
    assert q.charge([task()] * 8, True, NOW_MS)
    assert refused(q, [task()] * 1, batch=True).quota == "pending"
    assert refusals(metrics, "acme", "pending") == 2


def test_a_refund_gives_back_what_a_call_that_was_not_written_took():
    q, store, _, _ = make([Tenant("acme", max_pending=5, max_submit_rate=5)], {"a": "acme"})
    charge = q.charge([task()] * 5, True, NOW_MS)
    assert refused(q, [task()]).quota == "pending"
    q.refund(charge)
    assert q.charge([task()] * 5, True, NOW_MS)


def test_a_refund_after_a_count_began_leaves_the_count_alone():
    q, store, _, _ = make([Tenant("acme", max_pending=5)], {"a": "acme"})
    charge = q.charge([task()] * 2, True, NOW_MS)
    q.count()                   # saw the 2 as accepted; MySQL has none: they were never written
    q.refund(charge)
    assert q.charge([task()] * 5, True, NOW_MS)     # not 5 + 2 free places
    assert refused(q, [task()]).quota == "pending"


def test_the_submit_rate_is_this_nodes_share_and_refills_with_time():
    q, _, clock, metrics = make([Tenant("acme", max_submit_rate=30)], {"a": "acme"}, live=3)
    for _ in range(10):                             # 30/s across 3 nodes: 10/s here, burst 10
        q.charge([task()], False, NOW_MS)
    e = refused(q, [task()])
    assert (e.quota, e.limit) == ("submitRate", 30)
    clock.t += 0.5
    assert q.charge([task()] * 5, True, NOW_MS)
    assert refused(q, [task()]).quota == "submitRate"
    assert refusals(metrics, "acme", "submitRate") == 2


def test_a_call_over_one_quota_takes_nothing_from_the_others():
    q, _, _, _ = make([Tenant("acme", max_submit_rate=10), Tenant("tiny", max_pending=1)],
                      {"a": "acme", "t": "tiny"})
    assert refused(q, [task("a")] * 5 + [task("t")] * 2, batch=True).tenant == "tiny"
    assert q.charge([task("a")] * 10, True, NOW_MS)         # acme's bucket still full
    assert q.charge([task("t")], False, NOW_MS)             # tiny's place still free


def test_a_change_of_tenants_holds_at_the_next_reload_and_keeps_the_counters():
    q, store, _, _ = make([Tenant("acme", max_submit_rate=5)], {"a": "acme"})
    q.charge([task()] * 5, True, NOW_MS)
    store.tenants["acme"] = Tenant("acme", max_submit_rate=5, max_payload_bytes=1)
    store.topics["b"] = "acme"
    q.reload()
    assert refused(q, [task("b")]).quota == "submitRate"     # the same bucket, now also for b
    assert refused(q, [task("b", payload=b"xx")]).quota == "payloadSize"
    store.tenants["acme"] = Tenant("acme")
    q.reload()
    assert q.charge([task("a")] * 100, True, NOW_MS) is None


def test_a_reload_that_cannot_read_mysql_keeps_the_quotas_read_before():
    q, store, _, _ = make([Tenant("acme", max_payload_bytes=1)], {"a": "acme"})
    store.down = True
    q.reload()
    assert refused(q, [task(payload=b"xx")]).quota == "payloadSize"
