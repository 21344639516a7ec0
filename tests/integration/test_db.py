"""The MySQL engines (delayq.db) against the real MariaDB: what a pooled connection carries from one
checkout to the next, what a submit group writes (through the store, and through the handler for
groups of calls), and how often the service registry reads."""
from __future__ import annotations

import contextlib
import dataclasses
import threading
import uuid

import pymysql
import pytest
import sqlalchemy.event
import sqlalchemy.exc

from delayq import config, db as dbm
from delayq.client import TaskSpec
from delayq.client.gen.delayq_thrift import ttypes
from delayq.clock import SYSTEM_CLOCK
from delayq.errors import ConfigError, StoreUnavailable, UnknownTopic
from delayq.nodes.memory.delayqueue import DelayQueue
from delayq.nodes.front.access import Access
from delayq.nodes.front.errors import CallAnswers
from delayq.nodes.front.newtasks import NewTasks, SubmitRules
from delayq.nodes.front.placing import Placing
from delayq.nodes.front.submitpath import SubmitGate, SubmitPath
from delayq.nodes.metrics import Metrics
from delayq.nodes.cluster.ownership import Ownership
from delayq.nodes.cluster.services import ServiceRegistry
from delayq.nodes.validation import Limits, ServiceSpec
from delayq.store.clients import ClientStore
from delayq.store.submits import TaskWriter
from delayq.store.values import NewTask

pytestmark = pytest.mark.integration


@pytest.fixture
def engines(database):
    settings = config.load({"DELAYQ_MYSQL_URL": database.url})
    one = dataclasses.replace(settings.mysql, pool_size=1)       # every checkout is the same connection
    engine, writes = dbm.make_engine(one), dbm.make_engine(one, autocommit=True)
    url = engine.url
    other = pymysql.connect(host=url.host, port=url.port or 3306, user=url.username, password=url.password or "",
                            database=url.database, autocommit=True)
    other.cursor().execute("CREATE TABLE IF NOT EXISTS pool_probe (a INT PRIMARY KEY, b INT) ENGINE=InnoDB")
    other.cursor().execute("REPLACE INTO pool_probe VALUES (1, 0)")
    yield engine, writes, other.cursor()
    other.cursor().execute("DROP TABLE pool_probe")
    other.close()
    engine.dispose()
    writes.dispose()


def _session_rollbacks(engine) -> int:
    with engine.connect() as conn:
        return int(conn.exec_driver_sql("SHOW SESSION STATUS LIKE 'Com_rollback'").all()[0][1])


def _b(engine) -> int:
    with engine.connect() as conn:
        return conn.exec_driver_sql("SELECT b FROM pool_probe WHERE a = 1").scalar_one()


def test_a_committed_transaction_returns_its_connection_without_a_rollback(engines):
    engine, _, _ = engines
    before = _session_rollbacks(engine)              # this checkout reads, so it is rolled back: 1
    for _ in range(10):
        with engine.begin() as conn:
            conn.exec_driver_sql("UPDATE pool_probe SET b = b + 1 WHERE a = 1")
    assert _session_rollbacks(engine) - before == 1
    assert _b(engine) == 10


@pytest.mark.parametrize("use", ["read", "read in begin", "commit then read", "failed write"])
def test_no_snapshot_or_write_outlives_its_checkout(engines, use):
    engine, _, other = engines
    _b(engine)
    with pytest.raises(ValueError) if use == "failed write" else contextlib.nullcontext():
        with (engine.begin() if use in ("read in begin", "failed write") else engine.connect()) as conn:
            if use == "commit then read":
                conn.exec_driver_sql("UPDATE pool_probe SET b = 5 WHERE a = 1")
                conn.commit()
            if use == "failed write":
                conn.exec_driver_sql("UPDATE pool_probe SET b = 7 WHERE a = 1")
                raise ValueError("the transaction fails")
            conn.exec_driver_sql("SELECT b FROM pool_probe").all()
    other.execute("UPDATE pool_probe SET b = 100 WHERE a = 1")
    assert _b(engine) == 100            # a snapshot kept from before would still say 0 or 5


def _task(i: int, payload: bytes, prefix: str = "pool") -> NewTask:
    return NewTask(f"{prefix}-{i}", "t", 0, 10**12 + i, payload, b"h" * 16, 3, 0, 1, client_id=False)


def test_a_group_too_large_for_one_statement_is_written_whole_or_not_at_all(engines):
    engine, writes, other = engines
    store = TaskWriter(writes)
    big = [_task(i, bytes([i % 256]) * 60_000) for i in range(40)]        # about 4.8 MB in hex: 5 statements
    assert all(s.created for s in store.insert_groups([big])[0])
    other.execute("SELECT COUNT(*), SUM(LENGTH(payload)) FROM job_delay_task WHERE task_id LIKE 'pool-%'")
    assert other.fetchone() == (40, 40 * 60_000)
    clash = [_task(100 + i, b"x" * 60_000) for i in range(30)] + [_task(0, b"again")]   # the last one exists
    with pytest.raises(sqlalchemy.exc.IntegrityError):     # the duplicate key
        store.insert_groups([clash])
    other.execute("SELECT COUNT(*) FROM job_delay_task WHERE task_id LIKE 'pool-%'")
    assert other.fetchone() == (40,)
    assert writes.pool.checkedout() == 0


def _count(other, like: str) -> int:
    other.execute("SELECT COUNT(*) FROM job_delay_task WHERE task_id LIKE %s", (like,))
    return other.fetchone()[0]


def test_tasks_sent_part_by_part_commit_together_when_the_block_ends(engines):
    engine, writes, other = engines
    store = TaskWriter(writes)
    with store.inserting() as send:
        for first in range(0, 300, 100):
            send([_task(1000 + i, b"p", "part") for i in range(first, first + 100)])
            assert _count(other, "part-1%") == 0            # another connection sees none before the end
    assert _count(other, "part-1%") == 300
    assert writes.pool.checkedout() == 0


@pytest.mark.parametrize("failure", ["the caller", "a statement", "the connection"])
def test_tasks_sent_part_by_part_are_not_written_when_the_block_fails(engines, failure):
    engine, writes, other = engines
    store = TaskWriter(writes)
    prefix = failure.split()[1]
    with writes.connect() as conn:                           # the pool's one connection
        connection_id = conn.exec_driver_sql("SELECT CONNECTION_ID()").scalar_one()
    expected = {"the caller": ValueError, "a statement": pymysql.err.IntegrityError,
                "the connection": StoreUnavailable}[failure]
    with pytest.raises(expected):
        with store.inserting() as send:
            send([_task(2000 + i, b"p", prefix) for i in range(100)])
            send([_task(2100 + i, b"p", prefix) for i in range(100)])
            if failure == "the caller":
                raise ValueError("a task of the next part is refused")
            if failure == "the connection":
                other.execute(f"KILL {connection_id}")
            else:
                send([_task(2000, b"again", prefix)])        # a duplicate key: the statement fails
            send([_task(2200 + i, b"p", prefix) for i in range(100)])
    assert _count(other, f"{prefix}-%") == 0
    # the pool serves the next submits (on a new connection after a kill)
    assert all(s.created for s in store.insert_groups([[_task(2300, b"q", prefix)]])[0])
    assert _count(other, f"{prefix}-%") == 1
    assert writes.pool.checkedout() == 0


def test_a_missing_table_says_to_migrate(engines):
    engine, _, _ = engines
    with pytest.raises(ConfigError, match="run `delayq db migrate`"):
        with dbm.unavailable_on_failure(), engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1 FROM job_delay_task_not_there")


def test_a_reread_that_began_before_a_registration_leaves_the_new_topic_known(engines):
    engine = sqlalchemy.create_engine(engines[0].url, pool_size=2)     # the re-read's and the registration's
    registry = ServiceRegistry(engine, SYSTEM_CLOCK)
    registry.refresh()
    topic = f"t.{uuid.uuid4().hex[:10]}"
    read, go = threading.Event(), threading.Event()

    def hold(conn, cursor, statement, *args):
        # The stale re-read has its rows (read before the registration), not yet in its cache.
        if threading.current_thread().name == "stale-reread" and "job_callback_service" in statement:
            read.set()
            go.wait(5)
    sqlalchemy.event.listen(engine, "after_cursor_execute", hold)
    stale = threading.Thread(target=registry.refresh, name="stale-reread")
    stale.start()
    try:
        assert read.wait(5)
        registry.upsert(ServiceSpec(topic, "delayq", topic))
    finally:
        go.set()
        stale.join(5)
        sqlalchemy.event.remove(engine, "after_cursor_execute", hold)
        engine.dispose()
    assert registry.get(topic).topic == topic


def test_an_unreachable_mysql_is_told_and_a_refused_statement_or_lock_conflict_is_not(engines):
    engine, _, other = engines
    told = []
    dbm.on_unreachable(engine, lambda: told.append(1))
    with pytest.raises(StoreUnavailable):
        with dbm.unavailable_on_failure(), engine.connect() as conn:
            conn.exec_driver_sql("SET SESSION innodb_lock_wait_timeout = 1")
            other.execute("BEGIN")
            other.execute("UPDATE pool_probe SET b = b + 1 WHERE a = 1")
            try:
                conn.exec_driver_sql("UPDATE pool_probe SET b = b + 1 WHERE a = 1")     # 1205: a lock conflict
            finally:
                other.execute("ROLLBACK")
    with pytest.raises(ConfigError):
        with dbm.unavailable_on_failure(), engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1 FROM job_delay_task_not_there")
    assert told == []
    with engine.connect() as conn:       # the connection MySQL ends is an outage seen by this engine
        mine = conn.exec_driver_sql("SELECT CONNECTION_ID()").scalar_one()
        other.execute(f"KILL {int(mine)}")
        with pytest.raises(sqlalchemy.exc.OperationalError):
            conn.exec_driver_sql("SELECT 1")
    assert told
    gone = sqlalchemy.create_engine(engine.url.set(port=1), connect_args={"connect_timeout": 2})
    dbm.on_unreachable(gone, lambda: told.append(2))
    with pytest.raises(sqlalchemy.exc.OperationalError):
        gone.connect()
    assert told[-1] == 2


@pytest.fixture
def handler(database):
    """A node's submit path on the real MySQL, with the topic "g.t" registered."""
    settings = config.load({"DELAYQ_MYSQL_URL": database.url})
    engine, writes = dbm.make_engine(settings.mysql), dbm.make_engine(settings.mysql, autocommit=True)
    services = ServiceRegistry(engine, SYSTEM_CLOCK)
    services.upsert(ServiceSpec("g.t", "delayq", "g.t"))
    ownership = Ownership("n1")
    ownership.set({s: 1 for s in range(database.shards)}, range(database.shards))
    metrics = Metrics()
    access = Access(ClientStore(engine), metrics, enabled=False)       # the write path alone
    placing = Placing(DelayQueue(SYSTEM_CLOCK), ownership, window_ms=60_000)
    yield SubmitPath(SubmitGate(access), NewTasks(services, placing, SubmitRules(Limits(1024, 86_400_000), 1000)),
                     TaskWriter(writes), placing, CallAnswers(metrics), SYSTEM_CLOCK)
    engine.dispose()
    writes.dispose()


def _inserts(other) -> int:
    other.execute("SHOW GLOBAL STATUS LIKE 'Com_insert'")
    return int(other.fetchone()[1])


def _spec(payload: bytes, **fields) -> TaskSpec:
    return TaskSpec(topic="g.t", delayMs=3_600_000, payload=payload, **fields)


def test_a_group_of_many_single_submits_is_written_in_a_few_statements(engines, handler):
    _, _, other = engines
    before = _inserts(other)
    refs = [one for one, in handler.submit_many([([_spec(b"s%d" % i)], False, None) for i in range(300)])]
    assert _inserts(other) - before <= 5             # 3 parts, give or take another client's
    assert all(r.created for r in refs) and len({r.taskId for r in refs}) == 300
    other.execute("SELECT COUNT(*) FROM job_delay_task WHERE topic = 'g.t' AND payload LIKE 's%'")
    assert other.fetchone() == (300,)


def test_a_refused_call_in_a_large_group_is_refused_alone(engines, handler):
    _, _, other = engines
    bad = [_spec(b"b%d" % i) for i in range(100)]
    bad[50].maxRetries = -1
    out = handler.submit_many([([_spec(b"a%d" % i) for i in range(200)], True, None), (bad, True, None),
                               ([TaskSpec(topic="nobody", delayMs=1)], False, None)]
                              + [([_spec(b"c%d" % i)], False, None) for i in range(10)])
    assert len(out[0]) == 200 and all(r.created for r in out[0])
    assert isinstance(out[1], ttypes.InvalidTask) and (out[1].index, out[1].field) == (50, "maxRetries")
    assert isinstance(out[2], ttypes.UnknownTopic)
    assert all(len(refs) == 1 and refs[0].created for refs in out[3:])
    other.execute("SELECT LEFT(payload, 1), COUNT(*) FROM job_delay_task WHERE topic = 'g.t' "
                  "AND LEFT(payload, 1) IN ('a', 'b', 'c') GROUP BY 1 ORDER BY 1")
    assert other.fetchall() == ((b"a", 200), (b"c", 10))


def test_unknown_topics_in_a_loop_reread_the_services_at_most_once_per_tenth_of_a_second(database):
    settings = config.load({"DELAYQ_MYSQL_URL": database.url})
    engine = dbm.make_engine(settings.mysql)
    clock = _StepClock()
    services = ServiceRegistry(engine, clock)
    reads = []
    sqlalchemy.event.listen(engine, "before_cursor_execute",
                            lambda _c, _cur, sql, *_a: reads.append(sql) if "callback_service" in sql else None)
    try:
        services.refresh()
        reads.clear()
        for i in range(500):                              # a client flooding unknown topics
            with pytest.raises(UnknownTopic):
                services.get(f"nobody.{i}")
            clock.t += 0.001
        assert 4 <= len(reads) <= 6                          # 0.5 s of them: one read per 0.1 s
        # Registered by another node (straight into MySQL): found once 0.1 s have passed.
        ServiceRegistry(engine, clock).upsert(ServiceSpec("elsewhere.t", "delayq", "elsewhere.t"))
        clock.t += 0.1
        assert services.get("elsewhere.t").routing_key == "elsewhere.t"
    finally:
        engine.dispose()


class _StepClock:
    def __init__(self):
        self.t = 1000.0

    def monotonic(self) -> float:
        return self.t

    def now_ms(self) -> int:
        return int(self.t * 1000)
