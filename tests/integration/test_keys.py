"""Business keys on a real node, MySQL and RabbitMQ: keys, tags and trace context reach get, the
message, the execlog and the backlog; each dedup mode under 50 concurrent submits of one key
through two nodes leaves what it promises; a REPLACE, a cancelByKey or a rescheduleByKey racing
the dispatch answers what happened (a replaced or cancelled task never fires, a rescheduled one
never at its old time); findByKey and listTasks page through live and ended tasks; bad input is
a declared InvalidTask naming the field. KEEP_IF_ACTIVE keeps one attempt of a key in flight, also
against two claims racing; keys, tags and holds survive a reshard, a retry after it and the
backlog."""
from __future__ import annotations

import concurrent.futures
import itertools
import json
import subprocess
import sys
import threading
import uuid
import zlib

import pytest
import sqlalchemy

from delayq import config, db as dbm
from delayq.client import CallbackService, TaskSpec
from delayq.client.gen.delayq_thrift import ttypes
from delayq.store.sqltext import insert_tasks
from delayq.store.tasks import TaskStore
from delayq.store.values import Claim, Entry, KeyMode, NewTask
from delayq.testing.cluster import now_ms
from conftest import Collector, wait_until, zk_cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
C, R, D = ttypes.SubmitOutcome.CREATED, ttypes.SubmitOutcome.REPLACED, ttypes.SubmitOutcome.DEDUPLICATED


@pytest.fixture(scope="module")
def engine(database):
    e = dbm.make_engine(config.load({"DELAYQ_MYSQL_URL": database.url}).mysql)
    yield e
    e.dispose()


def _after_a_sentinel(c, topic: str, collector: Collector, due_ms: int) -> list:
    """Every message up to a task due at due_ms: one fired wrongly before it would have arrived
    first (tasks fire in due order), so waiting for it replaces a quiet period."""
    sentinel = c.submit(TaskSpec(topic=topic, dueAtMs=due_ms)).taskId
    wait_until(lambda: sentinel in collector.task_ids(), 10, what="the sentinel task")
    return [m for m in collector.snapshot() if m.headers["x-delayq-task-id"] != sentinel]


def waiting(nodes) -> float:
    """KEEP_IF_ACTIVE tasks waiting for their key, on every node of the module's database."""
    return sum(n.metrics()["delayq_key_waiting_tasks"] for n in nodes.made if n.alive())


def _rows(engine, sql: str, **params) -> list:
    with engine.connect() as conn:
        return list(conn.execute(sqlalchemy.text(sql), params))


def test_key_tags_and_trace_context_reach_get_the_message_the_execlog_and_the_backlog(node, topic, collector,
                                                                                         engine):
    with node.client() as c:
        ref = c.submit(TaskSpec(topic=topic, delayMs=100, payload=b"p", key="order-42 ü", tags=["eu", "vip"],
                                traceparent=TP))
        assert ref.created and ref.outcome == C
        msg, = collector.wait_for(1, 10)
        info = wait_until(lambda: (i := c.get(ref.taskId)).status == ttypes.TaskStatus.FINISHED and i, 10)
    assert msg.headers["x-delayq-key"] in ("order-42 ü", "order-42 ü".encode())
    assert msg.headers["x-delayq-tags"] in ("eu,vip", b"eu,vip")
    assert msg.headers["traceparent"] in (TP, TP.encode())
    assert (info.key, info.tags, info.traceparent) == ("order-42 ü", ["eu", "vip"], TP)
    assert _rows(engine, "SELECT task_key, tags, traceparent FROM job_delay_task_backlog WHERE task_id = :t",
                 t=ref.taskId) == [("order-42 ü".encode(), b"eu,vip", TP)]
    assert _rows(engine, "SELECT task_key, tags FROM job_delay_task_execlog WHERE task_id = :t",
                 t=ref.taskId) == [("order-42 ü".encode(), b"eu,vip")]


def test_key_and_tags_survive_a_retry(node):
    topic = f"k.{uuid.uuid4().hex[:8]}"
    with node.client() as c:
        c.registerService(CallbackService(topic=topic, ttrMs=30_000, backoff="fixed", retryBackoffMs=100))
    collector = Collector("delayq", topic)
    try:
        with node.client() as c:
            ref = c.submit(TaskSpec(topic=topic, delayMs=50, key="k-1", tags=["a"], traceparent=TP))
            collector.wait_for(1, 10)
            assert c.reportResult(ref.taskId, 1, ttypes.ResultStatus.RETRY, "later") == ttypes.ReportOutcome.APPLIED
            first, second = collector.wait_for(2, 10)
            assert c.get(ref.taskId).key == "k-1"
    finally:
        collector.close()
    assert int(second.headers["x-delayq-attempt"]) == 2
    for m in (first, second):
        assert (m.headers["x-delayq-key"], m.headers["x-delayq-tags"], m.headers["traceparent"]) in \
            (("k-1", "a", TP), (b"k-1", b"a", TP.encode()))


@pytest.mark.parametrize("field, spec", [
    ("key", dict(key="k" * 256)), ("tags", dict(tags=[f"t{i}" for i in range(9)])), ("key", dict(key="a\x00b")),
    ("tags", dict(tags=["a\x00"])), ("key", dict(key="next\x85line")), ("key", dict(key="a\u2028b")),
    ("tags", dict(tags=["a\u2029"])), ("onKeyConflict", dict(key="k", onKeyConflict=7)),
    ("onKeyConflict", dict(onKeyConflict=ttypes.KeyConflict.REJECT)), ("traceparent", dict(traceparent="00-x"))])
def test_bad_key_input_is_an_invalid_task_naming_the_field(node, topic, field, spec):
    with node.client() as c:
        with pytest.raises(ttypes.InvalidTask) as e:
            c.submit(TaskSpec(topic=topic, delayMs=1000, **spec))
        assert e.value.field == field
        with pytest.raises(ttypes.InvalidTask) as e:
            c.submitBatch([TaskSpec(topic=topic, delayMs=1000), TaskSpec(topic=topic, delayMs=1000, **spec)])
        assert (e.value.field, e.value.index) == (field, 1)
        with pytest.raises(ttypes.InvalidTask) as e:
            c.findByKey(topic, "k" * 256, None)
        assert e.value.field == "key"


def test_every_call_that_takes_a_key_or_tag_refuses_c1_controls_and_line_separators(node, topic):
    with node.client() as c:
        for call, field in [(lambda: c.findByKey(topic, "a\x85", None), "key"),
                            (lambda: c.cancelByKey(topic, "a\u2028"), "key"),
                            (lambda: c.rescheduleByKey(topic, "a\u2029", now_ms() + 1000), "key"),
                            (lambda: c.listTasks(ttypes.TaskFilter(topic=topic, keyPrefix="a\x85"), None, None), "keyPrefix"),
                            (lambda: c.listTasks(ttypes.TaskFilter(topic=topic, tag="a\x9f"), None, None), "tag"),
                            (lambda: c.listTasks(ttypes.TaskFilter(topic=topic, tag="a,b"), None, None), "tag")]:
            with pytest.raises(ttypes.InvalidTask) as e:
                call()
            assert e.value.field == field


@pytest.fixture(scope="module")
def two_nodes(node, node_factory):
    """A second node on the same database: submits of one key arrive through both."""
    return [node, node_factory()]


@pytest.mark.parametrize("mode", ["REJECT", "REPLACE", "REPLACE_PAYLOAD_KEEP_DUE", "KEEP_IF_ACTIVE"])
def test_each_dedup_mode_under_50_concurrent_submits_of_one_key(two_nodes, engine, mode):
    topic = f"d.{uuid.uuid4().hex[:8]}"
    with two_nodes[0].client() as c:
        c.registerService(CallbackService(topic=topic, ttrMs=0))

    def known_to_the_second_node() -> bool:     # it re-reads the services on a miss, at most every 0.1 s
        with two_nodes[1].client() as c:
            try:
                return c.findByKey(topic, "k", None) is not None and c.submit(
                    TaskSpec(topic=topic, taskId=f"{topic}.probe", delayMs=3_600_000)) is not None
            except ttypes.UnknownTopic:
                return False
    wait_until(known_to_the_second_node, 5, 0.05, what="the second node to know the topic")
    conflict = ttypes.KeyConflict._NAMES_TO_VALUES[mode]

    def submit(i: int):
        with two_nodes[i % 2].client() as c:
            return c.submit(TaskSpec(topic=topic, delayMs=3_600_000, payload=b"%d" % i, key="k",
                                     onKeyConflict=conflict))
    with concurrent.futures.ThreadPoolExecutor(10) as pool:
        refs = list(pool.map(submit, range(50)))
    live = _rows(engine, "SELECT task_id, payload FROM job_delay_task WHERE topic = :t AND task_key = 'k'", t=topic)
    ended = _rows(engine, "SELECT status, message FROM job_delay_task_backlog WHERE topic = :t", t=topic)
    outcomes = sorted(r.outcome for r in refs)
    assert len(live) == 1, f"{mode}: {len(live)} live tasks of the key"
    live_id = live[0][0]
    if mode in ("REJECT", "KEEP_IF_ACTIVE"):
        assert outcomes == [C] + [D] * 49 and {r.taskId for r in refs} == {live_id} and not ended
    elif mode == "REPLACE_PAYLOAD_KEEP_DUE":
        assert outcomes == [C] + [R] * 49 and {r.taskId for r in refs} == {live_id} and not ended
        assert len({r.dueAtMs for r in refs}) == 1
    else:
        assert outcomes == [C] + [R] * 49 and len({r.taskId for r in refs}) == 50 and live_id in {r.taskId for r in refs}
        assert len(ended) == 49 and all(s == 5 and m.startswith("replaced by ") for s, m in ended)


def test_a_replaced_task_never_fires_even_from_a_nodes_memory(node, topic, collector):
    """Holders due in 0.6-1 s sit in memory; each is replaced a few ms before its due time. A
    REPLACED answer means the holder never fires; a CREATED one (the holder fired first) that it did."""
    with node.client() as c:
        t0 = now_ms()
        holders = [c.submit(TaskSpec(topic=topic, dueAtMs=t0 + 600 + 40 * i, key=f"r{i}",
                                     onKeyConflict=ttypes.KeyConflict.REPLACE)) for i in range(10)]
        answers = []
        for i, h in enumerate(holders):
            wait_until(lambda: now_ms() >= h.dueAtMs - 2, 5, 0.001)
            answers.append(c.submit(TaskSpec(topic=topic, delayMs=500, key=f"r{i}",
                                             onKeyConflict=ttypes.KeyConflict.REPLACE)))
        got = _after_a_sentinel(c, topic, collector, max(a.dueAtMs for a in answers) + 300)
    fired = [m.headers["x-delayq-task-id"] for m in got]
    for h, a in zip(holders, answers):
        assert a.taskId in fired
        assert (h.taskId in fired) == (a.outcome == C), (h.taskId, a)
    assert any(a.outcome == R for a in answers)


@pytest.mark.parametrize("action", ["cancel", "reschedule"])
def test_by_key_racing_the_dispatch_answers_exactly_what_happened(node, topic, collector, action):
    """20 tasks, each changed by key 1 to 286 ms before its due time (in memory by then, and around
    the moment its node claims it, up to DELAYQ_CLAIM_LEAD_MS before): CANCELLED never fires,
    RESCHEDULED fires at its new time and never at the old one, ALREADY_DISPATCHED fired at the
    old time."""
    n = 20
    with node.client() as c:
        t0 = now_ms()
        refs = [c.submit(TaskSpec(topic=topic, dueAtMs=t0 + 1000 + 60 * i, key=f"x{i}")) for i in range(n)]
        answers = []
        for i, ref in enumerate(refs):
            ahead = 1 + 15 * (i % 20)
            wait_until(lambda: now_ms() >= ref.dueAtMs - ahead, 5, 0.0005)
            out = (c.cancelByKey(topic, f"x{i}") if action == "cancel"
                   else c.rescheduleByKey(topic, f"x{i}", now_ms() + 1500))
            assert not out.more and [t.taskId for t in out.tasks] in ([ref.taskId], [])
            # No live task: on a busy machine this call came after the task fired and finished (ttr 0).
            answers.append(out.tasks[0] if out.tasks else ttypes.KeyedOutcome(
                ref.taskId, ttypes.KeyedResult.ALREADY_DISPATCHED, ref.dueAtMs))
        got = _after_a_sentinel(c, topic, collector, max(a.dueAtMs for a in answers) + 300)
    late = [a for a in answers if a.result == ttypes.KeyedResult.ALREADY_DISPATCHED]
    assert len(got) == len(late) + (n - len(late) if action == "reschedule" else 0)
    at = {m.headers["x-delayq-task-id"]: m.at_ms for m in got}
    for ref, a in zip(refs, answers):
        if a.result == ttypes.KeyedResult.ALREADY_DISPATCHED:
            assert at[ref.taskId] < ref.dueAtMs + 1000
        elif a.result == ttypes.KeyedResult.CANCELLED:
            assert ref.taskId not in at
        else:
            assert a.result == ttypes.KeyedResult.RESCHEDULED and at[ref.taskId] >= a.dueAtMs
    assert len(late) < n, "every change came too late: the test proved nothing"


def test_find_by_key_and_list_tasks_page_through_live_and_ended_tasks(node, topic):
    with node.client() as c:
        refs = [c.submit(TaskSpec(topic=topic, delayMs=3_600_000 + i, key="order-7" if i < 5 else f"order-8{i}",
                                  tags=["eu"] if i % 2 else ["us"])) for i in range(8)]
        assert c.cancel(refs[1].taskId) == ttypes.CancelResult.CANCELLED
        page = c.findByKey(topic, "order-7", None)
        # Newest first: by creation time, then by id (tasks made in the same millisecond).
        assert [t.taskId for t in page.tasks] == [t.taskId for t in sorted(
            page.tasks, key=lambda t: (t.createdAtMs, t.taskId), reverse=True)] and page.nextPageToken is None
        assert {t.taskId for t in page.tasks} == {r.taskId for r in refs[:5]}
        by_id = {t.taskId: t for t in page.tasks}
        created = [by_id[r.taskId].createdAtMs for r in refs[:5]]
        assert created == sorted(created)
        assert by_id[refs[1].taskId].status == ttypes.TaskStatus.CANCELLED and by_id[refs[4].taskId].tags == ["us"]
        seen, token = [], None
        while True:
            page = c.listTasks(ttypes.TaskFilter(topic=topic, keyPrefix="order-"), token, 3)
            seen += [t.taskId for t in page.tasks]
            token = page.nextPageToken
            if token is None:
                break
        assert seen == [r.taskId for r in refs]     # by due time, live and ended merged
        eu = c.listTasks(ttypes.TaskFilter(topic=topic, tag="eu", status=ttypes.TaskStatus.DELAY), None, 10)
        assert [t.taskId for t in eu.tasks] == [refs[i].taskId for i in (3, 5, 7)]
        first = c.listTasks(ttypes.TaskFilter(topic=topic), None, 2)
        with pytest.raises(ttypes.InvalidTask) as e:
            c.listTasks(ttypes.TaskFilter(topic=topic, tag="eu"), first.nextPageToken, 2)
        assert e.value.field == "pageToken"
        out = c.cancelByKey(topic, "order-7")
        assert sorted(t.result for t in out.tasks) == [ttypes.KeyedResult.CANCELLED] * 4


def test_a_key_of_more_tasks_than_one_call_changes_is_changed_whole_by_calling_again(node, topic):
    """1,000 a call: `more` says call again, and the call again goes on with the tasks not yet
    changed (a rescheduled task stays live, so newest first alone answered the same thousand)."""
    with node.client() as c:
        due = now_ms() + 3_600_000
        ids = {r.taskId for n in (600, 600) for r in c.submitBatch(
            [TaskSpec(topic=topic, dueAtMs=due + i, key="big") for i in range(n)])}
        later = now_ms() + 7_200_000
        first = c.rescheduleByKey(topic, "big", later)
        again = c.rescheduleByKey(topic, "big", later)
        assert (len(first.tasks), first.more, len(again.tasks), again.more) == (1000, True, 1000, False)
        answered = [o for out in (first, again) for o in out.tasks]
        assert {o.taskId for o in answered} == ids
        assert {(o.result, o.dueAtMs) for o in answered} == {(ttypes.KeyedResult.RESCHEDULED, later)}
        moved, token = 0, None
        while True:
            page = c.listTasks(ttypes.TaskFilter(topic=topic, keyPrefix="big", dueFromMs=later, dueBeforeMs=later + 1),
                               token, 500)
            moved += len(page.tasks)
            if (token := page.nextPageToken) is None:
                break
        assert moved == 1200, f"{1200 - moved} tasks of the key were left at their old time"
        gone = [c.cancelByKey(topic, "big") for _ in range(2)]
        assert [(len(g.tasks), g.more) for g in gone] == [(1000, True), (200, False)]
        assert {o.taskId for g in gone for o in g.tasks} == ids


def test_cancel_by_key_goes_on_past_tasks_in_flight_it_has_answered(engine, node, topic):
    """Tasks in flight stay live after a cancel (their attempts run on): a call again takes those
    still to cancel first, so a key with more in flight than a call answers is not stuck on them."""
    from delayq.store.bykey import KeyRequests, KeyResult
    with node.client() as c:
        ids = [c.submit(TaskSpec(topic=topic, delayMs=3_600_000 + i, key="busy")).taskId for i in range(5)]
    running = ids[2:]           # the three newest, as if claimed
    with engine.begin() as conn:
        conn.execute(sqlalchemy.text("UPDATE job_delay_task SET status = 1, attempt = 1 WHERE task_id IN :ids")
                     .bindparams(sqlalchemy.bindparam("ids", expanding=True)), {"ids": running})
    requests, answers = KeyRequests(engine), []
    for _ in range(5):
        changed, more = requests.cancel(topic, b"busy", now_ms(), 2)
        answers.append(changed)
        if not more:
            break
    assert not more, f"still `more` after {len(answers)} calls of 2: {answers}"
    results = {}
    for changed in answers:
        for ch in changed:
            results.setdefault(ch.task_id, set()).add(ch.result)
    assert results == {**{t: {KeyResult.CANCELLED} for t in ids[:2]},
                       **{t: {KeyResult.ALREADY_DISPATCHED} for t in running}}
    marked = _rows(engine, "SELECT COUNT(*) FROM job_delay_task WHERE task_id IN :ids AND cancel_ms IS NOT NULL",
                   ids=tuple(running))
    assert marked[0][0] == 3, "an attempt in flight was not told of the cancel"


def test_max_debounce_bounds_the_first_replace_submit_of_a_chain_too(node, topic, collector):
    """docs/clients.md: a REPLACE chain is due at most its first submit plus maxDebounceMs — the
    first submit included, not only the replacements after it."""
    with node.client() as c:
        t0 = now_ms()
        first = c.submit(TaskSpec(topic=topic, delayMs=60_000, key="deb", maxDebounceMs=1_000,
                                  onKeyConflict=ttypes.KeyConflict.REPLACE))
        t1 = now_ms()
        again = c.submit(TaskSpec(topic=topic, delayMs=60_000, key="deb", maxDebounceMs=1_000,
                                  onKeyConflict=ttypes.KeyConflict.REPLACE))
        assert first.outcome == C and t0 + 1_000 <= first.dueAtMs <= t1 + 1_000
        assert again.outcome == R and again.dueAtMs == first.dueAtMs     # the chain's bound, not 60 s out
        assert c.get(again.taskId).dueAtMs == first.dueAtMs
    wait_until(lambda: again.taskId in collector.task_ids(), 10, what="the debounced task, a second after its first submit")


def test_a_batch_replacing_its_own_key_answers_each_task_with_the_one_that_fires(node, topic, engine):
    with node.client() as c:
        refs = c.submitBatch([TaskSpec(topic=topic, delayMs=3_600_000, key="b", payload=b"%d" % i,
                                       onKeyConflict=ttypes.KeyConflict.REPLACE) for i in range(3)]
                             + [TaskSpec(topic=topic, delayMs=3_600_000, key="b", payload=b"d",
                                         onKeyConflict=ttypes.KeyConflict.REJECT)])
    live = _rows(engine, "SELECT task_id, payload FROM job_delay_task WHERE topic = :t AND task_key = 'b'", t=topic)
    assert len(live) == 1 and live[0][1] == b"2"
    assert [r.taskId for r in refs] == [live[0][0]] * 4
    assert [r.outcome for r in refs] == [R, R, R, D]


def _cli(node, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "delayq.ops.cli", *args, "--endpoint", node.endpoint], env=node.env,
                          capture_output=True, text=True, timeout=60)


def test_the_command_line_submits_finds_and_cancels_by_key(node, topic):
    first = _cli(node, "tasks", "submit", topic, "--delay", "1h", "--key", "cli-1", "--tag", "eu",
                 "--on-key-conflict", "reject", "--json")
    again = _cli(node, "tasks", "submit", topic, "--delay", "1h", "--key", "cli-1", "--on-key-conflict", "reject",
                 "--json")
    assert first.returncode == again.returncode == 0, first.stderr + again.stderr
    one, two = json.loads(first.stdout), json.loads(again.stdout)
    assert (one["outcome"], two["outcome"], two["taskId"]) == ("CREATED", "DEDUPLICATED", one["taskId"])
    found = json.loads(_cli(node, "tasks", "find", topic, "cli-1", "--json").stdout)
    assert [(t["taskId"], t["tags"]) for t in found["tasks"]] == [(one["taskId"], ["eu"])]
    listed = json.loads(_cli(node, "tasks", "query", topic, "--tag", "eu", "--json").stdout)
    assert [t["taskId"] for t in listed["tasks"]] == [one["taskId"]]
    cancelled = _cli(node, "tasks", "cancel-key", topic, "cli-1")
    assert cancelled.returncode == 0 and f"{one['taskId']}  CANCELLED" in cancelled.stdout
    assert _cli(node, "tasks", "cancel-key", topic, "cli-1").returncode == 1       # no live task any more
    bad = _cli(node, "tasks", "submit", topic, "--delay", "1h", "--key", "k" * 256)
    assert bad.returncode == 2 and "key:" in bad.stderr


def test_the_command_line_shows_keys_tags_trace_context_and_how_a_task_ended(node, topic):
    ids = {}
    for key, tags in (("show-1", ("eu", "vip")), ("show-1-and-a-longer-key", ("eu",))):
        args = [a for t in tags for a in ("--tag", t)]
        done = _cli(node, "tasks", "submit", topic, "--delay", "1h", "--key", key, *args, "--traceparent", TP, "--json")
        assert done.returncode == 0, done.stderr
        ids[key] = json.loads(done.stdout)["taskId"]
    task_id = ids["show-1"]
    got = json.loads(_cli(node, "tasks", "get", task_id, "--json").stdout)
    assert {k: got[k] for k in ("key", "tags", "traceparent", "message")} == {
        "key": "show-1", "tags": ["eu", "vip"], "traceparent": TP, "message": None}
    assert _cli(node, "tasks", "get", task_id).stdout.splitlines()[1] == f"  key show-1  tags eu,vip  traceparent {TP}"
    assert _cli(node, "tasks", "cancel", task_id).returncode == 0
    assert json.loads(_cli(node, "tasks", "get", task_id, "--json").stdout)["message"] == "cancelled"
    assert _cli(node, "tasks", "get", task_id).stdout.splitlines()[2] == "  ended: cancelled"

    def listed(*args: str) -> subprocess.CompletedProcess:      # read from MySQL: no --endpoint
        return subprocess.run([sys.executable, "-m", "delayq.ops.cli", "tasks", "list", "--topic", topic,
                               "--key-prefix", "show-1", *args], env=node.env, capture_output=True, text=True,
                              timeout=60)
    rows = json.loads(listed("--json").stdout)
    assert sorted((r["taskId"], r["key"], r["tags"]) for r in rows) == sorted(
        [(task_id, "show-1", ["eu", "vip"]), (ids["show-1-and-a-longer-key"], "show-1-and-a-longer-key", ["eu"])])
    for table in (listed().stdout, _cli(node, "tasks", "query", topic, "--key-prefix", "show-1").stdout):
        header, *lines = table.splitlines()
        at = header.index("TAGS")
        assert sorted(line[at:] for line in lines) == ["eu", "eu,vip"], table
        assert sorted(line[header.index("KEY"):at].rstrip() for line in lines) == ["show-1", "show-1-and-a-longer-key"]


def test_keep_if_active_dispatches_the_waiting_task_only_once_the_running_one_reports_and_then_at_once(node,
                                                                                                       node_factory):
    """KEEP_IF_ACTIVE: at most one waiting and one in flight. The first task's handler is slow (its
    result comes later); the second, due meanwhile, is not dispatched until that result, and then
    without waiting for a recheck."""
    topic = f"k.{uuid.uuid4().hex[:8]}"
    keep = ttypes.KeyConflict.KEEP_IF_ACTIVE
    with node.client() as c:
        c.registerService(CallbackService(topic=topic, ttrMs=30_000))
    collector = Collector("delayq", topic)
    try:
        with node.client() as c:
            first = c.submit(TaskSpec(topic=topic, delayMs=50, key="doc-7", onKeyConflict=keep))
            collector.wait_for(1, 10)
            second = c.submit(TaskSpec(topic=topic, delayMs=0, key="doc-7", onKeyConflict=keep))
            third = c.submit(TaskSpec(topic=topic, delayMs=0, key="doc-7", onKeyConflict=keep))
            assert (second.outcome, third.outcome, third.taskId) == (C, D, second.taskId)
            # Three of the node's 500 ms rechecks pass before the sentinel fires.
            early = _after_a_sentinel(c, topic, collector, now_ms() + 1_600)
            assert [m.headers["x-delayq-task-id"] for m in early] == [first.taskId]
            assert c.get(second.taskId).status == ttypes.TaskStatus.DELAY
            # What an operator sees: one task waiting for its key (on whichever node claimed it).
            wait_until(lambda: waiting(node_factory) == 1, 5, what="the gauge of waiting tasks")
            reported = now_ms()
            assert c.reportResult(first.taskId, 1, ttypes.ResultStatus.SUCCESS, None) == ttypes.ReportOutcome.APPLIED
            wait_until(lambda: second.taskId in collector.task_ids(), 10, what="the waiting task")
        arrived = next(m.at_ms for m in collector.snapshot() if m.headers["x-delayq-task-id"] == second.taskId)
        wait_until(lambda: waiting(node_factory) == 0, 5, what="no task waiting for its key")
    finally:
        collector.close()
    # Heard of by the node that applied the result: well before the next recheck would find it.
    assert arrived - reported < 450, arrived - reported


def test_two_claims_of_one_keep_if_active_key_at_once_put_one_attempt_in_flight(node, engine):
    """The rule holds across nodes: two claims, each of one waiting task of the key (a task
    waiting for its retry and the key's holder), racing on their own connections, as two nodes'
    claims would. Due in an hour, so the node's own window leaves them alone."""
    topic = f"k.{uuid.uuid4().hex[:8]}"
    with engine.connect() as conn:
        (a_shard, owner, a_epoch), (b_shard, _, b_epoch) = conn.exec_driver_sql(
            "SELECT shard_id, owner, epoch FROM job_shard ORDER BY shard_id LIMIT 2").all()
    store, due = TaskStore(engine), now_ms() + 3_600_000
    for round_ in range(10):
        key = f"race-{round_}".encode()
        tasks = [NewTask(f"{topic}-{round_}-{i}", topic, shard, due, b"", bytes(16), 3, 600_000, now_ms(),
                         key=key, mode=KeyMode.KEEP_IF_ACTIVE) for i, shard in enumerate((a_shard, b_shard))]
        with engine.begin() as conn:
            conn.exec_driver_sql(insert_tasks(tasks[:1], {tasks[0].task_id: 0}))
            conn.exec_driver_sql(insert_tasks(tasks[1:]))
            conn.exec_driver_sql(f"UPDATE job_delay_task SET key_mode = 4 WHERE task_id = '{tasks[1].task_id}'")
        start = threading.Barrier(2)

        def claim(t: NewTask, epoch: int) -> Claim:
            start.wait(5)
            return store.claim([Entry(t.task_id, t.shard_id, due, topic=topic)], owner, {t.shard_id: epoch}, now_ms())
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            claims = list(pool.map(claim, tasks, (a_epoch, b_epoch)))
        assert sorted(len(c.claimed) for c in claims) == [0, 1], claims
        assert [w.key for c in claims for w in c.waits] == [key]
    with engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM job_delay_task WHERE topic = %s", (topic,))


def _ids_moving_to(prefix: str, n: int, shards: range, count: int) -> list[str]:
    """Task ids whose CRC32 % count is one of `shards`: those a reshard to `count` moves there."""
    ids = (f"{prefix}-{i}" for i in itertools.count())
    return list(itertools.islice((i for i in ids if zlib.crc32(i.encode()) % count in shards), n))


@pytest.mark.timeout(150)
def test_keys_and_tags_survive_a_reshard_a_retry_after_it_and_the_backlog(tmp_path):
    """A one-node cluster grows from 4 shards to 8. Tasks that move (ids chosen so: due in ten
    minutes, and one in flight) keep their key, tags and hold on the key; the one in flight is
    retried after the move with its key and tags on the message, its KEEP_IF_ACTIVE key still keeps
    the waiting task back, and it ends in the backlog with them."""
    keep, reject = ttypes.KeyConflict.KEEP_IF_ACTIVE, ttypes.KeyConflict.REJECT
    far_ids = _ids_moving_to("far", 6, range(4, 8), 8)
    doc_id, = _ids_moving_to("doc", 1, range(4, 8), 8)
    topic = f"k.{uuid.uuid4().hex[:8]}"
    with zk_cluster(tmp_path, 4, 1) as (db, (n1,)):
        engine = dbm.make_engine(config.load({"DELAYQ_MYSQL_URL": db.url}).mysql)
        with n1.client() as c:
            c.registerService(CallbackService(topic=topic, ttrMs=30_000, backoff="fixed", retryBackoffMs=100))
        collector = Collector("delayq", topic)
        try:
            with n1.client() as c:
                for i, task_id in enumerate(far_ids):
                    c.submit(TaskSpec(topic=topic, taskId=task_id, delayMs=600_000, key=f"far-{i}",
                                      tags=["eu", f"t{i}"], onKeyConflict=keep))
                c.submit(TaskSpec(topic=topic, taskId=doc_id, delayMs=0, key="doc", tags=["x"], traceparent=TP,
                                  onKeyConflict=keep))
                collector.wait_for(1, 10)
                waiting = c.submit(TaskSpec(topic=topic, delayMs=0, key="doc", onKeyConflict=keep)).taskId
                before = {t: c.get(t).shardId for t in [*far_ids, doc_id]}
                assert max(before.values()) < 4
                assert c.reshard(8).started

                def finished() -> bool:
                    s = c.reshard(8)
                    assert s.error is None, s.error
                    return not s.running
                wait_until(finished, 60, 0.2, what="the reshard to finish")
                for i, task_id in enumerate(far_ids):
                    info = c.get(task_id)
                    assert info.shardId >= 4 and (info.key, info.tags) == (f"far-{i}", ["eu", f"t{i}"])
                    assert [t.taskId for t in c.findByKey(topic, f"far-{i}", None).tasks] == [task_id]
                    again = c.submit(TaskSpec(topic=topic, delayMs=1000, key=f"far-{i}", onKeyConflict=reject))
                    assert (again.outcome, again.taskId) == (D, task_id)       # the moved task still holds it
                moved = c.get(doc_id)
                assert (moved.status, moved.key, moved.tags) == (ttypes.TaskStatus.READY, "doc", ["x"])
                assert moved.shardId >= 4                                  # moved while in flight
                assert c.get(waiting).status == ttypes.TaskStatus.DELAY
                c.reportResult(doc_id, 1, ttypes.ResultStatus.RETRY, "after the move")
                # The retry frees the key: the waiting task goes, and then the retry waits for it.
                wait_until(lambda: waiting in collector.task_ids(), 10, what="the waiting task")
                ended = now_ms()
                c.reportResult(waiting, 1, ttypes.ResultStatus.SUCCESS, None)
                retried = wait_until(lambda: [m for m in collector.snapshot()
                                              if m.headers["x-delayq-task-id"] == doc_id][1:], 10, what="the retry")
                c.reportResult(doc_id, 2, ttypes.ResultStatus.SUCCESS, None)
                wait_until(lambda: c.get(doc_id).status == ttypes.TaskStatus.FINISHED, 10, what="doc finished")
        finally:
            collector.close()
        m = retried[0]
        assert m.at_ms >= ended                  # the retry waited for the attempt in flight of its key
        assert [v.decode() if isinstance(v, bytes) else str(v) for v in (
            m.headers["x-delayq-attempt"], m.headers["x-delayq-key"], m.headers["x-delayq-tags"],
            m.headers["traceparent"])] == ["2", "doc", "x", TP]
        assert _rows(engine, "SELECT task_key, tags, traceparent FROM job_delay_task_backlog WHERE task_id = :t",
                     t=doc_id) == [(b"doc", b"x", TP)]
        engine.dispose()
