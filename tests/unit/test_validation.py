"""Unit tests for delayq.nodes.validation: task and callback-service input rules (pure)."""
from __future__ import annotations

import dataclasses
import hashlib
import struct

import pytest

from delayq.errors import InvalidService, InvalidTask
from delayq.nodes.validation import (MAX_EXTEND_MS, MAX_PROGRESS_BYTES, MAX_RETRIES, MAX_TTR_MS, Limits, ServiceSpec,
                                    TaskRequest, check_service, check_task, check_task_id, check_topic, check_touch,
                                    due_time, spec_hash)

LIMITS = Limits(max_payload_bytes=100, max_horizon_ms=1000)
NOW = 1_700_000_000_000
INT32 = 2**31 - 1


def raises_task(field: str, index: int | None = None):
    """Context manager asserting InvalidTask with this field and index."""
    class _Check:
        def __enter__(self):
            self._cm = pytest.raises(InvalidTask)
            self.info = self._cm.__enter__()
            return self.info

        def __exit__(self, *exc):
            if not self._cm.__exit__(*exc):
                return False        # some other exception: let it propagate
            err = self.info.value
            assert err.field == field, str(err)
            assert err.index == index, str(err)
            prefix = f"tasks[{index}].{field}: " if index is not None else f"{field}: "
            assert str(err).startswith(prefix), str(err)
            return True
    return _Check()


def service_error(svc: ServiceSpec) -> InvalidService:
    with pytest.raises(InvalidService) as info:
        check_service(svc)
    return info.value


# ---------------------------------------------------------------- topic


@pytest.mark.parametrize("topic", ["a", "A", "0", "order.cancel", "a_b-c.d", "x" * 128, "9" + "._-" * 42 + "z"])
def test_check_topic_accepts(topic):
    assert check_topic(topic) == topic


@pytest.mark.parametrize("topic", [None, ""])
def test_check_topic_required(topic):
    with raises_task("topic") as info:
        check_topic(topic)
    assert "required" in info.value.reason


def test_check_topic_length_boundary():
    assert check_topic("t" * 128) == "t" * 128
    with raises_task("topic", 4) as info:
        check_topic("t" * 129, 4)
    assert "129" in info.value.reason


@pytest.mark.parametrize("topic", ["-a", ".a", "_a", "a b", "a:b", "a/b", "ä", "a\n", "a*", "a\x00"])
def test_check_topic_refuses_characters(topic):
    with raises_task("topic", 0):
        check_topic(topic, 0)


# ---------------------------------------------------------------- task id


@pytest.mark.parametrize("task_id", ["a", "Z9", "order-42", "a:b.c_d-e", "x" * 64, "0" + ":" * 63])
def test_check_task_id_accepts(task_id):
    assert check_task_id(task_id) == task_id


@pytest.mark.parametrize("task_id", [None, ""])
def test_check_task_id_required(task_id):
    with raises_task("taskId", 2):
        check_task_id(task_id, 2)


def test_check_task_id_length_boundary():
    assert check_task_id("i" * 64) == "i" * 64
    with raises_task("taskId") as info:
        check_task_id("i" * 65)
    assert "65" in info.value.reason


@pytest.mark.parametrize("task_id", [":a", "-a", ".a", "a b", "a/b", "é", "a\t", "a#b"])
def test_check_task_id_refuses_characters(task_id):
    with raises_task("taskId"):
        check_task_id(task_id)


# ---------------------------------------------------------------- check_task


def test_check_task_accepts_minimal_and_full_requests():
    check_task(TaskRequest("t"), LIMITS)
    check_task(TaskRequest("t", task_id="id-1", delay_ms=5, payload=b"x" * 100, max_retries=MAX_RETRIES,
                           ttr_ms=MAX_TTR_MS), LIMITS)
    check_task(TaskRequest("t", payload=b"", max_retries=0, ttr_ms=0), LIMITS)


@pytest.mark.parametrize("index", [None, 0, 7])
@pytest.mark.parametrize("req, field", [
    (TaskRequest(None), "topic"),
    (TaskRequest(""), "topic"),
    (TaskRequest("bad topic"), "topic"),
    (TaskRequest("t" * 129), "topic"),
    (TaskRequest("t", task_id=""), "taskId"),
    (TaskRequest("t", task_id="i" * 65), "taskId"),
    (TaskRequest("t", task_id="bad id"), "taskId"),
    (TaskRequest("t", payload=b"x" * 101), "payload"),
    (TaskRequest("t", max_retries=-1), "maxRetries"),
    (TaskRequest("t", max_retries=MAX_RETRIES + 1), "maxRetries"),
    (TaskRequest("t", ttr_ms=-1), "ttrMs"),
    (TaskRequest("t", ttr_ms=MAX_TTR_MS + 1), "ttrMs"),
    (TaskRequest("t", max_debounce_ms=7_200_000), "maxDebounceMs"),        # alone: no key, no REPLACE
    (TaskRequest("t", key="k", max_debounce_ms=1000), "maxDebounceMs"),
])
def test_check_task_rules(req, field, index):
    with raises_task(field, index):
        check_task(req, LIMITS, index)


def test_check_task_reports_topic_first():
    with raises_task("topic"):
        check_task(TaskRequest("", task_id="bad id", payload=b"x" * 1000, max_retries=-1), LIMITS)


def test_check_task_does_not_check_due_time():
    # Both delayMs and dueAtMs, or neither, is due_time's business.
    check_task(TaskRequest("t", delay_ms=-5, due_at_ms=-5), LIMITS)


def test_constants():
    assert MAX_RETRIES == 100
    assert MAX_TTR_MS == 24 * 3600 * 1000


# ---------------------------------------------------------------- due_time


@pytest.mark.parametrize("req", [TaskRequest("t"), TaskRequest("t", delay_ms=1, due_at_ms=NOW + 1),
                                 TaskRequest("t", delay_ms=0, due_at_ms=0)])
def test_due_time_needs_exactly_one_of_delay_and_due_at(req):
    with raises_task("delayMs", 3):
        due_time(req, NOW, LIMITS, 3)


def test_due_time_from_delay_uses_given_now():
    assert due_time(TaskRequest("t", delay_ms=0), NOW, LIMITS) == NOW
    assert due_time(TaskRequest("t", delay_ms=250), NOW, LIMITS) == NOW + 250
    assert due_time(TaskRequest("t", delay_ms=250), 12_345, LIMITS) == 12_595


def test_due_time_delay_horizon_boundary():
    assert due_time(TaskRequest("t", delay_ms=1000), NOW, LIMITS) == NOW + 1000
    with raises_task("delayMs", 1):
        due_time(TaskRequest("t", delay_ms=1001), NOW, LIMITS, 1)


def test_due_time_negative_delay():
    with raises_task("delayMs") as info:
        due_time(TaskRequest("t", delay_ms=-1), NOW, LIMITS)
    assert "negative" in info.value.reason


def test_due_time_at_future_instant():
    assert due_time(TaskRequest("t", due_at_ms=NOW + 1), NOW, LIMITS) == NOW + 1
    assert due_time(TaskRequest("t", due_at_ms=NOW + 1000), NOW, LIMITS) == NOW + 1000


def test_due_time_at_beyond_horizon():
    with raises_task("dueAtMs", 0):
        due_time(TaskRequest("t", due_at_ms=NOW + 1001), NOW, LIMITS, 0)


@pytest.mark.parametrize("due_at", [0, 1, NOW - 1, NOW])
def test_due_time_in_the_past_means_now(due_at):
    assert due_time(TaskRequest("t", due_at_ms=due_at), NOW, LIMITS) == NOW


def test_due_time_negative_due_at():
    with raises_task("dueAtMs") as info:
        due_time(TaskRequest("t", due_at_ms=-1), NOW, LIMITS)
    assert "negative" in info.value.reason


# ---------------------------------------------------------------- spec_hash

BASE = TaskRequest("topic.a", task_id="id-1", delay_ms=1000, due_at_ms=None, payload=b"hello",
                   max_retries=3, ttr_ms=60_000)


def test_spec_hash_equal_for_equal_requests():
    same = TaskRequest("topic.a", task_id="id-1", delay_ms=1000, payload=bytes(b"hel") + b"lo",
                       max_retries=3, ttr_ms=60_000)
    assert spec_hash(BASE) == spec_hash(same)
    assert isinstance(spec_hash(BASE), bytes) and len(spec_hash(BASE)) == 16   # fits BINARY(16)


@pytest.mark.parametrize("change", [
    {"topic": "topic.b"},
    {"delay_ms": 1001},
    {"delay_ms": None, "due_at_ms": 1000},     # same number, other field
    {"max_retries": 4},
    {"max_retries": None},                     # not sent vs sent (even if it equals a default)
    {"ttr_ms": 60_001},
    {"ttr_ms": None},
    {"payload": b"hellO"},
    {"payload": b"hello\x00"},
    {"payload": b""},
    {"payload": None},
])
def test_spec_hash_differs_when_one_field_differs(change):
    assert spec_hash(BASE) != spec_hash(BASE._replace(**change))


def test_spec_hash_does_not_confuse_field_boundaries():
    assert spec_hash(TaskRequest("t", delay_ms=1)) != spec_hash(TaskRequest("t", due_at_ms=1))
    assert spec_hash(TaskRequest("t1", delay_ms=1)) != spec_hash(TaskRequest("t", delay_ms=11))
    assert spec_hash(TaskRequest("t", max_retries=1, ttr_ms=None)) != spec_hash(TaskRequest("t", max_retries=None, ttr_ms=1))


def test_spec_hash_treats_no_payload_as_an_empty_payload():
    # Both are stored as an empty payload: resubmitting one as the other is the same task.
    assert spec_hash(TaskRequest("t", delay_ms=1, payload=None)) == spec_hash(TaskRequest("t", delay_ms=1, payload=b""))


# ---------------------------------------------------------------- check_service

SVC = ServiceSpec(topic="order.cancel", exchange="delayq", routing_key="order.cancel")


def test_check_service_accepts_valid_and_returns_it():
    assert check_service(SVC) is SVC
    full = dataclasses.replace(SVC, exchange="e" * 255, routing_key="r" * 255, max_retries=MAX_RETRIES,
                               backoff="fixed", retry_backoff_ms=0, retry_backoff_max_ms=INT32,
                               ttr_ms=MAX_TTR_MS, enabled=False, dead_letter_exchange="dlx:a.b_c-d",
                               misfire_threshold_ms=0, misfire_policy="fail")
    assert check_service(full) is full
    edge = dataclasses.replace(SVC, max_retries=0, retry_backoff_ms=5, retry_backoff_max_ms=5, ttr_ms=0)
    assert check_service(edge) is edge


@pytest.mark.parametrize("change, field", [
    ({"topic": ""}, "topic"),
    ({"topic": "bad topic"}, "topic"),
    ({"topic": "t" * 129}, "topic"),
    ({"exchange": ""}, "exchange"),
    ({"exchange": "e" * 256}, "exchange"),
    ({"exchange": "bad exchange"}, "exchange"),
    ({"exchange": "amq.direct"}, "exchange"),
    ({"exchange": "amq."}, "exchange"),
    ({"routing_key": ""}, "routingKey"),
    ({"routing_key": "r" * 256}, "routingKey"),
    ({"routing_key": "é" * 128}, "routingKey"),     # 128 characters but 256 bytes
    ({"max_retries": -1}, "maxRetries"),
    ({"max_retries": MAX_RETRIES + 1}, "maxRetries"),
    ({"backoff": "linear"}, "backoff"),
    ({"backoff": "Fixed"}, "backoff"),
    ({"retry_backoff_ms": -1}, "retryBackoffMs"),
    ({"retry_backoff_ms": 2000, "retry_backoff_max_ms": 1999}, "retryBackoffMs"),
    ({"retry_backoff_max_ms": INT32 + 1}, "retryBackoffMs"),
    ({"ttr_ms": -1}, "ttrMs"),
    ({"ttr_ms": MAX_TTR_MS + 1}, "ttrMs"),
    ({"dead_letter_exchange": ""}, "deadLetterExchange"),
    ({"dead_letter_exchange": "bad dlx"}, "deadLetterExchange"),
    ({"dead_letter_exchange": "d" * 256}, "deadLetterExchange"),
    ({"misfire_threshold_ms": -1}, "misfireThresholdMs"),
    ({"misfire_policy": "skip"}, "misfirePolicy"),
])
def test_check_service_rules(change, field):
    err = service_error(dataclasses.replace(SVC, **change))
    assert err.field == field, str(err)
    assert str(err).startswith(f"{field}: ")


def test_check_service_routing_key_byte_boundary():
    ok = dataclasses.replace(SVC, routing_key="é" * 127 + "x")     # 255 bytes
    assert check_service(ok) is ok


def test_check_service_topic_error_carries_the_topic_reason():
    err = service_error(dataclasses.replace(SVC, topic="t" * 129))
    assert "129" in err.reason


def test_spec_hash_keeps_the_layout_of_hashes_already_stored():
    # Rows written by earlier versions hold hashes of this byte layout; a resubmit must match them.
    layout = b"\x01topic.a\x00" b"\x011000\x00" b"\x00" b"\x013\x00" b"\x0160000\x00" + struct.pack("!Q", 5) + b"hello"
    assert spec_hash(BASE) == hashlib.blake2b(layout, digest_size=16).digest()


# ---------------------------------------------------------------- touch


def test_touch_arguments_in_bounds_pass():
    check_touch(1, 0, None)
    check_touch(7, MAX_EXTEND_MS, b"x" * MAX_PROGRESS_BYTES)


@pytest.mark.parametrize("attempt, extend_ms, progress, field", [
    (0, 1000, None, "attempt"), (None, 1000, None, "attempt"),
    (1, -1, None, "extendMs"), (1, MAX_EXTEND_MS + 1, None, "extendMs"), (1, None, None, "extendMs"),
    (1, 1000, b"x" * (MAX_PROGRESS_BYTES + 1), "progress"),
])
def test_touch_arguments_out_of_bounds_name_their_field(attempt, extend_ms, progress, field):
    with pytest.raises(InvalidTask) as e:
        check_touch(attempt, extend_ms, progress)
    assert e.value.field == field
