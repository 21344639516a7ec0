"""decide(): what becomes of a batch of claimed attempts at their release (pure)."""
from __future__ import annotations

from delayq.nodes.dispatch.attempts import Attempt
from delayq.nodes.dispatch.decide import Route, decide
from delayq.nodes.dispatch.lease import Lease
from delayq.nodes.validation import ServiceSpec
from delayq.store.values import Claimed

NOW = 1_000_000
LEASE = Lease(0.0, 0, "n1", {1: 1})


def attempt(task_id: str, topic: str, due_ms: int = NOW) -> Attempt:
    return Attempt(Claimed(task_id, topic, 1, due_ms, 1, b"", 0, 3), LEASE, due_ms)


def test_routes_by_service_or_by_topic_on_the_default_exchange():
    a, b = attempt("a", "orders"), attempt("b", "free")
    plan = decide([a, b], {"orders": ServiceSpec("orders", "shop", "orders.due")}.get, lambda ex: None, "delayq", NOW)
    assert plan.publish == [(a, Route("shop", "orders.due")), (b, Route("delayq", "free"))]
    assert plan.misfired == [] and plan.held == {}


def test_a_task_past_its_misfire_threshold_fails_only_under_the_fail_policy():
    fail = ServiceSpec("f", "ex", "f", misfire_threshold_ms=60_000, misfire_policy="fail")
    fire = ServiceSpec("g", "ex", "g", misfire_threshold_ms=60_000, misfire_policy="fire")
    late, on_time, late_fired = attempt("a", "f", NOW - 120_000), attempt("b", "f", NOW - 60_000), \
        attempt("c", "g", NOW - 120_000)
    plan = decide([late, on_time, late_fired], {"f": fail, "g": fire}.get, lambda ex: None, "delayq", NOW)
    assert plan.misfired == [(late, 120_000)]
    assert [a for a, _ in plan.publish] == [on_time, late_fired]


def test_an_unusable_exchange_holds_its_tasks_back_with_the_reason_asked_once_per_batch():
    asked = []

    def verdict(ex):
        asked.append(ex)
        return "no exchange 'shop'" if ex == "shop" else None
    svc = ServiceSpec("orders", "shop", "orders.due")
    a, b, c = attempt("a", "orders"), attempt("b", "orders"), attempt("c", "other")
    plan = decide([a, b, c], {"orders": svc}.get, verdict, "delayq", NOW)
    assert plan.held == {"shop": ("no exchange 'shop'", [a, b])}
    assert plan.publish == [(c, Route("delayq", "other"))]
    assert asked == ["shop", "delayq"]
