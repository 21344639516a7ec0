"""TopicCalls: the Thrift calls about topics rather than tasks: each topic's callback service
(registerService, listServices) and flow controls (setTopicControls, listTopicControls), with
their conversion between the IDL and delayq.store.controls.

Runs on the CallPool's threads; front.service.Service names it as the part serving these calls.
"""
from __future__ import annotations

import logging
from typing import Any, Callable

from delayq import errors
from delayq.access.grants import Permission
from delayq.client.gen.delayq_thrift import ttypes
from delayq.nodes.cluster.services import ServiceRegistry
from delayq.nodes.front.access import Access
from delayq.nodes.front.caller import current
from delayq.nodes.front.errors import CallAnswers, declared
from delayq.nodes.validation import ServiceSpec, check_service
from delayq.store.controls import ControlStore, Controls

log = logging.getLogger(__name__)


def changes(t: ttypes.TopicControls) -> dict[str, Any]:
    """The fields the caller set (unset ones keep their value; 0 clears a limit)."""
    return {"max_fire_rate": t.maxFireRate, "fire_burst": t.fireBurst, "max_in_flight": t.maxInFlight,
            "paused": t.paused, "weight": t.weight}


def as_thrift(topic: str, c: Controls, in_flight: int | None = None) -> ttypes.TopicControls:
    return ttypes.TopicControls(topic=topic, maxFireRate=c.max_fire_rate, fireBurst=c.fire_burst,
                                maxInFlight=c.max_in_flight, paused=c.paused, weight=c.weight, tenant=c.tenant,
                                inFlight=in_flight)


class TopicCalls:
    def __init__(self, services: ServiceRegistry, controls: ControlStore, access: Access, answers: CallAnswers,
                 check_exchange: Callable[[str], str | None], *, default_exchange: str):
        """check_exchange(name): why delayq cannot publish to that exchange, or None."""
        self._services, self._controls, self._access = services, controls, access
        self.answers = answers
        self._check_exchange, self._default_exchange = check_exchange, default_exchange

    @declared
    def registerService(self, svc: ttypes.CallbackService) -> None:
        self._access.require(current(), Permission.ADMIN)
        if svc is None or not svc.topic:
            raise errors.InvalidService("topic", "is required")
        defaults = ttypes.CallbackService()
        pick = lambda name: getattr(defaults, name) if getattr(svc, name) is None else getattr(svc, name)  # noqa: E731
        spec = ServiceSpec(
            topic=svc.topic, exchange=svc.exchange or self._default_exchange, routing_key=svc.routingKey or svc.topic,
            max_retries=pick("maxRetries"), backoff=pick("backoff"), retry_backoff_ms=pick("retryBackoffMs"),
            retry_backoff_max_ms=pick("retryBackoffMaxMs"), ttr_ms=pick("ttrMs"), enabled=bool(pick("enabled")),
            dead_letter_exchange=svc.deadLetterExchange, misfire_threshold_ms=svc.misfireThresholdMs,
            misfire_policy=pick("misfirePolicy"))
        check_service(spec)
        # Checked now, on a connection of its own: a missing exchange is created (durable topic), an
        # existing one is never changed, and one delayq cannot publish to is refused here rather
        # than found out at the first due task.
        for field, exchange in (("exchange", spec.exchange), ("deadLetterExchange", spec.dead_letter_exchange)):
            reason = self._check_exchange(exchange) if exchange else None
            if reason is not None:
                raise errors.InvalidService(field, f"exchange {exchange!r}: {reason}")
        self._services.upsert(spec)
        log.info("service %s registered: exchange %s, routing key %s", spec.topic, spec.exchange, spec.routing_key)

    @declared
    def listServices(self) -> list[ttypes.CallbackService]:
        """The services of the topics the caller may read (every one for an admin)."""
        client = self._access.client(current())
        admin = client.holds(Permission.ADMIN)
        return [ttypes.CallbackService(
            topic=s.topic, exchange=s.exchange, routingKey=s.routing_key, maxRetries=s.max_retries,
            backoff=s.backoff, retryBackoffMs=s.retry_backoff_ms, retryBackoffMaxMs=s.retry_backoff_max_ms,
            ttrMs=s.ttr_ms, enabled=s.enabled, deadLetterExchange=s.dead_letter_exchange,
            misfireThresholdMs=s.misfire_threshold_ms, misfirePolicy=s.misfire_policy)
            for s in self._services.all() if admin or client.allows(Permission.READ, s.topic)]

    @declared
    def setTopicControls(self, controls: ttypes.TopicControls) -> ttypes.TopicControls:
        self._access.require(current(), Permission.ADMIN)
        if controls is None or not controls.topic:
            raise errors.InvalidService("topic", "is required")
        # Applied by every node (this one included) when it sees the services' version move.
        return as_thrift(controls.topic, self._controls.change(controls.topic, changes(controls)))

    @declared
    def listTopicControls(self) -> list[ttypes.TopicControls]:
        """The controls of the topics the caller may read (every one for an admin)."""
        client = self._access.client(current())
        admin = client.holds(Permission.ADMIN)
        shown = {t: c for t, c in sorted(self._controls.all().items()) if admin or client.allows(Permission.READ, t)}
        in_flight = self._controls.in_flight(list(shown))
        return [as_thrift(t, c, in_flight[t]) for t, c in shown.items()]
