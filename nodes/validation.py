"""Input rules for tasks and callback services: pure functions that raise InvalidTask/InvalidService."""
from __future__ import annotations

import hashlib
import re
import struct
from dataclasses import dataclass
from typing import NamedTuple, Sequence

from delayq.errors import InvalidService, InvalidTask
from delayq.store.values import KeyMode
from delayq.textrules import control_reason, first_control

TOPIC_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
TASK_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")
EXCHANGE_RE = re.compile(r"[A-Za-z0-9._:-]{1,255}")
MAX_KEY_BYTES, MAX_TAGS, MAX_TAG_BYTES = 255, 8, 64
# W3C Trace Context, version 00's layout (a later version is read the same way, its extra fields refused).
TRACEPARENT_RE = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
MAX_RETRIES = 100
MAX_TTR_MS = 24 * 3600 * 1000
_INT32 = 2**31 - 1


@dataclass(frozen=True)
class Limits:
    max_payload_bytes: int
    max_horizon_ms: int


class TaskRequest(NamedTuple):
    """A submit as the client sent it (Thrift-free)."""
    topic: str | None
    task_id: str | None = None
    delay_ms: int | None = None
    due_at_ms: int | None = None
    payload: bytes | None = None
    max_retries: int | None = None
    ttr_ms: int | None = None
    key: str | None = None
    tags: Sequence[str] | None = None
    traceparent: str | None = None
    mode: KeyMode = KeyMode.ALLOW
    max_debounce_ms: int | None = None


def check_topic(topic: str | None, index: int | None = None) -> str:
    if topic is None or topic == "":
        raise InvalidTask("topic", "is required", index)
    if len(topic) > 128:
        raise InvalidTask("topic", f"is {len(topic)} characters, at most 128 allowed", index)
    if not TOPIC_RE.fullmatch(topic):
        raise InvalidTask("topic", "must be letters, digits, '.', '_' or '-', starting with a letter or digit", index)
    return topic


def check_task_id(task_id: str | None, index: int | None = None) -> str:
    if task_id is None or task_id == "":
        raise InvalidTask("taskId", "is required", index)
    if len(task_id) > 64:
        raise InvalidTask("taskId", f"is {len(task_id)} characters, at most 64 allowed", index)
    if not TASK_ID_RE.fullmatch(task_id):
        raise InvalidTask("taskId", "must be letters, digits, '.', '_', ':' or '-', starting with a letter or digit", index)
    return task_id


def due_time(req: TaskRequest, now_ms: int, limits: Limits, index: int | None = None) -> int:
    """The task's due time by the server's clock; a due time in the past means now."""
    if (req.delay_ms is None) == (req.due_at_ms is None):
        raise InvalidTask("delayMs", "give exactly one of delayMs and dueAtMs", index)
    if req.delay_ms is not None:
        if req.delay_ms < 0:
            raise InvalidTask("delayMs", f"must not be negative, got {req.delay_ms}", index)
        if req.delay_ms > limits.max_horizon_ms:
            raise InvalidTask("delayMs", f"is beyond the horizon of {limits.max_horizon_ms} ms", index)
        return now_ms + req.delay_ms
    assert req.due_at_ms is not None
    if req.due_at_ms < 0:
        raise InvalidTask("dueAtMs", f"must not be negative, got {req.due_at_ms}", index)
    if req.due_at_ms > now_ms + limits.max_horizon_ms:
        raise InvalidTask("dueAtMs", f"is beyond the horizon of {limits.max_horizon_ms} ms from now", index)
    return max(req.due_at_ms, now_ms)


def check_task(req: TaskRequest, limits: Limits, index: int | None = None) -> None:
    """Everything but the due time (which needs the clock) and the topic's existence."""
    check_topic(req.topic, index)
    if req.task_id is not None:
        check_task_id(req.task_id, index)
    if req.payload is not None and len(req.payload) > limits.max_payload_bytes:
        raise InvalidTask("payload", f"is {len(req.payload)} bytes, at most {limits.max_payload_bytes} allowed", index)
    if req.max_retries is not None and not 0 <= req.max_retries <= MAX_RETRIES:
        raise InvalidTask("maxRetries", f"must be between 0 and {MAX_RETRIES}, got {req.max_retries}", index)
    if req.ttr_ms is not None and not 0 <= req.ttr_ms <= MAX_TTR_MS:
        raise InvalidTask("ttrMs", f"must be between 0 and {MAX_TTR_MS}, got {req.ttr_ms}", index)
    if (req.key is not None or req.tags or req.traceparent is not None or req.mode is not KeyMode.ALLOW
            or req.max_debounce_ms is not None):
        check_key(req.key, index)       # the key fields only when some is set: most tasks have none
        check_tags(req.tags, index)
        check_traceparent(req.traceparent, index)
        check_mode(req, index)


def check_key(key: str | None, index: int | None = None, field: str = "key") -> bytes | None:
    """The key as stored (UTF-8), or None."""
    if key is None:
        return None
    raw = key.encode()
    if not raw:
        raise InvalidTask(field, "must not be empty (leave it unset for no key)", index)
    if len(raw) > MAX_KEY_BYTES:
        raise InvalidTask(field, f"is {len(raw)} bytes of UTF-8, at most {MAX_KEY_BYTES} allowed", index)
    bad = first_control(key)
    if bad is not None:
        raise InvalidTask(field, control_reason(bad), index)
    return raw


def check_tags(tags: Sequence[str] | None, index: int | None = None) -> bytes | None:
    """The tags as stored: comma-separated UTF-8 (a tag holds no comma), or None for none."""
    if not tags:
        return None
    if len(tags) > MAX_TAGS:
        raise InvalidTask("tags", f"holds {len(tags)} tags, at most {MAX_TAGS} allowed", index)
    for tag in tags:
        check_tag(tag, index)
    return ",".join(dict.fromkeys(tags)).encode()


def check_tag(tag: str | None, index: int | None = None, field: str = "tags") -> str:
    """One tag: a task's (field `tags`) or a filter's (field `tag`)."""
    if tag is None or not tag:
        raise InvalidTask(field, "a tag must not be empty", index)
    if len(tag.encode()) > MAX_TAG_BYTES:
        raise InvalidTask(field, f"tag {tag[:16]!r}... is {len(tag.encode())} bytes, at most {MAX_TAG_BYTES} "
                          "allowed", index)
    if "," in tag:
        raise InvalidTask(field, f"tag {tag[:16]!r} must not hold a comma", index)
    bad = first_control(tag)
    if bad is not None:
        raise InvalidTask(field, f"tag {tag[:16]!r} {control_reason(bad)}", index)
    return tag


def split_tags(stored: bytes | None) -> list[str] | None:
    return stored.decode().split(",") if stored else None


def check_traceparent(value: str | None, index: int | None = None) -> str | None:
    """A W3C traceparent (version-traceid-parentid-flags, lowercase hex), or None."""
    if value is None:
        return None
    m = TRACEPARENT_RE.fullmatch(value)
    if m is None:
        raise InvalidTask("traceparent", "must be a W3C traceparent: 00-<32 hex>-<16 hex>-<2 hex>, lowercase", index)
    version, trace_id, parent_id, _ = m.groups()
    if version == "ff" or trace_id == "0" * 32 or parent_id == "0" * 16:
        raise InvalidTask("traceparent", "has an invalid version (ff) or an all-zero trace or parent id", index)
    return value


def check_mode(req: TaskRequest, index: int | None = None) -> None:
    """A dedup mode needs a key; maxDebounceMs goes with REPLACE only."""
    if req.mode is not KeyMode.ALLOW and req.key is None:
        raise InvalidTask("onKeyConflict", f"{req.mode.name} needs a key", index)
    if req.max_debounce_ms is not None:
        if req.mode is not KeyMode.REPLACE:
            raise InvalidTask("maxDebounceMs", "applies to onKeyConflict REPLACE only", index)
        if req.max_debounce_ms < 0:
            raise InvalidTask("maxDebounceMs", f"must not be negative, got {req.max_debounce_ms}", index)


def key_mode(value: int | None, index: int | None = None) -> KeyMode:
    """The IDL's KeyConflict value as a KeyMode (unset: ALLOW)."""
    if value is None:
        return KeyMode.ALLOW
    try:
        return KeyMode(value)
    except ValueError:
        raise InvalidTask("onKeyConflict", f"unknown mode {value}; one of "
                          + ", ".join(m.name for m in KeyMode), index) from None


def spec_hash(req: TaskRequest) -> bytes:
    """What "the same content" means for an idempotent submit: every field the client sent.
    No payload and an empty payload are the same content (both are stored as empty). The key
    fields count only when set, so a task without them hashes as it did before keys existed."""
    h = hashlib.blake2b(digest_size=16)
    for value in (req.topic, req.delay_ms, req.due_at_ms, req.max_retries, req.ttr_ms):
        h.update(b"\x00" if value is None else b"\x01" + str(value).encode() + b"\x00")
    h.update(struct.pack("!Q", len(req.payload or b"")))
    h.update(req.payload or b"")
    if req.key is not None or req.tags or req.traceparent is not None or req.mode is not KeyMode.ALLOW:
        h.update(repr((req.key, list(req.tags or ()), req.traceparent, req.mode.value,
                       req.max_debounce_ms)).encode())
    return h.digest()


@dataclass(frozen=True)
class ServiceSpec:
    """A callback service: where a topic's tasks go and how they are retried."""
    topic: str
    exchange: str
    routing_key: str
    max_retries: int = 3
    backoff: str = "exponential"
    retry_backoff_ms: int = 1000
    retry_backoff_max_ms: int = 300000
    ttr_ms: int = 60000
    enabled: bool = True
    dead_letter_exchange: str | None = None
    misfire_threshold_ms: int | None = None
    misfire_policy: str = "fire"


def check_service(svc: ServiceSpec) -> ServiceSpec:
    try:
        check_topic(svc.topic)
    except InvalidTask as e:
        raise InvalidService("topic", e.reason) from None
    if not EXCHANGE_RE.fullmatch(svc.exchange) or svc.exchange.startswith("amq."):
        raise InvalidService("exchange", "must be 1-255 of letters, digits, '.', '_', ':' or '-', not amq.*")
    if not svc.routing_key or len(svc.routing_key.encode()) > 255:
        raise InvalidService("routingKey", "must be 1-255 bytes")
    if not 0 <= svc.max_retries <= MAX_RETRIES:
        raise InvalidService("maxRetries", f"must be between 0 and {MAX_RETRIES}")
    if svc.backoff not in ("fixed", "exponential"):
        raise InvalidService("backoff", "must be fixed or exponential")
    if not 0 <= svc.retry_backoff_ms <= svc.retry_backoff_max_ms <= _INT32:
        raise InvalidService("retryBackoffMs", "must be between 0 and retryBackoffMaxMs")
    if not 0 <= svc.ttr_ms <= MAX_TTR_MS:
        raise InvalidService("ttrMs", f"must be between 0 and {MAX_TTR_MS}")
    if svc.dead_letter_exchange is not None and not EXCHANGE_RE.fullmatch(svc.dead_letter_exchange):
        raise InvalidService("deadLetterExchange", "must be 1-255 of letters, digits, '.', '_', ':' or '-'")
    if svc.misfire_threshold_ms is not None and svc.misfire_threshold_ms < 0:
        raise InvalidService("misfireThresholdMs", "must not be negative")
    if svc.misfire_policy not in ("fire", "fail"):
        raise InvalidService("misfirePolicy", "must be fire or fail")
    return svc


# A touch asks for at most an hour more. The extension is how long a consumer that dies right
# after a touch keeps its task from going again, so a heartbeat asks for what it needs until the
# next one (a touch is one row update: cheap to repeat); an attempt that must run silent longer
# sets a longer ttrMs at submit (up to MAX_TTR_MS).
MAX_EXTEND_MS = 3_600_000
MAX_PROGRESS_BYTES = 1024


def check_touch(attempt: int | None, extend_ms: int | None, progress: bytes | None) -> None:
    """A touch's arguments (the task id is checked by check_task_id)."""
    if attempt is None or not 1 <= attempt <= _INT32:
        raise InvalidTask("attempt", "must be 1 or more")
    if extend_ms is None or not 0 <= extend_ms <= MAX_EXTEND_MS:
        raise InvalidTask("extendMs", f"must be between 0 and {MAX_EXTEND_MS}, got {extend_ms}")
    if progress is not None and len(progress) > MAX_PROGRESS_BYTES:
        raise InvalidTask("progress", f"is {len(progress)} bytes, at most {MAX_PROGRESS_BYTES} allowed")
