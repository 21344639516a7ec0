"""Flow control on a 3-node ZooKeeper cluster and the real services: a topic's maxFireRate holds
cluster-wide in every second, its maxInFlight holds across the nodes, and the rate holds through a
SIGKILL of a node and a reshard. What is asserted is what a consumer sees: every task arriving
once at a RabbitMQ queue, the fire rate the messages carry (their x-delayq-dispatched-at: arrivals
add the broker's and the collector's own stalls), and the tasks a consumer holds before it reports
their results.

The tests share one cluster: 16 shards to start with; a test that kills a node leaves it to the
next test's `nodes` fixture to start again, and the reshard tests change the shard count (each
first brings it to where it starts from, so any one of them runs alone)."""
from __future__ import annotations

import collections
import subprocess
import sys
import threading
import time
import uuid

import pytest
from kazoo.client import KazooClient
from sqlalchemy import create_engine, text

from conftest import ZK_HOSTS, Collector, NodeFactory, most_in_one_second, now_ms, set_topic_controls, wait_until
from delayq import zkauth
from delayq.client import CallbackService, DelayqClient, TaskSpec
from delayq.client.gen.delayq_thrift import ttypes
from delayq.lifecycle import Status
from delayq.testing import security
from delayq.testing.cluster import fresh_database
from delayq.zkpaths import AssignmentDoc, ZkPaths

pytestmark = pytest.mark.integration

SHARDS = 16
GROWN = 64
SESSION_MS = 3000
FAILOVER_BOUND_S = SESSION_MS / 1000 + 2
MEMBERS = {"n1", "n2", "n3"}
RATE = 300.0                # the topic's maxFireRate, tasks/s across the cluster
BURST = RATE / 20           # its default fireBurst
OVER = 1.10                 # a one-second window may hold at most RATE x OVER arrivals


# ---- the cluster ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """(three ZooKeeper nodes, their database)."""
    with fresh_database(SHARDS) as db:
        factory = NodeFactory(db, tmp_path_factory.mktemp("flow-cluster"))
        try:
            nodes = [factory(DELAYQ_ZK_ENABLED="true", DELAYQ_ZK_SESSION_TIMEOUT_MS=str(SESSION_MS))
                     for _ in range(3)]
            yield nodes, db
        finally:
            factory.stop_all()


@pytest.fixture
def nodes(cluster):
    """The three nodes, each running (one a test killed is started again), every shard assigned
    and balanced in the view of each."""
    members, _ = cluster
    for node in members:
        if not node.alive():
            node.start()
    wait_until(lambda: _balanced(members, MEMBERS), 20, 0.05, what="three balanced nodes")
    return members


@pytest.fixture
def settled(cluster):
    """settled(topic): wait until nothing of the topic is left to fire (no DELAY, READY or RUNNING
    row), so that a late second delivery would have arrived by then."""
    engine = create_engine(cluster[1].url)

    def left(topic: str) -> int:
        with engine.connect() as conn:
            return conn.execute(text("SELECT COUNT(*) FROM job_delay_task WHERE topic = :t AND status IN :s")
                                .bindparams(t=topic, s=(int(Status.DELAY), int(Status.READY), int(Status.RUNNING)))
                                ).scalar_one()

    def wait(topic: str) -> None:
        wait_until(lambda: left(topic) == 0, 15, 0.1, what=f"every task of {topic} to be settled")
    yield wait
    engine.dispose()


@pytest.fixture
def assignment(cluster):
    """assignment() -> the assignment document the master last wrote, read from ZooKeeper."""
    zk = KazooClient(hosts=ZK_HOSTS, timeout=5, **zkauth.kazoo_args(security.zk_auth()))
    zk.start(timeout=5)
    path = ZkPaths(cluster[1].name).assignment
    yield lambda: AssignmentDoc.decode(zk.get(path)[0])
    zk.stop()
    zk.close()


def _view(node) -> ttypes.ClusterInfo:
    with node.client() as c:
        return c.cluster()


def _balanced(nodes, members: set[str]) -> bool:
    """True once each of `nodes` sees every shard assigned, to exactly `members`, balanced to +-1."""
    for node in nodes:
        counts = collections.Counter(_view(node).assignment.values())
        if set(counts) != members or max(counts.values()) - min(counts.values()) > 1:
            return False
    return True


# ---- tasks and what arrives ----------------------------------------------------------------------

def _topic(nodes, **service) -> str:
    name = f"fc.{uuid.uuid4().hex[:10]}"
    with nodes[0].client() as c:
        c.registerService(CallbackService(topic=name, **{"ttrMs": 0, **service}))
    return name


def _due_at_once(nodes, topic: str, count: int, due_ms: int) -> list[str]:
    """`count` tasks due at `due_ms`, a third submitted through each node in batches of at most 500
    (a task due soon goes to a shard of the node that takes it: each node holds a third)."""
    ids: list[str] = []
    for i, node in enumerate(nodes):
        mine = count // len(nodes) + (i < count % len(nodes))
        with node.client() as c:
            for j in range(0, mine, 500):
                ids += [r.taskId for r in c.submitBatch([TaskSpec(topic=topic, dueAtMs=due_ms, payload=b"f")
                                                         for _ in range(min(500, mine - j))])]
    return ids


def _wait_for_every_task(fired: Collector, ids: list[str]) -> None:
    """Until each task arrived at least once (a task may arrive once per attempt)."""
    wait_until(lambda: set(ids) <= set(fired.task_ids()), 30, 0.1,
               what=f"every task ({len(set(ids) - set(fired.task_ids()))} missing)")


def _per_second(got: list) -> list[int]:
    """Arrivals in each whole second from the first (for the report)."""
    first = min(m.at_ms for m in got)
    counts = collections.Counter((m.at_ms - first) // 1000 for m in got)
    return [counts[s] for s in range(max(counts) + 1)]


def _fired_ms(got: list) -> list[int]:
    """When the nodes published each message (x-delayq-dispatched-at): the fire rate a limit holds.
    Arrivals at the collector add the broker's and the collector's own stalls on a busy machine."""
    return [m.headers["x-delayq-dispatched-at"] for m in got]


def _limited_drain(got: list, ids: list[str], what: str) -> None:
    """Every task of `ids` arrived (`got`), never fired more than RATE + BURST + 10% in one second, and
    no faster than RATE lets them."""
    arrivals = [m.at_ms for m in got]
    most = most_in_one_second(_fired_ms(got))
    span_s = (max(arrivals) - min(arrivals)) / 1000
    print(f"{what}: {len(got)} arrivals of {len(ids)} tasks in {span_s:.2f} s, at most {most} fired in one second "
          f"({most_in_one_second(arrivals)} arrived) (limit {RATE:.0f}/s); per second {_per_second(got)}")
    assert {m.headers["x-delayq-task-id"] for m in got} == set(ids), "a task never arrived"
    # A token bucket lets its burst out on top of a second's rate: RATE + BURST in one second is
    # the limit's own; OVER covers the stamps, taken at the publish after the paced claim, which a
    # stall of the node bunches.
    assert most <= RATE * OVER + BURST, f"{most} tasks fired within one second; the limit is {RATE:.0f}/s"
    # The limit is not met by firing nothing, nor the figure above by a collector that fell behind:
    # at RATE, with BURST up front, the drain takes this long.
    assert span_s >= (len(ids) - BURST) / RATE, f"{len(ids)} tasks drained in {span_s:.2f} s: faster than {RATE:.0f}/s"


def _once_per_attempt(got: list) -> None:
    per_attempt = collections.Counter(m.properties.message_id for m in got)
    assert max(per_attempt.values()) == 1, [m for m, n in per_attempt.items() if n > 1][:5]


# ---- a rate limit, a cap on the attempts in flight -----------------------------------------------

@pytest.mark.timeout(60)
def test_a_rate_limit_holds_across_three_nodes_in_every_second(nodes, settled):
    topic = _topic(nodes)
    fired = Collector("delayq", topic)
    try:
        set_topic_controls(nodes, topic, maxFireRate=RATE)
        ids = _due_at_once(nodes, topic, int(RATE * 10), now_ms() + 1000)      # ten seconds' worth
        fired.wait_for(len(ids), 30)
        settled(topic)
        got = fired.snapshot()
    finally:
        fired.close()
    _limited_drain(got, ids, "3 nodes")
    sent = collections.Counter(m.headers["x-delayq-task-id"] for m in got)
    assert max(sent.values()) == 1, [t for t, n in sent.items() if n > 1][:5]


def _through_one_node(nodes, topic: str, fired: Collector, limit_first: bool) -> None:
    """A second's worth of tasks due at once, all submitted through one node, with the limit set
    before or after; the limit holds and is reached."""
    if limit_first:
        set_topic_controls(nodes, topic, maxFireRate=RATE)
    # Set after, the limit must hold on every node before the tasks are due.
    ids = _due_at_once(nodes[:1], topic, int(RATE), now_ms() + (1000 if limit_first else 2000))
    if not limit_first:
        set_topic_controls(nodes, topic, maxFireRate=RATE)
    got = fired.wait_for(len(ids), 30)
    assert {m.headers["x-delayq-task-id"] for m in got} == set(ids), "a task never arrived"
    _once_per_attempt(got)
    span_s = (max(m.at_ms for m in got) - min(m.at_ms for m in got)) / 1000
    print(f"through one node, limit set {'before' if limit_first else 'after'}: {len(ids)} tasks in {span_s:.2f} s "
          f"({len(ids) / span_s:.0f}/s); per second {_per_second(got)}")
    assert most_in_one_second(_fired_ms(got)) <= RATE * OVER
    assert span_s <= 1.5 * len(ids) / RATE, \
        f"the cluster fired {len(ids) / span_s:.0f} tasks/s; the limit is {RATE:.0f}/s"


@pytest.mark.timeout(60)
def test_a_rate_limit_is_reached_when_every_task_is_submitted_through_one_node(nodes):
    # A task due soon goes to a shard of the node that takes it, but for a rate-limited topic: each
    # node fires its part of the rate, so such a topic's tasks spread over every shard.
    topic = _topic(nodes)
    fired = Collector("delayq", topic)
    try:
        _through_one_node(nodes, topic, fired, limit_first=True)
    finally:
        fired.close()


@pytest.mark.timeout(60)
def test_a_rate_limit_set_on_tasks_already_submitted_through_one_node_is_reached(nodes):
    # Taken before the limit, the tasks sit on the shards of the node that took them; with the
    # limit, every node moves those it holds onto every node's shards (delayq.nodes.memory.spread).
    topic = _topic(nodes)
    fired = Collector("delayq", topic)
    try:
        _through_one_node(nodes, topic, fired, limit_first=False)
    finally:
        fired.close()


@pytest.mark.timeout(60)
def test_max_in_flight_holds_across_three_nodes_counted_at_the_consumer(nodes):
    cap, hold_ms, count = 4, 200, 40
    topic = _topic(nodes, ttrMs=30_000)
    fired = Collector("delayq", topic)
    reported: set[str] = set()
    held: list[int] = []            # tasks received and not yet reported, just before each report
    stop = threading.Event()
    failed: list[BaseException] = []

    def consumer() -> None:
        """Reports each task hold_ms after it arrived, to each node in turn."""
        clients = [DelayqClient([n.endpoint]) for n in nodes]
        try:
            turn = 0
            while not stop.is_set():
                for m in fired.snapshot():
                    tid = m.headers["x-delayq-task-id"]
                    if tid in reported or now_ms() - m.at_ms < hold_ms:
                        continue
                    held.append(len(fired.snapshot()) - len(reported))
                    clients[turn % len(clients)].reportResult(tid, m.headers["x-delayq-attempt"],
                                                              ttypes.ResultStatus.SUCCESS, "")
                    turn += 1
                    reported.add(tid)
                time.sleep(0.005)
        except BaseException as e:  # noqa: BLE001 - the test reports it
            failed.append(e)
        finally:
            for c in clients:
                c.close()
    worker = threading.Thread(target=consumer, name="reporting-consumer", daemon=True)
    try:
        set_topic_controls(nodes, topic, maxInFlight=cap)
        worker.start()
        ids = _due_at_once(nodes, topic, count, now_ms() + 500)
        wait_until(lambda: failed or len(reported) == count, 30,
                   what=f"{count} tasks reported ({len(reported)} so far)")
        assert not failed, failed
        got = fired.snapshot()
        with nodes[1].client() as c:
            assert {c.get(t).status for t in ids} == {ttypes.TaskStatus.FINISHED}
    finally:
        stop.set()
        worker.join(5)
        fired.close()
    span_ms = max(m.at_ms for m in got) - min(m.at_ms for m in got)
    print(f"maxInFlight {cap}: at most {max(held)} tasks held at the consumer "
          f"({collections.Counter(held)}); {count} tasks in {span_ms} ms")
    assert max(held) <= cap, f"the consumer held {max(held)} tasks at once; the cap is {cap}"
    assert sorted(m.headers["x-delayq-task-id"] for m in got) == sorted(ids), "a task arrived twice or never"
    # cap at a time, each held hold_ms: no faster than this, or the cap was not what paced them.
    assert span_ms >= (count / cap - 1) * hold_ms, f"{count} tasks in {span_ms} ms: the cap did not hold them back"


# ---- limits through a node's death and a reshard -------------------------------------------------

@pytest.mark.timeout(60)
def test_a_rate_limit_holds_through_a_sigkill_of_the_master(nodes, settled):
    topic = _topic(nodes, maxRetries=3)
    fired = Collector("delayq", topic)
    try:
        set_topic_controls(nodes, topic, maxFireRate=RATE)
        ids = _due_at_once(nodes, topic, int(RATE * 6), now_ms() + 1000)
        fired.wait_for(int(RATE * 2), 10)          # two seconds into the drain
        # The master: the survivors elect another, which gives them its shards.
        victim = next(n for n in nodes if n.node_id == _view(nodes[0]).master)
        survivors = [n for n in nodes if n is not victim]
        victim.kill()
        killed = time.monotonic()
        wait_until(lambda: _balanced(survivors, {n.node_id for n in survivors}), FAILOVER_BOUND_S + 10, 0.05,
                   what=f"the survivors to take {victim.node_id}'s shards")
        took_over_s = time.monotonic() - killed
        _wait_for_every_task(fired, ids)
        settled(topic)
        got = fired.snapshot()
    finally:
        fired.close()
    print(f"SIGKILL of {victim.node_id} (the master) {int(RATE * 2)} arrivals into the drain: "
          f"its shards taken over {took_over_s:.2f} s later")
    assert took_over_s <= FAILOVER_BOUND_S, f"the survivors took {victim.node_id}'s shards {took_over_s:.1f} s after"
    _limited_drain(got, ids, f"SIGKILL of {victim.node_id}")
    _once_per_attempt(got)


class Reshard:
    """`delayq reshard --shards N` on a thread of its own: the drain goes on meanwhile."""

    def __init__(self, node, shards: int):
        self.shards = shards
        self.started_ms = now_ms()
        self.ended_ms: int | None = None
        self.result: subprocess.CompletedProcess | None = None
        self._thread = threading.Thread(target=self._run, args=(node,), name="reshard", daemon=True)
        self._thread.start()

    def _run(self, node) -> None:
        self.result = subprocess.run(
            [sys.executable, "-m", "delayq.ops.cli", "reshard", "--shards", str(self.shards), "--margin-ms", "1000",
             "--json", "--timeout", "30"], env=node.env, capture_output=True, text=True, timeout=45)
        self.ended_ms = now_ms()

    def wait(self) -> None:
        self._thread.join(50)
        assert self.result is not None, "the reshard did not end"
        assert self.result.returncode == 0, self.result.stderr


def _reshard_during_a_drain(nodes, settled, assignment, shards: int, meanwhile=lambda: None) -> None:
    """A rate-limited drain, with a reshard to `shards` started a second into it; `meanwhile()` runs
    once the master has written the assignment that starts it."""
    topic = _topic(nodes)
    fired = Collector("delayq", topic)
    try:
        set_topic_controls(nodes, topic, maxFireRate=RATE)
        ids = _due_at_once(nodes, topic, int(RATE * 5), now_ms() + 1000)
        fired.wait_for(int(RATE), 10)              # a second into the drain
        reshard = Reshard(nodes[0], shards)
        wait_until(lambda: assignment().active == shards, 10, 0.02, what=f"new tasks to go to {shards} shards")
        meanwhile()
        reshard.wait()
        _wait_for_every_task(fired, ids)
        settled(topic)
        got = fired.snapshot()
    finally:
        fired.close()
    first, last = min(m.at_ms for m in got), max(m.at_ms for m in got)
    print(f"reshard to {shards} shards from {(reshard.started_ms - first) / 1000:.2f} s to "
          f"{(reshard.ended_ms - first) / 1000:.2f} s into the drain")
    _limited_drain(got, ids, f"reshard to {shards}")
    _once_per_attempt(got)
    assert _view(nodes[0]).shardCount == shards
    assert first < reshard.started_ms < last - 2000, "the reshard did not start during the drain"


@pytest.mark.timeout(90)
def test_a_rate_limit_holds_while_the_cluster_grows_to_64_shards(nodes, settled, assignment):
    if _view(nodes[0]).shardCount != SHARDS:
        Reshard(nodes[0], SHARDS).wait()
    _reshard_during_a_drain(nodes, settled, assignment, GROWN)


@pytest.mark.timeout(90)
def test_a_rate_limit_holds_while_the_cluster_shrinks_to_16_shards_and_a_service_is_registered(
        nodes, settled, assignment):
    if _view(nodes[0]).shardCount != GROWN:
        Reshard(nodes[0], GROWN).wait()
    # Any change of the services makes every node split its rates again (Flow.apply); so would a
    # shard gained or lost, or a node started, during the shrink.
    _reshard_during_a_drain(nodes, settled, assignment, SHARDS, meanwhile=lambda: _topic(nodes))
