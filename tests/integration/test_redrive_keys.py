"""A redrive keeps the dedup promise its tasks were submitted with, on a real node, MySQL and
RabbitMQ: two FAILED KEEP_IF_ACTIVE tasks of one key redriven together put one attempt in flight,
the other staying FAILED with the command naming the task that holds the key; a bulk redrive of
REPLACE tasks leaves one live task per key, the rest FAILED and counted as skipped; redrives of
one key racing on their own connections redrive one task, and a submit that takes the key in
the middle of a redrive wins it (the unique key decides); ALLOW and keyless tasks redrive as
before, holding no key."""
from __future__ import annotations

import concurrent.futures
import json
import subprocess
import sys
import threading
import uuid

import pytest
import sqlalchemy

from delayq import config, db as dbm
from delayq.client import CallbackService, TaskSpec
from delayq.client.gen.delayq_thrift import ttypes
from delayq.bulk import Action, Spec, State
from delayq.lifecycle import Status
from delayq.store.bulkbatch import Batch, run_batch
from delayq.store.bulkjobs import BulkJobs
from delayq.store.maintenance import TaskFilter, redrive
from delayq.store.sqltext import insert_tasks
from delayq.store.values import KeyMode, NewTask
from delayq.testing.cluster import fresh_database, now_ms
from conftest import Collector, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

KEEP, REPLACE, ALLOW = ttypes.KeyConflict.KEEP_IF_ACTIVE, ttypes.KeyConflict.REPLACE, ttypes.KeyConflict.ALLOW
FATAL = ttypes.ResultStatus.FATAL
HOUR = 3_600_000


@pytest.fixture(scope="module")
def engine(database):
    e = dbm.make_engine(config.load({"DELAYQ_MYSQL_URL": database.url}).mysql)
    yield e
    e.dispose()


@pytest.fixture
def failing(node):
    """A fresh topic whose tasks fail at their first FATAL result (no retries), and its messages."""
    name = f"r.{uuid.uuid4().hex[:10]}"
    with node.client() as c:
        c.registerService(CallbackService(topic=name, ttrMs=60_000, maxRetries=0))
    collector = Collector("delayq", name)
    yield name, collector
    collector.close()


def _rows(engine, sql: str, **params) -> list:
    with engine.connect() as conn:
        return list(conn.execute(sqlalchemy.text(sql), params))


def _delayq(node, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "delayq", *args], env=node.env, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)


def _fails(c, collector: Collector, task_id: str) -> None:
    """The task's first attempt arrives and is answered FATAL: FAILED, in the backlog."""
    wait_until(lambda: task_id in collector.task_ids(), 10, what=f"{task_id} dispatched")
    assert c.reportResult(task_id, 1, FATAL, "broken") == ttypes.ReportOutcome.APPLIED
    assert c.get(task_id).status == ttypes.TaskStatus.FAILED


def _two_failed(c, topic: str, collector: Collector, key: str, mode) -> tuple[str, str]:
    """Two FAILED tasks of one key: the second submitted while the first is in flight (it takes
    the key over), each failing in turn."""
    first = c.submit(TaskSpec(topic=topic, delayMs=0, key=key, onKeyConflict=mode))
    wait_until(lambda: first.taskId in collector.task_ids(), 10, what="the first task dispatched")
    second = c.submit(TaskSpec(topic=topic, delayMs=0, key=key, onKeyConflict=mode))
    assert second.created and second.taskId != first.taskId
    _fails(c, collector, first.taskId)
    _fails(c, collector, second.taskId)
    return first.taskId, second.taskId


def _after_a_sentinel(c, topic: str, collector: Collector) -> list[str]:
    """The task ids of every message up to a task due in a second: one dispatched wrongly before
    it would have arrived first, so waiting for it replaces a quiet period."""
    sentinel = c.submit(TaskSpec(topic=topic, delayMs=1_000)).taskId
    wait_until(lambda: sentinel in collector.task_ids(), 10, what="the sentinel task")
    return [t for t in collector.task_ids() if t != sentinel]


def test_two_failed_keep_if_active_tasks_of_a_key_redriven_put_one_attempt_in_flight(node, engine, failing):
    topic, collector = failing
    with node.client() as c:
        a, b = _two_failed(c, topic, collector, "doc-7", KEEP)
        done = _delayq(node, "tasks", "redrive", "--id", a, "--id", b, "--yes", "--json")
        assert done.returncode == 0, done.stderr
        answer = json.loads(done.stdout)
        # The first by task id takes the key back; the other stays FAILED, the answer says why.
        first, second = sorted((a, b))
        assert (answer["redriven"], answer["keyHeld"]) == (1, {second: first})
        assert c.get(second).status == ttypes.TaskStatus.FAILED
        wait_until(lambda: collector.task_ids().count(first) == 2, 10, what="the redriven task dispatched")
        assert sorted(_after_a_sentinel(c, topic, collector)) == sorted([a, b, first])
        assert _rows(engine, "SELECT task_id, held_key, key_mode, flight_key FROM job_delay_task WHERE topic = :t "
                     "AND task_key IS NOT NULL", t=topic) == [(first, b"doc-7", 4, b"doc-7")]
        # Its holder ended, the other one is redriven in its turn, and the command says nothing else.
        _ = c.reportResult(first, 2, FATAL, "still broken")
        text = _delayq(node, "tasks", "redrive", "--id", second, "--yes")
        assert text.returncode == 0 and text.stdout.startswith("redriven: 1 tasks") and "not redriven" not in text.stdout
        wait_until(lambda: collector.task_ids().count(second) == 2, 10, what="the second task dispatched again")


def test_a_redrive_of_a_task_whose_key_a_live_task_holds_names_the_holder(node, failing):
    topic, collector = failing
    with node.client() as c:
        a, b = _two_failed(c, topic, collector, "doc-8", KEEP)
        waiting = c.submit(TaskSpec(topic=topic, delayMs=HOUR, key="doc-8", onKeyConflict=KEEP)).taskId
        text = _delayq(node, "tasks", "redrive", "--topic", topic, "--yes")
        assert text.returncode == 0, text.stderr
        assert text.stdout.splitlines()[1:] == [f"not redriven: {t} stays FAILED: its key is held by live task {waiting}"
                                                for t in sorted((a, b))]
        admin = c.redrive(ttypes.RedriveFilter(topic=topic))
        assert (admin.redriven, admin.more, admin.keyHeld) == (0, False, {a: waiting, b: waiting})
        assert admin.lastTaskId == max(a, b)
        # Paged on past the tasks left FAILED, as a call after `more` would be.
        assert c.redrive(ttypes.RedriveFilter(topic=topic, afterTaskId=min(a, b))).keyHeld == {max(a, b): waiting}
        with pytest.raises(ttypes.InvalidRequest) as bad:
            c.redrive(ttypes.RedriveFilter(topic=topic, afterTaskId="no spaces"))
        assert bad.value.field == "afterTaskId"
        assert [c.get(t).status for t in (a, b)] == [ttypes.TaskStatus.FAILED] * 2


def test_a_bulk_redrive_of_replace_tasks_leaves_one_live_task_per_key(node, engine, failing):
    topic, collector = failing
    with node.client() as c:
        a, b = _two_failed(c, topic, collector, "order-1", REPLACE)
        # A key a newer submit holds: its failed task stays FAILED.
        e = c.submit(TaskSpec(topic=topic, delayMs=0, key="order-2", onKeyConflict=REPLACE)).taskId
        _fails(c, collector, e)
        newer = c.submit(TaskSpec(topic=topic, delayMs=HOUR, key="order-2", onKeyConflict=REPLACE)).taskId
        request = ttypes.BulkRequest(action=ttypes.BulkAction.REDRIVE, filter=ttypes.TaskFilter(topic=topic),
                                     reason="consumer fixed")
        assert c.bulkCount(request) == 3
        job = c.bulkStart(request)

        def ended():
            j = c.bulkGet(job.jobId)
            return j.state != ttypes.BulkState.RUNNING and j
        done = wait_until(ended, 20, 0.1, what="the bulk redrive to end")
        assert (done.state, done.changed, done.skipped) == (ttypes.BulkState.DONE, 1, 2)
        # Whichever of the key's two tasks a lane reached first holds it; the other stays FAILED.
        statuses = {t: c.get(t).status for t in (a, b, e)}
    live = _rows(engine, "SELECT task_key, task_id, held_key FROM job_delay_task WHERE topic = :t ORDER BY task_key",
                 t=topic)
    assert [(k, h) for k, _, h in live] == [(b"order-1", b"order-1"), (b"order-2", b"order-2")]
    assert live[0][1] in (a, b) and live[1][1] == newer
    assert [s for t, s in statuses.items() if t != live[0][1]] == [ttypes.TaskStatus.FAILED] * 2


def test_redrives_of_one_key_racing_redrive_one_task(engine):
    """Eight FAILED REPLACE tasks of one key, each redriven by a redrive of its own on its own
    connection, all at once: the unique key lets one take the key; the others, answered with it,
    stay FAILED. Redriven to an hour ahead, so the node's window leaves them alone."""
    topic, key, now = f"r.{uuid.uuid4().hex[:10]}", b"race", now_ms()
    ids = [f"{topic}-{i}" for i in range(8)]
    with engine.begin() as conn:
        for task_id in ids:
            conn.execute(sqlalchemy.text(
                "INSERT INTO job_delay_task_backlog (task_id, topic, shard_id, due_ms, status, attempt, payload, "
                "spec_hash, max_retries, ttr_ms, created_ms, finished_ms, message, dead_letter, task_key, key_mode) "
                "VALUES (:id, :t, 0, :due, :f, 1, '', :h, 0, 60000, :due, :now, 'broken', 0, :k, 2)"),
                dict(id=task_id, t=topic, due=now - HOUR, f=int(Status.FAILED), h=bytes(16), now=now, k=key))
    start = threading.Barrier(len(ids))

    def one(task_id: str):
        start.wait(10)
        return list(redrive(engine, TaskFilter(ids=(task_id,)), now + HOUR))
    with concurrent.futures.ThreadPoolExecutor(len(ids)) as pool:
        batches = [b for done in pool.map(one, ids) for b in done]
    redriven = [t for b in batches for t in b.redriven]
    held = dict(pair for b in batches for pair in b.held)
    assert len(redriven) == 1 and held == {t: redriven[0] for t in ids if t != redriven[0]}
    assert _rows(engine, "SELECT task_id, held_key FROM job_delay_task WHERE topic = :t", t=topic) == [
        (redriven[0], key)]
    with engine.begin() as conn:
        conn.execute(sqlalchemy.text("DELETE FROM job_delay_task WHERE topic = :t"), dict(t=topic))


@pytest.fixture
def bare():
    """A database no node runs (no bulk runner takes a job a test runs itself), and its settings."""
    with fresh_database(8) as db:
        yield config.load({"DELAYQ_MYSQL_URL": db.url}).mysql


def _single(engine, topic: str, task_id: str, now: int) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    [batch] = redrive(engine, TaskFilter(ids=(task_id,)), now)
    return batch.redriven, batch.held


def _bulk(engine, topic: str, task_id: str, now: int) -> tuple[tuple[str, ...], int]:
    jobs = BulkJobs(engine, lanes=1)
    created = jobs.create(Spec(Action.REDRIVE, TaskFilter(topic=topic, status=Status.FAILED), "r", 1000), "test", now)
    job = jobs.take("a", now, HOUR)
    assert job is not None and job.job_id == created.job_id
    done = run_batch(engine, Batch(job, 0, "", 500), "a", now, HOUR, max_horizon_ms=30 * 24 * HOUR)
    assert done.state is State.DONE
    return done.changed, jobs.get(job.job_id).progress.skipped


@pytest.mark.parametrize("path, left", [(_single, "held"), (_bulk, "skipped")])
def test_a_key_taken_between_the_look_up_and_the_insert_leaves_the_task_failed(bare, path, left):
    """The look-up of the key's holder is no check-then-insert: a submit that takes the key after
    it and commits first makes the redrive's INSERT fail on the unique key, and the redrive (a
    single one, or a bulk job's batch), run again, finds that submit's task holding the key."""
    topic, key, now = f"r.{uuid.uuid4().hex[:10]}", b"late", now_ms()
    failed, holder = f"{topic}-failed", f"{topic}-holder"
    redriving, submitting = dbm.make_engine(bare), dbm.make_engine(bare)
    with redriving.begin() as conn:
        conn.execute(sqlalchemy.text(
            "INSERT INTO job_delay_task_backlog (task_id, topic, shard_id, due_ms, status, attempt, payload, spec_hash, "
            "max_retries, ttr_ms, created_ms, finished_ms, message, dead_letter, task_key, key_mode) "
            "VALUES (:id, :t, 0, :now, :f, 1, '', :h, 0, 60000, :now, :now, 'broken', 0, :k, 2)"),
            dict(id=failed, t=topic, now=now, f=int(Status.FAILED), h=bytes(16), k=key))
    inserts: list[str] = []

    def submit_first(conn, cursor, statement, parameters, context, executemany) -> None:
        if statement.startswith("INSERT INTO job_delay_task ") and topic in str(parameters):
            inserts.append(statement)
            if len(inserts) == 1:
                with submitting.begin() as other:
                    other.exec_driver_sql(insert_tasks([NewTask(holder, topic, 0, now + HOUR, b"", bytes(16), 0, 60_000,
                                                                now, key=key, mode=KeyMode.REPLACE)], {holder: now}))
    sqlalchemy.event.listen(redriving, "before_cursor_execute", submit_first)
    try:
        redriven, rest = path(redriving, topic, failed, now)
        assert len(inserts) == 1            # the second run found the holder and inserted nothing
        assert (redriven, rest) == ((), ((failed, holder),) if left == "held" else 1)
        with submitting.connect() as conn:
            assert conn.exec_driver_sql("SELECT status FROM job_delay_task_backlog WHERE task_id = %s",
                                        (failed,)).all() == [(int(Status.FAILED),)]
            assert conn.exec_driver_sql("SELECT task_id FROM job_delay_task").all() == [(holder,)]
    finally:
        redriving.dispose()
        submitting.dispose()


def test_allow_and_keyless_tasks_redrive_as_before(node, engine, failing):
    topic, collector = failing
    with node.client() as c:
        a, b = _two_failed(c, topic, collector, "free", ALLOW)
        plain = c.submit(TaskSpec(topic=topic, delayMs=0)).taskId
        _fails(c, collector, plain)
        answer = c.redrive(ttypes.RedriveFilter(topic=topic))
        assert (answer.redriven, answer.more, answer.keyHeld) == (3, False, {})
        wait_until(lambda: sorted(collector.task_ids()) == sorted([a, b, plain] * 2), 10,
                   what="the three tasks dispatched again")
    assert sorted(_rows(engine, "SELECT task_id, task_key, held_key, key_mode FROM job_delay_task WHERE topic = :t",
                        t=topic)) == sorted([(a, b"free", None, None), (b, b"free", None, None), (plain, None, None, None)])
