"""decide(): what becomes of a batch of claimed attempts at their release, as a pure function.

For each attempt, in order:
    misfired    later than its service's misfire threshold, with the policy "fail": failed, not sent
    held        its exchange is unusable now (delayq.nodes.amqp.exchanges): back to DELAY, unsent
    publish     to its service's exchange and routing key (a topic with no service: the node's
                default exchange, routed by topic)

For example, with the service ServiceSpec("orders", "shop", "orders.due", misfire_threshold_ms=60_000,
misfire_policy="fail"), a batch of two "orders" attempts, one due now and one due two minutes ago,
decides plan.publish == [(the first, Route("shop", "orders.due"))] and plan.misfired == [(the
second, 120000)]; had the exchange "shop" been unusable, plan.held == {"shop": (why, [the first])}.

The lookups are read once per topic and per exchange in a batch. Nothing here talks to MySQL or
RabbitMQ: the Dispatcher carries the plan out.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from delayq.nodes.dispatch.attempts import Attempt
from delayq.nodes.validation import ServiceSpec


@dataclass(frozen=True, slots=True)
class Route:
    exchange: str
    routing_key: str


@dataclass
class Plan:
    publish: list[tuple[Attempt, Route]] = field(default_factory=list)
    misfired: list[tuple[Attempt, int]] = field(default_factory=list)              # (attempt, ms late)
    held: dict[str, tuple[str, list[Attempt]]] = field(default_factory=dict)        # exchange -> (why, attempts)


def decide(batch: Sequence[Attempt], service_of: Callable[[str], ServiceSpec | None],
           verdict_of: Callable[[str], str | None], default_exchange: str, now_ms: int) -> Plan:
    """service_of(topic): its callback service, or None; verdict_of(exchange): why it may not be
    published to now, or None."""
    plan = Plan()
    services: dict[str, ServiceSpec | None] = {}
    verdicts: dict[str, str | None] = {}
    for a in batch:
        c = a.task
        if c.topic not in services:
            services[c.topic] = service_of(c.topic)
        svc = services[c.topic]
        if svc is not None and svc.misfire_policy == "fail" and svc.misfire_threshold_ms is not None \
                and now_ms - c.due_ms > svc.misfire_threshold_ms:
            plan.misfired.append((a, now_ms - c.due_ms))
            continue
        exchange = svc.exchange if svc else default_exchange
        if exchange not in verdicts:
            verdicts[exchange] = verdict_of(exchange)
        why = verdicts[exchange]
        if why is not None:
            plan.held.setdefault(exchange, (why, []))[1].append(a)
            continue
        plan.publish.append((a, Route(exchange, svc.routing_key if svc else c.topic)))
    return plan
