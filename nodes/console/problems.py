"""What a page says of a call or a read that failed: the Thrift calls' declared exceptions and
delayq's errors as sentences. An outage's own text (MySQL's or RabbitMQ's message: addresses,
accounts, statements) is never put on a page: the page gives an id, and the node's log has the
text under it. Pure, but for that log line.
"""
from __future__ import annotations

import logging
import secrets

from delayq import errors
from delayq.client.gen.delayq_thrift import ttypes
from delayq.nodes.console.fields import shown

log = logging.getLogger(__name__)

# The declared exceptions of the Thrift calls (every one the IDL has: a page makes many calls).
DECLARED: tuple[type[Exception], ...] = (ttypes.InvalidRequest, ttypes.InvalidTask, ttypes.InvalidService,
                                         ttypes.UnknownTopic, ttypes.Forbidden, ttypes.NotFound,
                                         ttypes.Unauthenticated, ttypes.Conflict, ttypes.QuotaExceeded,
                                         ttypes.StaleAttempt, ttypes.Unavailable)


def describe(e: Exception) -> str:
    """A Thrift call's declared exception (or delayq's error) as a sentence for the page. An
    outage's own text (MySQL's, RabbitMQ's: addresses, accounts, statements) stays in the node's
    log, under an id the page gives."""
    if isinstance(e, errors.StatementStopped):         # delayq's own words: which limit stopped the read
        return str(e)
    if isinstance(e, (ttypes.Unavailable, errors.Unavailable)):
        return f"the cluster could not do it now (error {logged(e)}: this node's log has the details)"
    if isinstance(e, (ttypes.InvalidRequest, ttypes.InvalidTask, ttypes.InvalidService)):
        return f"{e.field}: {e.reason}"
    if isinstance(e, ttypes.UnknownTopic) and e.disabled:
        return (f"topic: the service of {shown(e.topic or '')} is disabled and takes no new tasks "
                f"(delayq services disable {shown(e.topic or '')} --enable)")
    if isinstance(e, ttypes.UnknownTopic):
        return f"topic: no topic {shown(e.topic or '')} (no enabled callback service has it)"
    if isinstance(e, ttypes.QuotaExceeded):
        return f"tenant {e.tenant} is over its {e.quota} quota of {e.limit:,}"
    if isinstance(e, ttypes.StaleAttempt):
        return f"attempt {e.attempt} of {e.taskId}: {e.reason}"
    if isinstance(e, ttypes.Forbidden):
        return f"not allowed: this client does not hold {e.permission}" + (f" on {e.topic}" if e.topic else "")
    if isinstance(e, ttypes.NotFound):
        return f"no task {e.taskId} (or not one this client may see)"
    if isinstance(e, ttypes.Unauthenticated):
        return f"not logged in: {e.reason}"
    if isinstance(e, ttypes.Conflict):
        return f"conflict on {e.taskId}: {e.reason}"
    if isinstance(e, errors.DelayqError):
        return str(e)
    return f"internal error (error {logged(e)}: this node's log has the details)"


def logged(e: Exception) -> str:
    """An id for `e`, logged with its text: what a page says in its place."""
    ref = secrets.token_hex(4)
    log.warning("console: error %s: %s", ref, getattr(e, "reason", None) or e)
    return ref
