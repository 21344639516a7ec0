"""The one mapping between delayq's errors and the IDL: which declared exception a client sees for
each error, which field of a reply carries it, and how each call is counted (method, outcome).

Both ways calls are answered use it: the generated Processor (through `declared`, for every call
but submits) and the submit path (SubmitPath.submit_many through `CallAnswers.answer`; the
SubmitBatcher through `exception_fields`).
"""
from __future__ import annotations

import functools
import logging
import time
from typing import Any, Callable

from thrift.Thrift import TApplicationException

from delayq import errors
from delayq.client.gen.delayq_thrift import ttypes
from delayq.nodes.metrics import Metrics

log = logging.getLogger(__name__)

OUTCOMES = {errors.InvalidTask: "invalid", errors.InvalidService: "invalid", errors.InvalidRequest: "invalid",
            errors.UnknownTopic: "unknown_topic",
            errors.Conflict: "conflict", errors.NotFound: "not_found", errors.StaleAttempt: "stale", errors.Unavailable: "unavailable",
            errors.StoreUnavailable: "unavailable", errors.BrokerUnavailable: "unavailable",
            errors.Unauthenticated: "unauthenticated", errors.Forbidden: "forbidden",
            errors.QuotaExceeded: "quota"}


def as_declared(e: errors.DelayqError) -> Exception:
    """The IDL exception a client sees for one of delayq's errors."""
    if isinstance(e, errors.InvalidTask):
        return ttypes.InvalidTask(field=e.field, reason=e.reason, index=e.index)
    if isinstance(e, errors.InvalidService):
        return ttypes.InvalidService(field=e.field, reason=e.reason)
    if isinstance(e, errors.InvalidRequest):
        return ttypes.InvalidRequest(field=e.field, reason=e.reason)
    if isinstance(e, errors.UnknownTopic):
        return ttypes.UnknownTopic(topic=e.topic, disabled=True if e.disabled else None)
    if isinstance(e, errors.Conflict):
        return ttypes.Conflict(taskId=e.task_id, reason=e.reason)
    if isinstance(e, errors.NotFound):
        return ttypes.NotFound(taskId=e.task_id)
    if isinstance(e, errors.StaleAttempt):
        return ttypes.StaleAttempt(taskId=e.task_id, attempt=e.attempt, reason=e.reason)
    if isinstance(e, errors.Unauthenticated):
        return ttypes.Unauthenticated(reason=e.reason)
    if isinstance(e, errors.Forbidden):
        return ttypes.Forbidden(permission=e.permission, topic=e.topic)
    if isinstance(e, errors.QuotaExceeded):
        return ttypes.QuotaExceeded(tenant=e.tenant, quota=e.quota, limit=e.limit, index=e.index)
    return ttypes.Unavailable(reason=str(e))     # Unavailable, or a node misconfigured: try another


def exception_fields(result_struct: Any) -> dict[type, str]:
    """Declared exception class -> the field of a method's generated result struct that carries it
    (read from the struct's thrift_spec, so it follows the IDL)."""
    return {spec[3][0]: spec[2] for spec in result_struct.thrift_spec[1:] if spec is not None}


class CallAnswers:
    """Counts every call by method and outcome (delayq_thrift_requests_total, _seconds) and turns
    its result into what the client sees."""

    def __init__(self, metrics: Metrics, observe: Callable[[str, tuple, object, Exception | None], None]
                 = lambda method, args, result, error: None):
        self.metrics = metrics
        self.observe = observe          # every call but submits, once answered (the audit log)
        self._pairs: dict[tuple[str, str], tuple] = {}

    def answer(self, method: str, result, elapsed: float):
        """A call's result as its client sees it: a delayq error as the declared exception, any
        other exception as an internal error (logged)."""
        error = result if isinstance(result, Exception) else None
        self.count(method, error, elapsed)
        if isinstance(error, errors.DelayqError):
            return as_declared(error)
        if error is not None:
            log.error("%s failed", method, exc_info=error)
            return TApplicationException(TApplicationException.INTERNAL_ERROR, "Internal error")
        return result

    def count(self, method: str, error: Exception | None, elapsed: float) -> None:
        if error is None:
            outcome = "ok"
        else:
            outcome = OUTCOMES.get(type(error), "error")
            if isinstance(error, errors.Unavailable):
                self.metrics.errors.labels("rabbitmq" if isinstance(error, errors.BrokerUnavailable)
                                            else "mysql").inc()
        pair = self._pairs.get((method, outcome))
        if pair is None:       # prometheus' labels() costs more than the count: looked up once
            pair = self._pairs[method, outcome] = (self.metrics.thrift_requests.labels(method, outcome),
                                                   self.metrics.thrift_seconds.labels(method))
        pair[0].inc()
        pair[1].observe(elapsed)


def declared(fn: Callable) -> Callable:
    """For a handler method (its object has `answers`, a CallAnswers): raise delayq errors as the
    IDL's exceptions (anything else reaches the Processor, which answers an internal error), count
    the call, and let `answers.observe` see it."""
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        started, error, result = time.perf_counter(), None, None
        try:
            result = fn(self, *args, **kwargs)
            return result
        except errors.DelayqError as e:
            error = e
            raise as_declared(e) from None
        except Exception as e:
            error = e
            raise
        finally:
            self.answers.count(fn.__name__, error, time.perf_counter() - started)
            self.answers.observe(fn.__name__, args, result, error)
    return wrapper
