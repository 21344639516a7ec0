"""Unit tests of business keys without servers: the input rules for keys, tags, trace context and
dedup modes (delayq.nodes.validation), the dedup decision (delayq.store.dedup), page tokens
(delayq.nodes.front.pages), listTasks' filter (delayq.nodes.front.keycalls) and the submit path
answering each dedup outcome."""
from __future__ import annotations

import hashlib
import struct
import sys
import unicodedata

import pytest

from delayq.access.grants import Client, Permission
from delayq.client.gen.delayq_thrift import ttypes
from delayq.errors import InvalidTask, StatementStopped, StoreUnavailable
from delayq.lifecycle import Status
from delayq.nodes.cluster.ownership import Ownership
from delayq.nodes.front import pages
from delayq.nodes.front.access import Access
from delayq.nodes.front.errors import CallAnswers
from delayq.nodes.front.keycalls import KeyCalls, task_filter
from delayq.nodes.front.placing import Placing
from delayq.nodes.memory.delayqueue import DelayQueue, Entry
from delayq.nodes.metrics import Metrics
from delayq.nodes.validation import (Limits, TaskRequest, check_key, check_tags, check_task, check_traceparent,
                                     key_mode, spec_hash)
from delayq.store.bykey import Changed, KeyResult
from delayq.store.dedup import Action, Holder, decide
from delayq.store.keyed import _after_replacements
from delayq.store.maintenance import prefix_end
from delayq.store.values import KeyMode, Outcome, Submitted
from delayq.testing.fakes import Clients, ManualClock, call_as
from delayq.textrules import first_control

LIMITS = Limits(1024, 86_400_000)
TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _refused(field: str, **fields) -> InvalidTask:
    with pytest.raises(InvalidTask) as e:
        check_task(TaskRequest("t", delay_ms=1, **fields), LIMITS, 3)
    assert (e.value.field, e.value.index) == (field, 3)
    return e.value


def test_a_key_of_255_bytes_is_taken_and_one_of_256_refused_naming_the_field():
    assert check_key("é" * 127 + "x") == ("é" * 127 + "x").encode()
    assert "256 bytes" in _refused("key", key="é" * 128).reason
    _refused("key", key="")


# C0, DEL, C1 (NEL U+0085 among them) and the line and paragraph separators.
CONTROLS = ["a\x00b", "line\nbreak", "\x7f", "next\x85line", "\x80", "x\x9f", "a\u2028b", "a\u2029b"]


@pytest.mark.parametrize("bad", CONTROLS)
def test_control_characters_in_a_key_or_tag_are_refused(bad):
    assert f"U+{ord(first_control(bad) or ' '):04X}" in _refused("key", key=bad).reason
    _refused("tags", tags=[bad])


@pytest.mark.parametrize("good", ["caf\u00e9", "no\u00a0break", "\U0001F469\u200d\U0001F52C", "soft\u00adhyphen",
                                  "\u05d0\u200f", "\u00a0\u00ff"])
def test_printable_text_and_format_characters_are_taken_in_a_key_and_a_tag(good):
    assert check_key(good) == good.encode()
    assert check_tags([good]) == good.encode()


def test_the_refused_characters_are_exactly_unicodes_cc_zl_and_zp():
    refused = {cp for cp in range(sys.maxunicode + 1) if first_control(chr(cp)) is not None}
    assert refused == {cp for cp in range(sys.maxunicode + 1)
                       if unicodedata.category(chr(cp)) in ("Cc", "Zl", "Zp")}


def test_up_to_8_tags_of_64_bytes_without_commas():
    assert check_tags([f"t{i}" for i in range(8)]) == b"t0,t1,t2,t3,t4,t5,t6,t7"
    assert check_tags(["a", "a", "b"]) == b"a,b"
    assert check_tags([]) is None and check_tags(None) is None
    assert "9 tags" in _refused("tags", tags=[f"t{i}" for i in range(9)]).reason
    _refused("tags", tags=["x" * 65])
    _refused("tags", tags=["a,b"])
    _refused("tags", tags=[""])


def test_a_traceparent_must_be_w3c():
    assert check_traceparent(TP) == TP
    for bad in [TP.upper(), TP[:-1], "ff" + TP[2:], "00-" + "0" * 32 + TP[35:], TP[:36] + "0" * 16 + "-01", "x"]:
        _refused("traceparent", traceparent=bad)


def test_a_dedup_mode_needs_a_key_and_max_debounce_goes_with_replace_only():
    _refused("onKeyConflict", mode=KeyMode.REJECT)
    _refused("maxDebounceMs", key="k", mode=KeyMode.REJECT, max_debounce_ms=5)
    _refused("maxDebounceMs", key="k", mode=KeyMode.REPLACE, max_debounce_ms=-1)
    check_task(TaskRequest("t", delay_ms=1, key="k", mode=KeyMode.REPLACE, max_debounce_ms=0), LIMITS)
    assert key_mode(None) is KeyMode.ALLOW and key_mode(2) is KeyMode.REPLACE
    with pytest.raises(InvalidTask) as e:
        key_mode(9, 1)
    assert (e.value.field, e.value.index) == ("onKeyConflict", 1) and "REPLACE" in e.value.reason


def test_a_task_without_key_fields_hashes_as_before_and_the_fields_change_the_hash():
    plain = TaskRequest("t", delay_ms=5, payload=b"x")
    before = hashlib.blake2b(digest_size=16)       # the hash of a task as it was before keys existed
    for value in ("t", 5, None, None, None):
        before.update(b"\x00" if value is None else b"\x01" + str(value).encode() + b"\x00")
    before.update(struct.pack("!Q", 1) + b"x")
    assert spec_hash(plain) == before.digest()
    assert len({spec_hash(plain), spec_hash(plain._replace(key="k")), spec_hash(plain._replace(tags=["a"])),
                spec_hash(plain._replace(key="k", mode=KeyMode.REJECT))}) == 4


# ---- the dedup decision ---------------------------------------------------------------------------

NOW = 1_000_000


def _holder(status: Status, due: int = NOW + 50_000, since: int = NOW - 10_000) -> Holder:
    return Holder("h", status, 3, due, since)


@pytest.mark.parametrize("mode", [m for m in KeyMode if m is not KeyMode.ALLOW])
def test_with_no_holder_every_mode_inserts_and_starts_a_chain(mode):
    assert decide(mode, None, NOW + 5, NOW) == (Action.INSERT, NOW + 5, NOW)


@pytest.mark.parametrize("mode, waiting, fired", [
    (KeyMode.REJECT, Action.DEDUPLICATE, Action.DEDUPLICATE),
    (KeyMode.REPLACE, Action.CANCEL_AND_INSERT, Action.TAKE_OVER),
    (KeyMode.REPLACE_PAYLOAD_KEEP_DUE, Action.UPDATE_PAYLOAD, Action.TAKE_OVER),
    (KeyMode.KEEP_IF_ACTIVE, Action.DEDUPLICATE, Action.TAKE_OVER)])
def test_the_table_of_modes(mode, waiting, fired):
    assert decide(mode, _holder(Status.DELAY), NOW + 5, NOW).action is waiting
    for status in (Status.READY, Status.RUNNING):
        assert decide(mode, _holder(status), NOW + 5, NOW).action is fired


def test_a_deduplicated_or_payload_replaced_submit_answers_the_holders_due_time():
    assert decide(KeyMode.REJECT, _holder(Status.READY), NOW + 5, NOW).due_ms == NOW + 50_000
    assert decide(KeyMode.REPLACE_PAYLOAD_KEEP_DUE, _holder(Status.DELAY), NOW + 5, NOW).due_ms == NOW + 50_000


def test_replace_keeps_pushing_back_but_never_past_the_chains_first_submit_plus_max_debounce():
    # The docstring's worked example: max 60 s, submits at 0, 20, 40, 70 s, each with delay 30 s.
    since, due = 0, None
    answers = []
    for t in (0, 20_000, 40_000, 70_000):
        holder = None if due is None else Holder("h", Status.DELAY, 0, due, since)
        d = decide(KeyMode.REPLACE, holder, t + 30_000, t, max_debounce_ms=60_000)
        since, due = d.since_ms, d.due_ms
        answers.append(due)
    assert answers == [30_000, 50_000, 60_000, 70_000]


def test_replace_of_a_fired_holder_starts_a_new_chain_bounded_from_now():
    d = decide(KeyMode.REPLACE, _holder(Status.READY, since=0), NOW + 5, NOW, max_debounce_ms=1)
    assert d == (Action.TAKE_OVER, NOW + 1, NOW)
    assert decide(KeyMode.REPLACE, _holder(Status.READY, since=0), NOW + 5, NOW, max_debounce_ms=10) == \
        (Action.TAKE_OVER, NOW + 5, NOW)


def test_the_first_submit_of_a_chain_is_due_at_most_max_debounce_from_now():
    assert decide(KeyMode.REPLACE, None, NOW + 60_000, NOW, max_debounce_ms=10_000) == \
        (Action.INSERT, NOW + 10_000, NOW)
    assert decide(KeyMode.REPLACE, None, NOW + 5_000, NOW, max_debounce_ms=10_000).due_ms == NOW + 5_000
    assert decide(KeyMode.REPLACE, None, NOW + 5_000, NOW, max_debounce_ms=0).due_ms == NOW


# ---- page tokens and filters -------------------------------------------------------------------------

PAGE_KEY = bytes(32)


def test_a_page_token_round_trips_for_its_query_and_its_clusters_key_only():
    q = pages.query_of("findByKey", "t", b"k")
    token = pages.encode(PAGE_KEY, q, (1_700_000_000_000, "0a1b"))
    assert pages.decode(PAGE_KEY, q, token) == (1_700_000_000_000, "0a1b")
    assert pages.decode(PAGE_KEY, q, None) is None and pages.decode(PAGE_KEY, q, "") is None
    for key, bad_query, bad_token in [(PAGE_KEY, pages.query_of("findByKey", "t", b"other"), token),
                                      (PAGE_KEY, q, token[:-2]),
                                      (PAGE_KEY, q, token[:5] + ("A" if token[5] != "A" else "B") + token[6:]),
                                      (PAGE_KEY, q, "%%%"), (PAGE_KEY, q, "AAAA"), (b"another cluster", q, token)]:
        with pytest.raises(InvalidTask) as e:
            pages.decode(key, bad_query, bad_token)
        assert e.value.field == "pageToken"


def test_list_filter_is_checked_and_becomes_the_stores_filter():
    f = task_filter(ttypes.TaskFilter(topic="t", status=ttypes.TaskStatus.CANCELLED, keyPrefix="order-", tag="eu",
                                      dueFromMs=5, dueBeforeMs=9))
    assert (f.topic, f.status, f.key_prefix, f.tag, f.since_ms, f.until_ms) == \
        ("t", Status.CANCELLED, b"order-", "eu", 5, 9)
    assert [t.name for t in f.tables()] == ["job_delay_task_backlog"]
    for bad, field in [(ttypes.TaskFilter(topic=""), "topic"), (ttypes.TaskFilter(topic="t", status=42), "status"),
                       (ttypes.TaskFilter(topic="t", tag="a,b"), "tag"), (ttypes.TaskFilter(topic="t", tag=""), "tag"),
                       (ttypes.TaskFilter(topic="t", tag="x" * 65), "tag"), (ttypes.TaskFilter(topic="t", tag="a\x85"), "tag"),
                       (ttypes.TaskFilter(topic="t", keyPrefix="a\u2028"), "keyPrefix"),
                       (ttypes.TaskFilter(topic="t", keyPrefix="x" * 256), "keyPrefix"),
                       (ttypes.TaskFilter(topic="t", dueFromMs=-1), "dueFromMs")]:
        with pytest.raises(InvalidTask) as e:
            task_filter(bad)
        assert e.value.field == field


def test_a_key_prefix_is_an_index_range():
    assert prefix_end(b"order-4") == b"order-5"
    assert prefix_end(b"a\xff\xff") == b"b"
    assert prefix_end(b"\xff") is None


# ---- KeyCalls: permissions and memory --------------------------------------------------------------

class _Requests:
    """KeyRequests in memory: every call answers what it was given to answer, and is recorded."""

    def __init__(self, changed):
        self.changed, self.calls = changed, []

    def cancel(self, topic, key, now_ms, limit):
        self.calls.append(("cancel", topic, key))
        return self.changed, False

    def reschedule(self, topic, key, due_ms, shard_id, now_ms, limit):
        self.calls.append(("reschedule", topic, key, due_ms))
        return [c._replace(due_ms=due_ms) if c.result.name == "RESCHEDULED" else c for c in self.changed], False

    def find(self, topic, key, before, limit):
        self.calls.append(("find", topic, key, before))
        return []

    def matching(self, f, after, limit):
        self.calls.append(("matching", f.topic, f.tag))
        if f.tag == "rare":         # what the store raises when MySQL stopped a read at its time limit
            raise StatementStopped("a statement was stopped after 3 s", 1969)
        if f.tag == "down":
            raise StoreUnavailable("MySQL unavailable: lost connection", 2013)
        return []


def _key_calls(changed=()):
    clock = ManualClock(NOW)
    ops = Client("ops", "digest", grants=frozenset({(Permission.READ, "a.*"), (Permission.CANCEL, "a.*")}))
    access = Access(Clients(ops), Metrics(), enabled=True)  # type: ignore[arg-type]
    access.load()
    call_as("ops")
    ownership = Ownership("n1")
    ownership.set({0: 1}, range(2))
    queue = DelayQueue(clock, shards=[0])
    queue.horizon_ms = NOW + 60_000
    queue.offer_written([Entry(c.task_id, 0, NOW + 1000, topic="a.t") for c in changed])
    requests = _Requests(list(changed))
    calls = KeyCalls(requests, access, CallAnswers(Metrics()), Placing(queue, ownership, window_ms=60_000),  # type: ignore[arg-type]
                     clock, limits=LIMITS, page_key=lambda: PAGE_KEY)
    return calls, requests, queue


def test_by_key_calls_need_the_single_task_calls_grants_on_the_topic_they_name():
    calls, requests, _ = _key_calls()
    calls.findByKey("a.t", "k", None)
    for call in (lambda: calls.findByKey("b.t", "k", None), lambda: calls.cancelByKey("b.t", "k"),
                 lambda: calls.rescheduleByKey("b.t", "k", NOW), lambda: calls.listTasks(ttypes.TaskFilter(topic="b.t"),
                                                                                         None, None)):
        with pytest.raises(ttypes.Forbidden) as e:
            call()
        assert e.value.topic == "b.t"
    assert requests.calls == [("find", "a.t", b"k", None)]
    with pytest.raises(ttypes.InvalidTask) as e:
        calls.cancelByKey("a.t", None)
    assert e.value.field == "key"


@pytest.mark.parametrize("bad", CONTROLS)
def test_every_call_by_key_refuses_a_key_with_control_characters_naming_the_field(bad):
    calls, requests, _ = _key_calls()
    for call, field in [(lambda: calls.findByKey("a.t", bad, None), "key"), (lambda: calls.cancelByKey("a.t", bad), "key"),
                        (lambda: calls.rescheduleByKey("a.t", bad, NOW), "key"),
                        (lambda: calls.listTasks(ttypes.TaskFilter(topic="a.t", keyPrefix=bad), None, None), "keyPrefix"),
                        (lambda: calls.listTasks(ttypes.TaskFilter(topic="a.t", tag=bad), None, None), "tag")]:
        with pytest.raises(ttypes.InvalidTask) as e:
            call()
        assert e.value.field == field and "control characters" in e.value.reason
    assert requests.calls == []


def test_cancel_by_key_takes_the_cancelled_out_of_memory_and_reschedule_moves_them():
    changed = [Changed("t1", KeyResult.CANCELLED, NOW + 1000, 0), Changed("t2", KeyResult.ALREADY_DISPATCHED, NOW, 0)]
    calls, _, queue = _key_calls(changed)
    out = calls.cancelByKey("a.t", "k")
    assert [(o.taskId, o.result) for o in out.tasks] == [("t1", ttypes.KeyedResult.CANCELLED),
                                                         ("t2", ttypes.KeyedResult.ALREADY_DISPATCHED)]
    assert {e.task_id for e in queue.entries_of("a.t")} == {"t2"}

    calls, _, queue = _key_calls([Changed("t1", KeyResult.RESCHEDULED, NOW + 1000, 0)])
    out = calls.rescheduleByKey("a.t", "k", NOW + 5000)
    assert [(o.taskId, o.result, o.dueAtMs) for o in out.tasks] == [("t1", ttypes.KeyedResult.RESCHEDULED, NOW + 5000)]
    assert [(e.task_id, e.due_ms) for e in queue.entries_of("a.t")] == [("t1", NOW + 5000)]


def test_a_task_replaced_later_in_its_own_batch_is_answered_with_the_one_that_fires():
    out = _after_replacements([Submitted("a", 1, 10, True), Submitted("b", 2, 20, True, Outcome.REPLACED, "a"),
                               Submitted("c", 3, 30, True, Outcome.REPLACED, "b"), Submitted("x", 4, 40, True)])
    assert out == [Submitted("c", 3, 30, False, Outcome.REPLACED), Submitted("c", 3, 30, False, Outcome.REPLACED),
                   Submitted("c", 3, 30, True, Outcome.REPLACED, "b"), Submitted("x", 4, 40, True)]


def test_a_list_that_ran_out_of_time_is_told_to_narrow_its_filter_and_an_outage_stays_an_outage():
    calls, _, _ = _key_calls()
    assert calls.listTasks(ttypes.TaskFilter(topic="a.t", tag="common"), None, None).tasks == []
    with pytest.raises(ttypes.InvalidTask) as e:
        calls.listTasks(ttypes.TaskFilter(topic="a.t", tag="rare"), None, None)
    assert e.value.field == "filter" and "narrow it" in e.value.reason
    with pytest.raises(ttypes.Unavailable):
        calls.listTasks(ttypes.TaskFilter(topic="a.t", tag="down"), None, None)
