"""delayq's errors, one small tree. The Thrift handler maps them to the IDL's exceptions in one place.

    DelayqError
    ├── InvalidTask        bad input: names the field, the reason and, in a batch, the index
    ├── InvalidService     bad callback-service definition
    ├── UnknownTopic       no enabled callback service for the topic
    ├── Conflict           same task id, different content; or a state that forbids the change
    ├── NotFound           no such task, live or archived
    ├── StaleAttempt       a touch of an attempt that is no longer the task's running one
    ├── QuotaExceeded      a submit over one of its tenant's quotas
    ├── Unavailable        retriable: MySQL, RabbitMQ or ZooKeeper cannot be reached right now
    │   ├── StoreUnavailable
    │   └── BrokerUnavailable
    └── ConfigError        a setting that cannot be used; raised at start-up only
"""
from __future__ import annotations


class DelayqError(Exception):
    """Root of every error delayq raises on purpose."""


class InvalidTask(DelayqError):
    def __init__(self, field: str, reason: str, index: int | None = None):
        where = f"tasks[{index}].{field}" if index is not None else field
        super().__init__(f"{where}: {reason}")
        self.field, self.reason, self.index = field, reason, index


class InvalidService(DelayqError):
    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field, self.reason = field, reason


class InvalidRequest(DelayqError):
    """An admin call's argument is wrong (a node that is not a member, a shard out of range, ...)."""
    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field, self.reason = field, reason


class UnknownTopic(DelayqError):
    """disabled: the topic has a service, disabled (registering it again would be refused: it exists)."""
    def __init__(self, topic: str, disabled: bool = False):
        super().__init__(f"the callback service for topic {topic!r} is disabled" if disabled
                         else f"no enabled callback service for topic {topic!r}")
        self.topic, self.disabled = topic, disabled


class Conflict(DelayqError):
    def __init__(self, task_id: str, reason: str):
        super().__init__(f"task {task_id!r}: {reason}")
        self.task_id, self.reason = task_id, reason


class NotFound(DelayqError):
    def __init__(self, task_id: str):
        super().__init__(f"no task {task_id!r}")
        self.task_id = task_id


class StaleAttempt(DelayqError):
    """A touch names an attempt that is not running any more: it timed out (and may have gone
    again as a new attempt), or the task ended."""
    def __init__(self, task_id: str, attempt: int, reason: str):
        super().__init__(f"task {task_id!r} attempt {attempt}: {reason}")
        self.task_id, self.attempt, self.reason = task_id, attempt, reason


class QuotaExceeded(DelayqError):
    """A submit over its tenant's `quota` (pending, submitRate, horizon, payloadSize) of `limit`."""
    def __init__(self, tenant: str, quota: str, limit: int, index: int | None = None):
        where = f"tasks[{index}]: " if index is not None else ""
        super().__init__(f"{where}tenant {tenant!r} is over its {quota} quota of {limit}")
        self.tenant, self.quota, self.limit, self.index = tenant, quota, limit, index


class Unauthenticated(DelayqError):
    """The call needs a client identity the connection does not have (or no longer has)."""
    def __init__(self, reason: str, why: str = "unauthenticated"):
        super().__init__(reason)
        self.reason = reason
        self.why = why          # the metrics' label: unauthenticated, bad_token, revoked, rotated, unknown_certificate,
                                # unknown_reporter


class Forbidden(DelayqError):
    """The client lacks `permission` on `topic` ("" when it holds it on no topic at all)."""
    def __init__(self, permission: str, topic: str = ""):
        super().__init__(f"needs {permission} on {topic!r}" if topic else f"needs {permission}")
        self.permission, self.topic = permission, topic
        self.why = "forbidden"  # the metrics' label


class Unavailable(DelayqError):
    """A dependency is down; the same call may succeed later."""


# MySQL errors after which the same transaction can simply run again: lock wait timeout, deadlock.
LOCK_CONFLICTS = {1205, 1213}
# MySQL error codes of an account the server refused. Not outages: the same call fails the same way
# until the account or its grants change. Its user or password is wrong (1045, 1698: no password
# where one is needed):
LOGIN_REFUSED = frozenset({1045, 1698})
# it lacks a privilege: to use the database (1044), or a statement's on a table (1142), a column
# (1143), the server (1227, e.g. SUPER) or a routine (1370):
PRIVILEGE_MISSING = frozenset({1044, 1142, 1143, 1227, 1370})
# MySQL error codes of a statement the server stopped at its time limit (delayq.statementlimits.time_limited):
# MariaDB's max_statement_time, MySQL's max_execution_time.
STATEMENT_TIMEOUTS = frozenset({1969, 3024})


class StoreUnavailable(Unavailable):
    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        self.code = code        # the MySQL error number, when there was one (1213: deadlock)


class StatementStopped(StoreUnavailable):
    """The server stopped a statement of a time_limited block at its limit (code in
    STATEMENT_TIMEOUTS): a read that no index narrows enough, which reading again would not end
    sooner. Callers answer it as the request's fault, or give up."""


class BrokerUnavailable(Unavailable):
    pass


class ConfigError(DelayqError):
    pass
