"""Audit: the node's side of the audit log. Every registerService, setTopicControls, cancel,
reschedule, cancelByKey, rescheduleByKey, bulkStart and bulkStop call (a bulk job's request with
its reason, and its job id and count), and every admin call that changes something
(delayq.nodes.front.admin: drain, undrain, pin, unpin, rebalance, reshard, redrive, discard, and
the clients' add, grant, revoke and rotate) is recorded
once answered (delayq.nodes.front.errors.declared reports each call here): the caller's
client, its address, the call, its topic or task id, and how it ended (the answer, or the
refusal or error it got).

Written on the thread that served the call, after its answer was decided, in a transaction of its
own: a MySQL failure here is logged and leaves the call's answer as it was (the action happened).
"""
from __future__ import annotations

import collections
import logging
from typing import Callable, Sequence

from delayq import errors
from delayq.client.gen.delayq_thrift import ttypes
from delayq.clock import Clock
from delayq.nodes.front.caller import current
from delayq.store.audit import AuditLog, Entry

log = logging.getLogger(__name__)

# Call -> what it acts on, from its arguments.
AUDITED: dict[str, Callable[[Sequence], str]] = {
    "registerService": lambda args: getattr(args[0], "topic", None) or "" if args else "",
    "cancel": lambda args: str(args[0]) if args else "",
    "reschedule": lambda args: str(args[0]) if args else "",
    "cancelByKey": lambda args: _words(args[:2]),
    "rescheduleByKey": lambda args: _words(args[:2]),
    "setTopicControls": lambda args: _controls(args[0]) if args else "",
    "drain": lambda args: _words(args[:1]),
    "undrain": lambda args: _words(args[:1]),
    "pin": lambda args: _words(args[:2]),
    "unpin": lambda args: _words(args[:1]),
    "rebalance": lambda args: "",
    "reshard": lambda args: _words(args[:1]),
    "redrive": lambda args: _redrive(args[0]) if args else "",
    "discard": lambda args: _words([f"id={i}" for i in args[0] or ()]) if args else "",
    "addClient": lambda args: _words([args[0], *(_grant(g) for g in args[1] or ())]) if len(args) > 1 else "",
    "grantClient": lambda args: _words([args[0], _grant(args[1])]) if len(args) > 1 else "",
    "revokeClient": lambda args: _words([args[0], _grant(args[1])]) if len(args) > 1 else "",
    "rotateClient": lambda args: _words(args[:1]),
    "bulkStart": lambda args: _bulk(args[0]) if args else "",
    "bulkStop": lambda args: _words(args[:1]),
}


def _words(values) -> str:
    return " ".join(str(v) for v in values if v is not None and v != "")[:255]


def _grant(g) -> str | None:
    return None if g is None else f"{g.permission}:{g.pattern}"


def _redrive(f) -> str:
    if f is None:
        return ""
    return _words([f"topic={f.topic}" if f.topic else None, f"since={f.sinceMs}" if f.sinceMs is not None else None,
                   f"until={f.untilMs}" if f.untilMs is not None else None, *(f"id={i}" for i in f.taskIds or ()),
                   f"after={f.afterTaskId}" if f.afterTaskId else None])


def _bulk(r) -> str:
    """The request in words, its reason last: "cancel topic=orders tag=eu reason=..."."""
    if r is None:
        return ""
    f = r.filter
    action = ttypes.BulkAction._VALUES_TO_NAMES.get(r.action, str(r.action)).lower()
    parts = [action, *(f"{k}={v}" for k, v in (
        ("topic", f and f.topic), ("keyPrefix", f and f.keyPrefix), ("tag", f and f.tag),
        ("dueFrom", f and f.dueFromMs), ("dueBefore", f and f.dueBeforeMs), ("shiftMs", r.shiftMs),
        ("dueAt", r.dueAtMs)) if v is not None and v != ""), f"reason={r.reason}" if r.reason else None]
    return _words(parts)


def _controls(t) -> str:
    """The topic and what the call set, e.g. "orders maxFireRate=500.0 paused=True"."""
    if t is None:
        return ""
    set_ = " ".join(f"{k}={v}" for k, v in sorted(vars(t).items()) if k not in ("topic", "tenant") and v is not None)
    return f"{t.topic or ''} {set_}".strip()[:255]


class Audit:
    def __init__(self, log_: AuditLog, clock: Clock):
        self._log, self._clock = log_, clock

    def call(self, method: str, args: Sequence, result, error: Exception | None) -> None:
        target = AUDITED.get(method)
        if target is None:
            return
        if method == "reshard" and error is None and not getattr(result, "started", False):
            return          # a look at the progress of a run already recorded
        caller = current()
        actor = caller.name if caller is not None and caller.name else "(unauthenticated)"
        address = caller.peer[0] if caller is not None and caller.peer else ""
        on = target(args)
        outcome = (f"refused: {caller.refusal}" if caller is not None and caller.refusal
                   else _outcome(method, result, error))
        try:
            self._log.record(Entry(self._clock.now_ms(), actor, str(address), method, on, outcome))
        except errors.DelayqError as e:
            log.error("could not record %s of %s by %s in the audit log: %s", method, on, actor, e)


def _outcome(method: str, result, error: Exception | None) -> str:
    if error is None:
        if method == "cancel":
            return ttypes.CancelResult._VALUES_TO_NAMES.get(result, "ok")
        if method == "discard":
            return f"discarded {result}"
        if method in ("bulkStart", "bulkStop"):
            return f"job {result.jobId} {ttypes.BulkState._VALUES_TO_NAMES[result.state]} {result.changed}/{result.total}"
        if method in ("cancelByKey", "rescheduleByKey"):
            counts = collections.Counter(ttypes.KeyedResult._VALUES_TO_NAMES[o.result] for o in result.tasks)
            return " ".join(f"{name} {n}" for name, n in sorted(counts.items())) or "none live"
        if method == "redrive":
            return f"redriven {result.redriven}" + (f", key held {len(result.keyHeld)}" if result.keyHeld else "")
        return "ok"
    return type(error).__name__ if isinstance(error, errors.DelayqError) else "internal error"
