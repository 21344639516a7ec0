"""Bulk jobs on two real nodes (ZooKeeper, MySQL as the nodes' own account): a dry run's count is
what the job changes, and a cancel by tag reaches every shard; a job whose node is SIGKILLed is
finished by the other node with every task moved exactly once; a reschedule racing the dispatch
moves each task or lets it fire, never both, and counts which; a batch run again from an old
cursor, or by a node that lost the job, changes nothing; two lanes' batches commit side by side,
each on its share; a stop leaves a definite count; a redrive; bad requests are declared errors naming the field; the command's dry run and refusal."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import uuid
import zlib

import pytest
import sqlalchemy

from bench import fill
from delayq import config, db as dbm, tables
from delayq.bulk import Action, Spec, State, lane_done
from delayq.client import CallbackService, TaskSpec
from delayq.client.gen.delayq_thrift import ttypes
from delayq.errors import StatementStopped
from delayq.access.grants import Client, Permission
from delayq.clock import SYSTEM_CLOCK
from delayq.lifecycle import Status
from delayq.nodes.front.access import Access
from delayq.nodes.front.bulkcalls import BulkCalls
from delayq.nodes.front.errors import CallAnswers
from delayq.nodes.metrics import Metrics
from delayq.store import bulkbatch
from delayq.store.bulkbatch import Batch, BatchResult
from delayq.store.bulkjobs import BulkJobs
from delayq.store.maintenance import TaskFilter
from delayq.testing.cluster import fresh_database, now_ms
from delayq.testing.fakes import Clients, call_as
from delayq.testing.lanes import HORIZON_MS, run_lanes
from conftest import Collector, NodeFactory, per_node, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

HOUR = 3_600_000
CANCEL, RESCHEDULE, REDRIVE = ttypes.BulkAction.CANCEL, ttypes.BulkAction.RESCHEDULE, ttypes.BulkAction.REDRIVE


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with fresh_database(8) as db:
        factory = NodeFactory(db, tmp_path_factory.mktemp("bulk"))
        nodes = [factory(DELAYQ_ZK_ENABLED="true", DELAYQ_ZK_SESSION_TIMEOUT_MS="3000", DELAYQ_BULK_LEASE_MS="2000")
                 for _ in range(2)]
        try:
            wait_until(lambda: sorted(per_node(nodes[0]).values()) == [4, 4], 15, 0.1, what="a balanced cluster")
            yield db, nodes
        finally:
            factory.stop_all()


@pytest.fixture(scope="module")
def engine(cluster):
    e = dbm.make_engine(config.load({"DELAYQ_MYSQL_URL": cluster[0].url}).mysql)
    yield e
    e.dispose()


def _live(cluster):
    """A node still running (the take-over test kills one)."""
    return next(n for n in cluster[1] if n.alive())


def _topic(node) -> str:
    name = f"b.{uuid.uuid4().hex[:10]}"
    with node.client() as c:
        c.registerService(CallbackService(topic=name, ttrMs=0))
    return name


def _submit(node, topic: str, n: int, base_ms: int, **spec) -> list[str]:
    """n tasks due base_ms + i (an hour or more ahead: none fires during a test)."""
    ids: list[str] = []
    with node.client() as c:
        for start in range(0, n, 500):
            ids += [r.taskId for r in c.submitBatch([TaskSpec(topic=topic, dueAtMs=base_ms + i, **spec)
                                                     for i in range(start, min(n, start + 500))])]
    return ids


def _rows(engine, sql: str, **params) -> list:
    with engine.connect() as conn:
        return list(conn.execute(sqlalchemy.text(sql), params))


def _request(action, topic: str, reason: str = "test", **kw) -> ttypes.BulkRequest:
    f = {k: kw.pop(k) for k in ("tag", "keyPrefix", "dueFromMs", "dueBeforeMs") if k in kw}
    return ttypes.BulkRequest(action=action, filter=ttypes.TaskFilter(topic=topic, **f), reason=reason, **kw)


def _ended(node, job_id: str, timeout: float) -> ttypes.BulkJob:
    def look():
        with node.client() as c:
            job = c.bulkGet(job_id)
        return job.state != ttypes.BulkState.RUNNING and job
    return wait_until(look, timeout, 0.1, what=f"bulk job {job_id} to end")


def test_a_dry_run_counts_what_a_cancel_by_tag_changes_across_shards(cluster, engine):
    _, (n1, n2) = cluster
    topic = _topic(n1)
    base = now_ms() + HOUR
    eu = set(_submit(n1, topic, 300, base, tags=["eu", "vip"]))
    us = set(_submit(n2, topic, 100, base, tags=["us"]))
    with n2.client() as c:
        request = _request(CANCEL, topic, "tenant eu closed", tag="eu", opsPerSecond=5000)
        count = c.bulkCount(request)
        request.maxTasks = count
        job = c.bulkStart(request)
    assert count == job.total == 300
    done = _ended(n1, job.jobId, 20)
    assert (done.state, done.changed, done.skipped) == (ttypes.BulkState.DONE, 300, 0)
    cancelled = _rows(engine, "SELECT task_id, shard_id, message FROM job_delay_task_backlog WHERE topic = :t "
                              "AND status = :s", t=topic, s=int(Status.CANCELLED))
    assert {r.task_id for r in cancelled} == eu
    assert len({r.shard_id for r in cancelled}) == 8           # every shard, whichever node owns it
    assert all(r.message == f"cancelled by bulk job {job.jobId}: tenant eu closed" for r in cancelled)
    assert {r.task_id for r in _rows(engine, "SELECT task_id FROM job_delay_task WHERE topic = :t", t=topic)} == us
    audit = _rows(engine, "SELECT actor, target, outcome FROM job_audit WHERE action = 'bulkStart' AND target LIKE :t",
                  t=f"% topic={topic} %")
    assert audit == [("test-admin", f"cancel topic={topic} tag=eu reason=tenant eu closed",
                      f"job {job.jobId} RUNNING 0/300")]


def test_a_reschedule_racing_the_dispatch_moves_each_task_or_lets_it_fire_never_both(cluster, engine):
    """Tasks in the nodes' memory, due while the job runs: each one the job moved does not fire at
    its old time, each one it passed over fired, and the job's count says which is which."""
    _, (n1, n2) = cluster
    topic = _topic(n1)
    collector = Collector("delayq", topic)
    try:
        # Due over 1.8 s; the job's second batch of 150 (in task id order, not due order) runs a
        # second after its first, as tasks of it are being claimed.
        base = now_ms() + 300
        with n1.client() as c:
            ids = [r.taskId for r in c.submitBatch([TaskSpec(topic=topic, dueAtMs=base + 6 * i) for i in range(300)])]
            job = c.bulkStart(_request(RESCHEDULE, topic, "race", shiftMs=HOUR, opsPerSecond=150))
            sentinel = c.submit(TaskSpec(topic=topic, dueAtMs=base + 4000)).taskId
        wait_until(lambda: sentinel in collector.task_ids(), 20, what="the sentinel task")
        fired = set(collector.task_ids()) - {sentinel}
    finally:
        collector.close()
    done = _ended(n1, job.jobId, 10)
    moved = {t for t, due in _rows(engine, "SELECT task_id, due_ms FROM job_delay_task WHERE topic = :t", t=topic)
             if due >= base + HOUR}
    assert moved | fired == set(ids) and not moved & fired
    assert (done.changed, done.skipped) == (len(moved), len(fired))


def test_a_job_whose_node_is_killed_is_finished_by_the_other_with_each_task_moved_once(cluster, engine):
    _, (n1, n2) = cluster
    topic = _topic(n1)
    base = now_ms() + HOUR
    ids = _submit(n1, topic, 600, base)
    with n1.client() as c:
        job = c.bulkStart(_request(RESCHEDULE, topic, "push back an hour", shiftMs=HOUR, opsPerSecond=150))

    def half_way():
        with n1.client() as c:
            j = c.bulkGet(job.jobId)
        return j.changed >= 100 and j.runningOn and j
    running = wait_until(half_way, 15, 0.05, what="the job under way")
    victim, survivor = (n1, n2) if running.runningOn == n1.node_id else (n2, n1)
    victim.kill()
    done = _ended(survivor, job.jobId, 30)
    assert (done.state, done.changed) == (ttypes.BulkState.DONE, 600)
    due = dict(_rows(engine, "SELECT task_id, due_ms FROM job_delay_task WHERE topic = :t", t=topic))
    # Each task moved exactly once: none twice (a batch re-run), none left behind.
    assert due == {task_id: base + i + HOUR for i, task_id in enumerate(ids)}


@pytest.fixture
def bare():
    """A database no node runs: the test runs the batches itself."""
    with fresh_database(8) as db:
        e = dbm.make_engine(config.load({"DELAYQ_MYSQL_URL": db.url}).mysql)
        yield e
        e.dispose()


def _fill(engine, topic: str, now: int, n: int) -> None:
    with engine.begin() as conn:
        conn.execute(tables.task.insert(), [dict(
            task_id=f"{now:011x}{i:016x}", topic=topic, shard_id=i % 8, due_ms=now + HOUR, status=int(Status.DELAY),
            attempt=0, payload=b"", spec_hash=b"0" * 16, max_retries=0, ttr_ms=1000, created_ms=now - 1,
            updated_ms=now) for i in range(n)])


def run_batch(engine, batch: Batch, node: str, now: int, lease_ms: int, read_s: float = bulkbatch.READ_S,
              max_horizon_ms: int = HORIZON_MS) -> BatchResult:
    """A batch as a node of the default horizon runs it."""
    return bulkbatch.run_batch(engine, batch, node, now, lease_ms, read_s, max_horizon_ms=max_horizon_ms)


def _lane(task_id: str, lanes: int) -> int:
    """The lane of a task, as MySQL's CRC32 reckons it (zlib's is the same checksum)."""
    return zlib.crc32(task_id.encode()) % lanes


def _at(job, cursor: str, size: int, lane: int = 0) -> Batch:
    return Batch(job, lane, cursor, size)


def test_a_batch_run_again_or_by_a_node_that_lost_the_job_changes_nothing(bare):
    engine, topic, now = bare, "b.t", now_ms()
    _fill(engine, topic, now, 30)
    jobs = BulkJobs(engine)
    spec = Spec(Action.RESCHEDULE, TaskFilter(topic=topic, status=Status.DELAY), "r", 1000, shift_ms=1000)
    created = jobs.create(spec, "test", now)
    job = jobs.take("a", now, HOUR)
    assert job is not None and job.job_id == created.job_id and job.progress.total == 30
    first = run_batch(engine, _at(job, "", 10), "a", now, HOUR)
    assert first.ours and len(first.changed) == 10
    again = run_batch(engine, _at(job, "", 10), "a", now, HOUR)          # the same batch, from the same old cursor
    assert not again.ours and again.changed == ()
    # Another node takes the job over (the lease lapsed); the first one's next batch changes nothing.
    taken = jobs.take("b", now + 2 * HOUR, HOUR)
    assert taken is not None and taken.progress.cursors == (first.cursor,)
    assert not run_batch(engine, _at(job, first.cursor, 10), "a", now, HOUR).ours
    cursor = first.cursor
    while (r := run_batch(engine, _at(taken, cursor, 7), "b", now, HOUR)).state is State.RUNNING:
        cursor = r.cursor
    assert jobs.get(job.job_id).progress.changed == 30
    assert _rows(engine, "SELECT DISTINCT due_ms FROM job_delay_task WHERE topic = :t", t=topic) == [(now + HOUR + 1000,)]


@pytest.mark.parametrize("action", [Action.RESCHEDULE, Action.CANCEL])
def test_two_lanes_change_their_own_shares_side_by_side_each_task_once(bare, action):
    engine, topic, now = bare, f"b.lanes.{action.value}", now_ms()
    _fill(engine, topic, now, 200)
    jobs = BulkJobs(engine, lanes=2)
    spec = Spec(action, TaskFilter(topic=topic, status=Status.DELAY), "r", 1000,
                shift_ms=1000 if action is Action.RESCHEDULE else None)
    jobs.create(spec, "test", now)
    job = jobs.take("a", now, HOUR)
    assert job is not None and job.progress.cursors == ("", "")
    # The first batch of each lane, both under way at once: the job row is locked only at the end,
    # so neither waits for the other's whole batch, and both commit.
    with engine.connect() as blocker:
        # A task of lane 1's share, locked: lane 1's batch waits on it after lane 0's has begun.
        blocker.exec_driver_sql("BEGIN")
        ids = [f"{now:011x}{i:016x}" for i in range(200)]
        of_lane_1 = next(t for t in ids if _lane(t, 2) == 1)
        blocker.exec_driver_sql(f"SELECT task_id FROM job_delay_task WHERE task_id = '{of_lane_1}' FOR UPDATE")
        results: dict[int, object] = {}
        lane1 = threading.Thread(target=lambda: results.update({1: run_batch(engine, _at(job, "", 50, 1), "a", now,
                                                                                    HOUR)}))
        lane1.start()
        # Lane 1's batch under way: its locking read of its tasks waits on the blocked one.
        wait_until(lambda: _rows(engine, "SELECT COUNT(*) FROM information_schema.processlist WHERE db = DATABASE() "
                                         "AND info LIKE '%FOR UPDATE' AND info LIKE '%shard_id%'")[0][0] >= 1,
                   10, 0.02, what="lane 1's batch under way")
        results[0] = run_batch(engine, _at(job, "", 50, 0), "a", now, HOUR)    # commits while lane 1 waits
        blocker.exec_driver_sql("ROLLBACK")
        lane1.join(30)
    assert results[0].ours and results[1].ours
    assert {_lane(t, 2) for t in results[0].changed} == {0} and {_lane(t, 2) for t in results[1].changed} == {1}
    assert jobs.get(job.job_id).progress.cursors == (results[0].cursor, results[1].cursor)
    _finish(engine, job, [results[0].cursor, results[1].cursor], now)
    done = jobs.get(job.job_id)
    assert (done.state, done.progress.changed, done.progress.skipped) == (State.DONE, 200, 0)
    if action is Action.RESCHEDULE:
        assert _rows(engine, "SELECT DISTINCT due_ms FROM job_delay_task WHERE topic = :t", t=topic) == [
            (now + HOUR + 1000,)]
    else:
        assert _rows(engine, "SELECT COUNT(*) FROM job_delay_task_backlog WHERE topic = :t", t=topic) == [(200,)]


def _finish(engine, job, cursors: list[str], now: int, size: int = 50, node: str = "a") -> None:
    """Runs the job's lanes in turn, a batch each, until it is DONE (at most 100 rounds)."""
    for _ in range(100):
        for lane, cursor in enumerate(cursors):
            if not lane_done(cursor, job.progress.upto):
                r = run_batch(engine, _at(job, cursor, size, lane), node, now, HOUR)
                assert r.ours
                if r.state is State.DONE:
                    return
                cursors[lane] = r.cursor
    raise AssertionError(f"the job did not end: lanes at {cursors}")


def _shifted(engine, topic: str, now: int) -> dict[int, int]:
    """How many tasks of the topic moved by how many seconds."""
    moved: dict[int, int] = {}
    for (due,) in _rows(engine, "SELECT due_ms FROM job_delay_task WHERE topic = :t", t=topic):
        moved[(due - now - HOUR) // 1000] = moved.get((due - now - HOUR) // 1000, 0) + 1
    return moved


def _reschedule(engine, topic: str, now: int, lanes: int, **kw):
    jobs = BulkJobs(engine, lanes=lanes)
    jobs.create(Spec(Action.RESCHEDULE, TaskFilter(topic=topic, status=Status.DELAY), "r", 1000, shift_ms=1000, **kw),
                "test", now)
    job = jobs.take("a", now, HOUR)
    assert job is not None
    return jobs, job


def test_tasks_whose_shard_moves_under_a_job_of_two_lanes_are_changed_once(bare):
    engine, topic, now = bare, "b.moves", now_ms()
    _fill(engine, topic, now, 200)
    jobs, job = _reschedule(engine, topic, now, lanes=2)
    first = [run_batch(engine, _at(job, "", 40, lane), "a", now, HOUR).cursor for lane in (0, 1)]
    with engine.begin() as conn:        # a reshard, a rate limit's spread: every task to another shard
        conn.exec_driver_sql(f"UPDATE job_delay_task SET shard_id = (shard_id + 1) %% 8 WHERE topic = '{topic}'")
    _finish(engine, job, first, now)
    assert _shifted(engine, topic, now) == {1: 200}
    assert jobs.get(job.job_id).progress.changed == 200


def test_a_job_an_earlier_version_moved_on_is_taken_back_without_changing_a_task_twice(bare):
    engine, topic, now = bare, "b.versions", now_ms()
    _fill(engine, topic, now, 200)
    jobs, job = _reschedule(engine, topic, now, lanes=2)
    cursors = [run_batch(engine, _at(job, "", 30, lane), "a", now, HOUR).cursor for lane in (0, 1)]
    # A node of the earlier version takes the job over: it knows only cursor_id (the lanes' highest)
    # and goes on from there over every lane's tasks, by primary key.
    with engine.begin() as conn:
        ids = [r[0] for r in conn.exec_driver_sql(
            f"SELECT task_id FROM job_delay_task WHERE topic = '{topic}' AND task_id > '{max(cursors)}' "
            "ORDER BY task_id LIMIT 50")]
        listed = ",".join(f"'{i}'" for i in ids)
        conn.exec_driver_sql(f"UPDATE job_delay_task SET due_ms = due_ms + 1000 WHERE task_id IN ({listed})")
        conn.exec_driver_sql(f"UPDATE job_bulk SET cursor_id = '{ids[-1]}', changed = changed + 50, "
                             f"lease_owner = 'old' WHERE job_id = '{job.job_id}'")
    taken = jobs.take("a", now + 2 * HOUR, HOUR)
    assert taken is not None and taken.progress.cursors == (ids[-1], ids[-1])
    _finish(engine, taken, list(taken.progress.cursors), now)
    shifted = _shifted(engine, topic, now)
    assert set(shifted) <= {0, 1}, f"tasks changed twice: {shifted}"      # passed over, maybe; never twice
    assert shifted[1] == jobs.get(job.job_id).progress.changed


def test_a_job_by_key_prefix_reads_the_prefix_by_key_and_changes_each_task_once_across_a_take_over(bare):
    # The prefix's tasks, one in three, are spread among another topic's and other keys' by task id:
    # a walk by task id would read them all.
    engine, topic, now = bare, "b.bykey", now_ms()
    with engine.begin() as conn:
        conn.execute(tables.task.insert(), [dict(
            task_id=f"{now:011x}{i:016x}", topic=topic if i % 2 else "b.other", shard_id=i % 8, due_ms=now + HOUR,
            status=int(Status.DELAY), attempt=0, payload=b"", spec_hash=b"0" * 16, max_retries=0, ttr_ms=1000,
            created_ms=now - 1, updated_ms=now, task_key=f"{'acct-7' if i % 3 == 0 else 'acct-8'}/{i}".encode())
            for i in range(1200)])
        conn.exec_driver_sql("ANALYZE TABLE job_delay_task")
    wanted = {f"{now:011x}{i:016x}" for i in range(1200) if i % 2 and i % 3 == 0}
    jobs = BulkJobs(engine, lanes=2)
    jobs.create(Spec(Action.RESCHEDULE, TaskFilter(topic=topic, status=Status.DELAY, key_prefix=b"acct-7/"), "r", 1000,
                     shift_ms=1000), "test", now)
    job = jobs.take("a", now, HOUR)
    assert job is not None and job.progress.total == len(wanted) == 200
    reads: list[tuple[str, object]] = []

    def seen(conn, cursor, statement, parameters, context, executemany):
        if "FORCE INDEX (idx_topic_key)" in statement:
            reads.append((statement, parameters))
    sqlalchemy.event.listen(engine, "before_cursor_execute", seen)
    try:
        first = [run_batch(engine, _at(job, job.progress.cursors[lane], 30, lane), "a", now, HOUR) for lane in (0, 1)]
    finally:
        sqlalchemy.event.remove(engine, "before_cursor_execute", seen)
    # Node a's lease lapses; node b takes the job over and goes on from each lane's place.
    taken = jobs.take("b", now + 2 * HOUR, HOUR)
    assert taken is not None and taken.progress.cursors == (first[0].cursor, first[1].cursor)
    _finish(engine, taken, list(taken.progress.cursors), now, size=30, node="b")
    done = jobs.get(job.job_id)
    assert (done.state, done.progress.changed, done.progress.skipped) == (State.DONE, 200, 0)
    moved = {r[0] for r in _rows(engine, "SELECT task_id FROM job_delay_task WHERE due_ms = :d", d=now + HOUR + 1000)}
    assert moved == wanted
    assert _rows(engine, "SELECT COUNT(*) FROM job_delay_task WHERE due_ms NOT IN (:a, :b)", a=now + HOUR,
                 b=now + HOUR + 1000) == [(0,)]
    # Each lane's read was a range of the key's index from its place, not a sort of the prefix's tasks.
    assert len(reads) == 2
    with engine.connect() as conn:
        raw = conn.connection.dbapi_connection
        assert raw is not None
        for statement, parameters in reads:
            with raw.cursor() as cur:
                cur.execute("EXPLAIN " + statement, parameters)
                names = [d[0] for d in cur.description]
                plan = [dict(zip(names, r)) for r in cur.fetchall()]
            assert [(p["key"], "filesort" in (p["Extra"] or "")) for p in plan] == [("idx_topic_key", False)], plan


def test_a_node_of_an_earlier_version_finds_a_job_by_key_at_its_end_and_changes_nothing(bare):
    engine, topic, now = bare, "b.bykey.old", now_ms()
    _fill(engine, topic, now, 20)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"UPDATE job_delay_task SET task_key = CONCAT('k/', task_id) WHERE topic = '{topic}'")
    jobs = BulkJobs(engine, lanes=2)
    job = jobs.create(Spec(Action.CANCEL, TaskFilter(topic=topic, status=Status.DELAY, key_prefix=b"k/"), "r", 1000),
                      "test", now)
    row = _rows(engine, "SELECT cursor_id, lane_cursors, upto_id FROM job_bulk WHERE job_id = :j", j=job.job_id)[0]
    # What an earlier version reads: cursor_id, or each lane's cursor, at or past the snapshot's last
    # task id: every lane done, nothing to change.
    assert row.cursor_id >= row.upto_id and all(c >= row.upto_id for c in json.loads(row.lane_cursors))


def test_two_lanes_racing_for_the_last_of_the_count_change_exactly_the_count(bare):
    engine, topic, now = bare, "b.count", now_ms()
    _fill(engine, topic, now, 200)
    jobs, job = _reschedule(engine, topic, now, lanes=2, max_tasks=150)
    assert job.progress.total == 150

    run_lanes(engine, job, "a", 7, lambda: now, HOUR, max_batches=50, timeout_s=60)
    done = jobs.get(job.job_id)
    assert (done.state, done.progress.changed) == (State.DONE, 150)
    assert _shifted(engine, topic, now) == {0: 50, 1: 150}


def _admin_calls(jobs: BulkJobs) -> BulkCalls:
    """The node's bulk calls on these jobs, called as an admin."""
    admin = Client("root", "digest", grants=frozenset({(Permission.ADMIN, "*")}))
    access = Access(Clients(admin), Metrics(), enabled=True)  # type: ignore[arg-type]
    access.load()
    call_as("root")
    return BulkCalls(jobs, access, CallAnswers(Metrics()), SYSTEM_CLOCK, default_rate=2000,
                     max_horizon_ms=86_400_000)


def test_a_count_and_a_read_of_a_lanes_next_tasks_are_stopped_by_the_server_at_their_limits(bare):
    """Past its limit the server stops the statement: a count so stopped is answered InvalidRequest
    on the filter, a batch's read so stopped changes nothing; neither runs on after the node's 5 s
    read timeout gave up on it, and every connection goes back to the pool with its own limit."""
    engine, now = bare, now_ms()
    filler = fill.long_engine(engine.url.render_as_string(hide_password=False))
    try:
        fill.pending(filler, "b.big", 200_000, 8, now + HOUR, HOUR, tags="bench", now_ms=now)
        with filler.begin() as conn:     # one task of the tag, the last one: a walk by task id reads them all
            conn.exec_driver_sql("UPDATE job_delay_task SET tags = 'bench,rare' WHERE task_id = 'pk0000199999'")
    finally:
        filler.dispose()
    request = ttypes.BulkRequest(action=ttypes.BulkAction.CANCEL, filter=ttypes.TaskFilter(topic="b.big", tag="rare"),
                                 reason="r")
    with pytest.raises(ttypes.InvalidRequest) as refused:
        _admin_calls(BulkJobs(engine, count_s=0.001)).bulkCount(request)
    assert refused.value.field == "filter" and "more tasks than MySQL counts" in refused.value.reason
    calls = _admin_calls(BulkJobs(engine))
    assert calls.bulkCount(request) == 1                # within the usual limit
    job_id = calls.bulkStart(request).jobId
    jobs = BulkJobs(engine)
    job = jobs.take("a", now_ms(), HOUR)
    assert job is not None and job.job_id == job_id
    with pytest.raises(StatementStopped):
        run_batch(engine, Batch(job, 0, "", 500), "a", now, HOUR, read_s=0.001)
    assert jobs.get(job_id).progress.cursors == ("",) and jobs.get(job_id).progress.changed == 0
    held = [engine.connect() for _ in range(engine.pool.size() + engine.pool.overflow())]
    try:                                               # every pooled connection is back at the server's limit
        assert {c.exec_driver_sql("SELECT @@SESSION.max_statement_time").scalar() for c in held} == {
            held[0].exec_driver_sql("SELECT @@GLOBAL.max_statement_time").scalar()}
    finally:
        for c in held:
            c.close()
    assert run_batch(engine, Batch(job, 0, "", 500), "a", now, HOUR).changed == ("pk0000199999",)


def test_a_task_created_after_the_jobs_time_by_a_node_whose_clock_is_behind_is_never_beyond_the_count(bare):
    """The count takes every matching task; the batches only those created by the job's time. A task
    created 'later' by a clock ahead is counted and left (skipped); never more than the count."""
    engine, topic, now = bare, "b.skew", now_ms()
    _fill(engine, topic, now, 10)
    with engine.begin() as conn:
        conn.exec_driver_sql(f"UPDATE job_delay_task SET created_ms = {now + 60_000} "
                             f"WHERE task_id = '{now:011x}{3:016x}'")
    jobs = BulkJobs(engine, lanes=2)
    jobs.create(Spec(Action.CANCEL, TaskFilter(topic=topic, status=Status.DELAY), "r", 1000), "test", now)
    job = jobs.take("a", now, HOUR)
    assert job is not None and job.progress.total == 10
    _finish(engine, job, list(job.progress.cursors), now)
    done = jobs.get(job.job_id)
    assert (done.state, done.progress.changed, done.progress.skipped) == (State.DONE, 9, 1)
    assert _rows(engine, "SELECT task_id FROM job_delay_task WHERE topic = :t", t=topic) == [(f"{now:011x}{3:016x}",)]


def test_a_stopped_job_leaves_a_definite_count(cluster, engine):
    node = _live(cluster)
    topic = _topic(node)
    _submit(node, topic, 400, now_ms() + HOUR)
    with node.client() as c:
        job = c.bulkStart(_request(CANCEL, topic, "wrong filter", opsPerSecond=40))
        wait_until(lambda: c.bulkGet(job.jobId).changed >= 40, 15, 0.05, what="the job under way")
        stopped = c.bulkStop(job.jobId)
        assert stopped.state == ttypes.BulkState.STOPPED and 40 <= stopped.changed < 400
        assert c.bulkGet(job.jobId).changed == stopped.changed
        assert c.bulkStop(job.jobId).changed == stopped.changed      # stopping again changes nothing
    gone = _rows(engine, "SELECT COUNT(*) FROM job_delay_task_backlog WHERE topic = :t", t=topic)[0][0]
    live = _rows(engine, "SELECT COUNT(*) FROM job_delay_task WHERE topic = :t", t=topic)[0][0]
    assert (gone, live) == (stopped.changed, 400 - stopped.changed)


def test_a_redrive_sends_failed_tasks_again(cluster, engine):
    node = _live(cluster)
    topic = _topic(node)
    ids = _submit(node, topic, 20, now_ms() + HOUR)
    with engine.begin() as conn:        # as if each had failed its last attempt
        conn.execute(sqlalchemy.text(
            "INSERT INTO job_delay_task_backlog (task_id, topic, shard_id, due_ms, status, attempt, payload, spec_hash, "
            "max_retries, ttr_ms, created_ms, finished_ms, message, dead_letter) SELECT task_id, topic, shard_id, "
            "due_ms, :f, 1, payload, spec_hash, max_retries, ttr_ms, created_ms, :now, 'failed', 0 "
            "FROM job_delay_task WHERE topic = :t"), dict(f=int(Status.FAILED), now=now_ms(), t=topic))
        conn.execute(sqlalchemy.text("DELETE FROM job_delay_task WHERE topic = :t"), dict(t=topic))
    with node.client() as c:
        assert c.bulkCount(_request(REDRIVE, topic)) == 20
        job = c.bulkStart(_request(REDRIVE, topic, "consumer fixed"))
    assert _ended(node, job.jobId, 20).changed == 20
    live = dict(_rows(engine, "SELECT task_id, max_retries FROM job_delay_task WHERE topic = :t", t=topic))
    assert set(live) == set(ids)


@pytest.mark.parametrize("request_, field", [
    (dict(reason=""), "reason"), (dict(reason="x" * 256), "reason"), (dict(opsPerSecond=0), "opsPerSecond"),
    (dict(opsPerSecond=100_001), "opsPerSecond"), (dict(action=RESCHEDULE), "shiftMs"),
    (dict(action=RESCHEDULE, shiftMs=1, dueAtMs=1), "shiftMs"), (dict(shiftMs=1000), "shiftMs"),
    (dict(tag="a,b"), "filter.tag"), (dict(keyPrefix="k" * 256), "filter.keyPrefix"), (dict(action=9), "action")])
def test_bad_requests_are_declared_errors_naming_the_field(cluster, request_, field):
    node = _live(cluster)
    kw = {"reason": "r", "action": CANCEL, **request_}
    with node.client() as c:
        with pytest.raises(ttypes.InvalidRequest) as e:
            c.bulkStart(_request(kw.pop("action"), "b.topic", **kw))
    assert e.value.field == field


def test_the_command_counts_first_and_refuses_to_start_without_yes(cluster):
    node = _live(cluster)
    topic = _topic(node)
    _submit(node, topic, 5, now_ms() + HOUR)

    def delayq(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "delayq", "tasks", "bulk", "cancel", topic, "--reason", "r",
                               "--endpoint", node.endpoint, "--json", *args], env=node.env, capture_output=True,
                              text=True, timeout=60, stdin=subprocess.DEVNULL)
    dry = delayq("--dry-run")
    assert (dry.returncode, json.loads(dry.stdout)) == (0, {"count": 5})
    refused = delayq()
    assert refused.returncode == 2 and "5 tasks match: add --yes" in json.loads(refused.stdout)["error"]
    done = delayq("--yes")
    assert done.returncode == 0, done.stderr
    assert {k: json.loads(done.stdout)[k] for k in ("state", "changed", "total")} == {
        "state": "DONE", "changed": 5, "total": 5}


def test_a_reschedule_never_takes_a_task_past_the_horizon(cluster, engine):
    """The nodes' horizon is DELAYQ_MAX_HORIZON_MS's default, 30 days. An instant beyond it is
    refused at the request, as a submit's; a shift leaves each task it would take past it, counted
    as skipped, and says so — also when repeated, which adds up."""
    node = _live(cluster)
    topic = _topic(node)
    now = now_ms()
    near = _submit(node, topic, 3, now + HOUR, tags=["us"])
    far = _submit(node, topic, 2, now + 20 * 24 * HOUR, tags=["us"])
    before = dict(_rows(engine, "SELECT task_id, due_ms FROM job_delay_task WHERE topic = :t", t=topic))

    def delayq(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "delayq", "tasks", "bulk", "reschedule", topic, "--tag", "us",
                               "--endpoint", node.endpoint, "--yes", *args], env=node.env, capture_output=True,
                              text=True, timeout=60, stdin=subprocess.DEVNULL)
    refused = delayq("--at", "2099-01-01T00:00", "--reason", "far")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "dueAtMs: is beyond the horizon of 2592000000 ms from now" in refused.stdout + refused.stderr
    with node.client() as c:
        with pytest.raises(ttypes.InvalidRequest) as e:
            c.bulkStart(_request(RESCHEDULE, topic, dueAtMs=now_ms() + 31 * 24 * HOUR))
        assert e.value.field == "dueAtMs"
    assert dict(_rows(engine, "SELECT task_id, due_ms FROM job_delay_task WHERE topic = :t", t=topic)) == before

    shifted = delayq("--later", "15d", "--reason", "push back")
    assert shifted.returncode == 0, shifted.stderr
    assert "a task the shift would take past the horizon is left as it is (skipped)" in shifted.stdout
    assert ("changed 3 of 5, 2 left as they were: fired or changed meanwhile, or the shift would take them past "
            "the horizon") in shifted.stdout
    due = dict(_rows(engine, "SELECT task_id, due_ms FROM job_delay_task WHERE topic = :t", t=topic))
    assert due == {**{t: before[t] + 15 * 24 * HOUR for t in near}, **{t: before[t] for t in far}}

    again = delayq("--later", "15d", "--reason", "push back again", "--json")       # 30 days and an hour out
    assert again.returncode == 0, again.stderr
    assert {k: json.loads(again.stdout)[k] for k in ("state", "changed", "skipped")} == {
        "state": "DONE", "changed": 0, "skipped": 5}
    assert dict(_rows(engine, "SELECT task_id, due_ms FROM job_delay_task WHERE topic = :t", t=topic)) == due


def test_a_shift_changes_each_task_up_to_the_horizon_from_its_batchs_time_and_counts_the_rest_skipped(bare):
    engine, topic, now = bare, "b.horizon", now_ms()
    _fill(engine, topic, now, 30)          # due now + HOUR; a third of them 4 s later, a third 10 s later
    ids = [f"{now:011x}{i:016x}" for i in range(30)]
    with engine.begin() as conn:
        for i, task_id in enumerate(ids):
            conn.exec_driver_sql(f"UPDATE job_delay_task SET due_ms = due_ms + {(0, 4000, 10_000)[i % 3]} "
                                 f"WHERE task_id = '{task_id}'")
    jobs, job = _reschedule(engine, topic, now, lanes=2)          # shift_ms 1000
    # The horizon from the batches' time ends 5 s after the hour: due + 1 s is within it for the
    # first two thirds (the second exactly at its end), past it for the last.
    later = now + 1000
    cursors = list(job.progress.cursors)
    for _ in range(100):
        for lane, cursor in enumerate(cursors):
            if not lane_done(cursor, job.progress.upto):
                cursors[lane] = run_batch(engine, _at(job, cursor, 7, lane), "a", later, HOUR,
                                          max_horizon_ms=HOUR + 4000).cursor
        if jobs.get(job.job_id).state is State.DONE:
            break
    done = jobs.get(job.job_id)
    assert (done.state, done.progress.changed, done.progress.skipped) == (State.DONE, 20, 10)
    due = dict(_rows(engine, "SELECT task_id, due_ms FROM job_delay_task WHERE topic = :t", t=topic))
    assert due == {t: now + HOUR + (1000, 5000, 10_000)[i % 3] for i, t in enumerate(ids)}


def _cli(node, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "delayq", *args, "--endpoint", node.endpoint], env=node.env,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_a_task_a_job_cancelled_says_so_and_a_stop_of_the_ended_job_says_it_had_ended(cluster):
    node = _live(cluster)
    topic = _topic(node)
    ids = _submit(node, topic, 3, now_ms() + HOUR)
    done = _cli(node, "tasks", "bulk", "cancel", topic, "--reason", "tenant left", "--yes", "--json")
    assert done.returncode == 0, done.stderr
    job_id = json.loads(done.stdout)["jobId"]
    with node.client() as c:
        assert c.get(ids[0]).message == f"cancelled by bulk job {job_id}: tenant left"
    shown = _cli(node, "tasks", "get", ids[0])
    assert shown.stdout.splitlines()[1] == f"  ended: cancelled by bulk job {job_id}: tenant left"
    again = _cli(node, "tasks", "bulk", "stop", job_id)
    assert again.returncode == 1
    assert again.stdout.splitlines()[0].startswith(f"job {job_id}  DONE")
    assert again.stderr.strip() == f"job {job_id} had already ended (DONE): nothing to stop"
    as_json = _cli(node, "tasks", "bulk", "stop", job_id, "--json")
    assert as_json.returncode == 1
    assert {k: json.loads(as_json.stdout)[k] for k in ("state", "changed", "alreadyEnded")} == {
        "state": "DONE", "changed": 3, "alreadyEnded": True}


def test_the_command_following_a_job_that_is_stopped_shows_where_it_stopped(cluster):
    node = _live(cluster)
    topic = _topic(node)
    _submit(node, topic, 400, now_ms() + HOUR)
    following = subprocess.Popen([sys.executable, "-m", "delayq", "tasks", "bulk", "cancel", topic, "--reason", "r",
                                  "--rate", "20", "--yes", "--endpoint", node.endpoint], env=node.env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        first = following.stdout.readline()        # job ID: cancel 400 tasks at 20/s
        job_id = first.split()[1].rstrip(":")
        with node.client() as c:
            wait_until(lambda: c.bulkGet(job_id).changed >= 20, 15, 0.05, what="the job under way")
            stopped = c.bulkStop(job_id)
            assert stopped.state == ttypes.BulkState.STOPPED
        out, err = following.communicate(timeout=30)
    finally:
        following.kill()
    assert following.returncode == 1
    # Without a terminal, the bar prints its label whenever it changes: last, the job's state.
    assert err.splitlines() == [job_id, f"{job_id} STOPPED"], err
    assert out.splitlines()[0].startswith(f"job {job_id}  STOPPED")
    assert out.splitlines()[1].startswith(f"  changed {stopped.changed} of 400")
    again = _cli(node, "tasks", "bulk", "stop", job_id)
    assert (again.returncode, again.stdout.splitlines()[-1]) == (0, f"job {job_id} had been stopped already")


def test_jobs_list_newest_first_in_pages_and_by_topic(bare):
    jobs = BulkJobs(bare)
    now = now_ms()
    made = [jobs.create(Spec(Action.CANCEL, TaskFilter(topic=t, status=Status.DELAY), "r", 1000), "test", now + i)
            for i, t in enumerate(["x.a", "x.b", "x.a", "x.b", "x.a"])]
    newest = [j.job_id for j in reversed(made)]
    assert [j.job_id for j in jobs.list(10)] == newest
    first = jobs.list(2)
    assert [j.job_id for j in first] + [j.job_id for j in jobs.list(10, before=first[-1].job_id)] == newest
    assert [j.job_id for j in jobs.list(10, topics=frozenset({"x.b"}))] == [made[3].job_id, made[1].job_id]
