"""Fixtures for integration tests against the real ZooKeeper, MariaDB/MySQL and RabbitMQ.

`scripts/test.sh` brings the services up first; here each test module gets a database of its own,
nodes run as real `delayq node` processes (so they can be killed), and a Collector consumes a
RabbitMQ queue on its own thread, stamping each message with its receive time.
"""
from __future__ import annotations

import collections
import contextlib
import logging
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import pika
import pytest

from delayq import config, db as dbm
from delayq.client import CallbackService
from delayq.client.gen.delayq_thrift import ttypes
from delayq.testing.cluster import Database, Node, fresh_database, free_port, node_env, now_ms, wait_for  # noqa: F401
from delayq.store.clients import ClientStore
from delayq.testing import security
# A failed test's report says what its nodes logged and whether this process stalled (hooks).
from delayq.testing.reports import (pytest_configure, pytest_runtest_makereport,  # noqa: F401
                                    pytest_runtest_setup, pytest_unconfigure)
from delayq.testing.services import AMQP_URL, ZK_HOSTS  # noqa: F401  (tests import them from here)
from delayq.testing.services import broker_queues, sweep_queues


# ---- the broker after the session ----------------------------------------------------------------

_QUEUES_BEFORE = pytest.StashKey[dict]()


def pytest_collection_finish(session: pytest.Session) -> None:
    """With integration tests to run, note the broker's queues before them (see sweep_queues)."""
    if any(item.get_closest_marker("integration") for item in session.items):
        session.config.stash[_QUEUES_BEFORE] = broker_queues()


def pytest_sessionfinish(session: pytest.Session) -> None:
    before = session.config.stash.get(_QUEUES_BEFORE, None)
    if before is not None:
        sweep_queues(before)

# thrift logs an ERROR of its own for every connect that fails, without the reason; the client's
# error says where and why, and tries the next node.
logging.getLogger("thrift.transport.TSocket").setLevel(logging.CRITICAL)

# Every node runs secured (TLS, clients with tokens), and this process's clients, like the `delayq`
# commands it starts, call them as test-admin.
security.install()

# Nodes in tests scan and time out faster than in production, so that what a test waits for
# happens within seconds.
FAST = {"DELAYQ_WINDOW_MS": "3000", "DELAYQ_SCAN_INTERVAL_MS": "500", "DELAYQ_FULL_SCAN_MS": "2000",
        "DELAYQ_IDLE_TIMEOUT_MS": "2000"}


def wait_until(predicate: Callable[[], object], timeout: float, interval: float = 0.02, what: str = "condition"):
    """Poll predicate until it returns something truthy; fail the test after timeout seconds."""
    try:
        return wait_for(predicate, timeout, interval, what)
    except TimeoutError as e:
        pytest.fail(str(e))


def most_in_one_second(arrivals_ms: list[int]) -> int:
    """The most arrivals in any one-second window (sliding, not aligned to whole seconds)."""
    arrivals = sorted(arrivals_ms)
    most, first = 0, 0
    for i, at in enumerate(arrivals):
        while arrivals[first] <= at - 1000:
            first += 1
        most = max(most, i - first + 1)
    return most


def set_topic_controls(nodes, topic: str, **controls) -> None:
    """Set a topic's flow controls (TopicControls fields) through the first of `nodes` and wait
    until every one of them applies them: its per-topic gauges show them (a control cleared
    with 0 shows 0)."""
    with nodes[0].client() as c:
        c.setTopicControls(ttypes.TopicControls(topic=topic, **controls))
    gauges = {"paused": "paused", "maxFireRate": "max_fire_rate", "maxInFlight": "max_in_flight"}

    def applied() -> bool:
        for node in nodes:
            shown = node.metrics(labelled=True)
            if any(float(shown.get(f'delayq_topic_{gauges[k]}{{topic="{topic}"}}', 0.0)) != float(v or 0)
                   for k, v in controls.items() if k in gauges):
                return False
        return True
    wait_until(applied, 2, what=f"{topic} controls applied on {', '.join(n.node_id for n in nodes)}")


@pytest.fixture(scope="module")
def database(request) -> Database:
    """A database for this module (SHARDS in the module sets its shard count, default 8)."""
    with fresh_database(getattr(request.module, "SHARDS", 8)) as db:
        yield db


@pytest.fixture(scope="module")
def clients(database) -> ClientStore:
    """The module database's clients and grants, as `delayq clients` changes them."""
    return ClientStore(dbm.make_engine(config.load({"DELAYQ_MYSQL_URL": database.url}).mysql))


# ---- nodes ---------------------------------------------------------------------------------------

NodeProcess = Node


class NodeFactory:
    """make(**settings) -> a started NodeProcess against one database; stop_all() at the end.

    Standalone nodes (no ZooKeeper) unless DELAYQ_ZK_ENABLED=true is given; the cluster name is the
    database's, so each test database is its own cluster in ZooKeeper too."""

    def __init__(self, database: Database, logs: Path):
        self.database, self.logs = database, logs
        self.made: list[NodeProcess] = []

    def __call__(self, start: bool = True, **overrides: str) -> NodeProcess:
        env = node_env(self.database, f"n{len(self.made) + 1}", **{**FAST, **overrides})
        node = NodeProcess(env, self.logs / f"{self.database.name}-{env['DELAYQ_NODE_ID']}.log")
        self.made.append(node)
        return node.start() if start else node

    def stop_all(self) -> None:
        for node in self.made:
            node.stop()        # wakes a node a test left stopped, then SIGTERM


def per_node(node) -> dict[str, int]:
    """Shards per node in the assignment, as `node` reports it."""
    with node.client() as c:
        return dict(collections.Counter(c.cluster().assignment.values()))


@contextlib.contextmanager
def zk_cluster(logs: Path, shards: int, count: int) -> Iterator[tuple[Database, list[NodeProcess]]]:
    """`count` ZooKeeper nodes on a fresh database of `shards` shards, yielded once the master has
    balanced them; stopped, and the database dropped, on exit."""
    balanced = sorted(shards // count + (i < shards % count) for i in range(count))
    with fresh_database(shards) as db:
        factory = NodeFactory(db, logs)
        nodes = [factory(DELAYQ_ZK_ENABLED="true", DELAYQ_ZK_SESSION_TIMEOUT_MS="3000") for _ in range(count)]
        try:
            wait_until(lambda: sorted(per_node(nodes[0]).values()) == balanced, 15, 0.1, what="a balanced cluster")
            yield db, nodes
        finally:
            factory.stop_all()


@pytest.fixture(scope="module")
def node_factory(database, tmp_path_factory):
    factory = NodeFactory(database, tmp_path_factory.mktemp("nodes"))
    yield factory
    factory.stop_all()


@pytest.fixture(scope="module")
def node(node_factory) -> NodeProcess:
    return node_factory()


# ---- RabbitMQ ------------------------------------------------------------------------------------

@dataclass
class Received:
    at_ms: int
    properties: pika.BasicProperties
    body: bytes

    @property
    def headers(self) -> dict:
        return self.properties.headers or {}


@dataclass
class Collector:
    """Consumes one exclusive queue bound to `exchange` with `routing_key`, on its own thread."""
    exchange: str
    routing_key: str
    messages: list[Received] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"collector-{self.routing_key}", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError(f"collector could not start: {self._error}")

    def _run(self) -> None:
        try:
            conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
            ch = conn.channel()
            ch.exchange_declare(self.exchange, exchange_type="topic", durable=True)
            queue = ch.queue_declare("", exclusive=True).method.queue
            ch.queue_bind(queue, self.exchange, self.routing_key)
            ch.basic_consume(queue, self._on_message, auto_ack=True)
        except BaseException as e:  # noqa: BLE001 - reported by __post_init__
            self._error = e
            return
        self._ready.set()
        try:
            while not self._stop.is_set():
                conn.process_data_events(time_limit=0.05)
        finally:
            conn.close()

    def _on_message(self, ch, method, properties, body) -> None:
        with self._lock:
            self.messages.append(Received(now_ms(), properties, body))

    def snapshot(self) -> list[Received]:
        with self._lock:
            return list(self.messages)

    def task_ids(self) -> list[str]:
        return [m.headers.get("x-delayq-task-id") for m in self.snapshot()]

    def wait_for(self, count: int, timeout: float) -> list[Received]:
        return wait_until(lambda: len(self.messages) >= count and self.snapshot(), timeout,
                          what=f"{count} messages on {self.routing_key} (got {len(self.messages)})")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)


@pytest.fixture
def topic(node) -> str:
    """A fresh topic registered on the node (ttr 0: a task finishes at the broker's confirm)."""
    name = f"t.{uuid.uuid4().hex[:10]}"
    with node.client() as c:
        c.registerService(CallbackService(topic=name, ttrMs=0))
    return name


@pytest.fixture
def collector(topic):
    c = Collector("delayq", topic)
    yield c
    c.close()
