"""Topic controls between the IDL (TopicControls) and delayq.store.controls."""
from __future__ import annotations

from typing import Any

from delayq.client.gen.delayq_thrift import ttypes
from delayq.store.controls import Controls


def changes(t: ttypes.TopicControls) -> dict[str, Any]:
    """The fields the caller set (unset ones keep their value; 0 clears a limit)."""
    return {"max_fire_rate": t.maxFireRate, "fire_burst": t.fireBurst, "max_in_flight": t.maxInFlight,
            "paused": t.paused, "weight": t.weight}


def as_thrift(topic: str, c: Controls, in_flight: int | None = None) -> ttypes.TopicControls:
    return ttypes.TopicControls(topic=topic, maxFireRate=c.max_fire_rate, fireBurst=c.fire_burst,
                                maxInFlight=c.max_in_flight, paused=c.paused, weight=c.weight, tenant=c.tenant,
                                inFlight=in_flight)
