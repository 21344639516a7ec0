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

A call refused for want of an identity (no token, a bad one, a certificate naming no client) is
not a client's action, and anyone who can reach the port can make them by the thousand: an
address's first is recorded, the rest as one row of their count per `refusal_interval_ms`
(delayq.nodes.front.refusals; every refusal is counted in delayq_refusals_total all the same).
Connections refused before their TLS handshake (an address past its budget of handshakes,
delayq.nodes.front.handshakes) are counted in the same summaries (`refused_connection`, called on
the server's I/O thread, which must not wait on MySQL: the count is written by the next audited
call's look). `flush` records the counts still open (the node stops).
"""
from __future__ import annotations

import collections
import logging
import threading
from typing import Callable, Sequence

from delayq import errors
from delayq.client.gen.delayq_thrift import ttypes
from delayq.clock import Clock
from delayq.nodes.front.caller import Caller, current
from delayq.nodes.front.refusals import RefusalTally, Summary
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


UNAUTHENTICATED = "(unauthenticated)"
SUMMARY = "unauthenticated"         # the action of a row that counts an address's refusals


class Audit:
    """Thread-safe: the CallPool's threads and the submit path call it at once."""

    def __init__(self, log_: AuditLog, clock: Clock, refusal_interval_ms: int):
        self._log, self._clock = log_, clock
        self._tally = RefusalTally(refusal_interval_ms)
        self._lock = threading.Lock()

    def call(self, method: str, args: Sequence, result, error: Exception | None) -> None:
        target = AUDITED.get(method)
        if target is None:
            return
        if method == "reshard" and error is None and not getattr(result, "started", False):
            return          # a look at the progress of a run already recorded
        caller = current()
        address = str(caller.peer[0]) if caller is not None and caller.peer else ""
        now = self._clock.now_ms()
        with self._lock:
            first, due = (self._tally.note(address, now) if _unidentified(caller)
                          else (True, self._tally.due(now)))
        self._summaries(due)
        if not first:
            return
        actor = caller.name if caller is not None and caller.name else UNAUTHENTICATED
        on = target(args)
        outcome = (f"refused: {caller.refusal}" if caller is not None and caller.refusal
                   else _outcome(method, result, error))
        self._record(Entry(now, actor, address, method, on, outcome))

    def refused_connection(self, address: str) -> None:
        """A connection from address closed before its handshake: counted, never written here."""
        now = self._clock.now_ms()
        with self._lock:
            self._tally.count(address, now)

    def flush(self) -> None:
        """Record the refusals counted and not yet recorded."""
        with self._lock:
            due = self._tally.flush(self._clock.now_ms())
        self._summaries(due)

    def _summaries(self, due: list[Summary]) -> None:
        for s in due:
            self._record(Entry(s.until_ms, UNAUTHENTICATED, s.address, SUMMARY, "", s.outcome))

    def _record(self, entry: Entry) -> None:
        try:
            self._log.record(entry)
        except errors.DelayqError as e:
            log.error("could not record %s of %s by %s in the audit log: %s", entry.action, entry.target,
                      entry.actor, e)


def _unidentified(caller: Caller | None) -> bool:
    """Refused for want of an identity: no client's action, however the call was made."""
    return caller is not None and caller.name is None and caller.refusal is not None


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
