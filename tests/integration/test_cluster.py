"""Several node processes coordinated by the real ZooKeeper: election, rebalancing, failover and
fencing. Every run counts at a RabbitMQ consumer that each task arrived, each attempt at most once."""
from __future__ import annotations

import collections
import signal
import threading
import time
import uuid

import pytest
from sqlalchemy import create_engine, text

from delayq.client import CallbackService, DelayqClient, TaskSpec, TaskStatus
from delayq.client.consumer import TaskConsumer
from conftest import AMQP_URL, Collector, NodeFactory, fresh_database, now_ms, wait_until

pytestmark = pytest.mark.integration

SHARDS = 16
SESSION_MS = 3000
FAILOVER_BOUND_S = SESSION_MS / 1000 + 2


@pytest.fixture
def cluster(tmp_path):
    """make() -> a node of a fresh cluster (own database, own ZooKeeper tree)."""
    with fresh_database(SHARDS) as db:
        factory = NodeFactory(db, tmp_path)

        def make(**overrides):
            return factory(DELAYQ_ZK_ENABLED="true", DELAYQ_ZK_SESSION_TIMEOUT_MS=str(SESSION_MS), **overrides)
        make.factory = factory
        make.database = db
        try:
            yield make
        finally:
            factory.stop_all()


def info(node):
    with node.client() as c:
        return c.cluster()


def owners(node) -> dict[int, str]:
    return dict(info(node).assignment)


def balanced(node, expected_nodes: set[str]):
    """The cluster info once every shard is assigned, to exactly these nodes, balanced to +-1."""
    ci = info(node)
    counts = collections.Counter(ci.assignment.values())
    if len(ci.assignment) == SHARDS and set(counts) == expected_nodes and max(counts.values()) - min(counts.values()) <= 1:
        return ci
    return None


def test_election_and_rebalancing_move_only_the_shards_they_must(cluster):
    n1 = cluster()
    ci = wait_until(lambda: balanced(n1, {"n1"}), 10, 0.05, what="n1 to own every shard")
    assert ci.master == "n1" and ci.epoch >= 1

    n2 = cluster()
    before = owners(n1)
    ci = wait_until(lambda: balanced(n1, {"n1", "n2"}), 10, 0.05, what="n2 to get its share")
    moved = {s for s in before if before[s] != ci.assignment[s]}
    assert len(moved) == SHARDS // 2 and {ci.assignment[s] for s in moved} == {"n2"}

    n3 = cluster()
    before = dict(ci.assignment)
    ci = wait_until(lambda: balanced(n1, {"n1", "n2", "n3"}), 10, 0.05, what="n3 to get its share")
    moved = {s for s in before if before[s] != ci.assignment[s]}
    assert len(moved) == SHARDS // 3 and {ci.assignment[s] for s in moved} == {"n3"}
    assert ci.master == "n1" and {n.nodeId for n in ci.nodes if n.master} == {"n1"}
    assert sorted(n.shardCount for n in ci.nodes) == [5, 5, 6]

    n3.stop()   # a clean stop closes its session: its shards move at once
    before = dict(ci.assignment)
    ci = wait_until(lambda: balanced(n1, {"n1", "n2"}), 10, 0.05, what="n3's shards to move")
    moved = {s for s in before if before[s] != ci.assignment[s]}
    assert moved == {s for s, n in before.items() if n == "n3"}
    # Normal events are not reported as trouble: a fresh cluster's first grants, a clean stop.
    assert "repaired" not in n1.log_tail(2000) and "left unwritten" not in n1.log_tail(2000)
    assert not [line for line in n3.log_tail(200).splitlines() if "WARNING" in line or "ERROR" in line]

    killed_at = time.monotonic()
    n1.kill()   # the master
    ci = wait_until(lambda: balanced(n2, {"n2"}), FAILOVER_BOUND_S + 5, 0.05, what="n2 to take over")
    took = time.monotonic() - killed_at
    assert ci.master == "n2"
    assert took <= FAILOVER_BOUND_S, f"new master after {took:.1f} s"


def _register(node, topic: str) -> None:
    with node.client() as c:
        c.registerService(CallbackService(topic=topic, ttrMs=3000, maxRetries=5, backoff="fixed",
                                          retryBackoffMs=200))


class Downstream:
    """A raw collector (to count deliveries) and a TaskConsumer reporting results to any node."""

    def __init__(self, topic: str, endpoints: list[str]):
        self.collector = Collector("delayq", topic)
        self.consumer = TaskConsumer(topic, lambda task: None, results=DelayqClient(endpoints), amqp_url=AMQP_URL)
        self.thread = threading.Thread(target=self.consumer.run, daemon=True)
        self.thread.start()
        assert self.consumer.wait_ready(10)

    def close(self) -> None:
        self.consumer.stop()
        self.thread.join(5)
        self.collector.close()

    def assert_each_attempt_at_most_once(self) -> None:
        mids = collections.Counter(m.properties.message_id for m in self.collector.snapshot())
        assert max(mids.values()) == 1, [m for m, n in mids.items() if n > 1]


def test_sigkill_of_a_node_under_a_steady_stream_loses_nothing(cluster):
    nodes = [cluster(), cluster(), cluster()]
    wait_until(lambda: balanced(nodes[0], {"n1", "n2", "n3"}), 15, 0.05, what="three balanced nodes")
    topic = f"t.{uuid.uuid4().hex[:10]}"
    _register(nodes[0], topic)
    down = Downstream(topic, [n.endpoint for n in nodes])
    try:
        # Due 4-10 s from now (beyond the 3 s window), so shards are spread over every node.
        start = now_ms() + 4000
        with nodes[0].client() as c:
            refs = c.submitBatch([TaskSpec(topic=topic, dueAtMs=start + i * 10, payload=b"p") for i in range(600)])
        ids = {r.taskId for r in refs}
        wait_until(lambda: len(down.collector.messages) >= 100, 15, what="the stream to start")
        assignment = owners(nodes[0])
        victim = next(n for n in nodes[1:] if n.node_id in assignment.values())
        victim_shards = {s for s, n in assignment.items() if n == victim.node_id}
        victim.kill()
        killed_ms = now_ms()

        wait_until(lambda: ids <= set(down.collector.task_ids()), 40,
                   what=f"every task ({len(ids - set(down.collector.task_ids()))} missing)")
        down.assert_each_attempt_at_most_once()
        with nodes[0].client() as c:
            shard_of = {t: c.get(t).shardId for t in ids}
            wait_until(lambda: all(c.get(t).status == TaskStatus.FINISHED for t in ids), 30,
                       what="every task to finish")
        # Failover: the first task of the dead node's shards that was overdue at the kill, delivered.
        overdue = [m for m in down.collector.snapshot()
                   if shard_of[m.headers["x-delayq-task-id"]] in victim_shards
                   and m.headers["x-delayq-due-at"] < m.at_ms and m.at_ms > killed_ms
                   and m.headers["x-delayq-due-at"] <= killed_ms + 1000]
        assert overdue, "the dead node's shards had tasks due after the kill"
        failover_s = (min(m.at_ms for m in overdue) - killed_ms) / 1000
        print(f"failover: first overdue task of the dead node's shards delivered {failover_s:.2f} s after SIGKILL")
        assert failover_s <= FAILOVER_BOUND_S
    finally:
        down.close()


def test_a_node_paused_past_its_session_dispatches_nothing_of_the_shards_it_lost(cluster):
    nodes = [cluster(), cluster(), cluster()]
    wait_until(lambda: balanced(nodes[0], {"n1", "n2", "n3"}), 15, 0.05, what="three balanced nodes")
    topic = f"t.{uuid.uuid4().hex[:10]}"
    _register(nodes[0], topic)
    zombie = nodes[2]
    down = Downstream(topic, [n.endpoint for n in nodes[:2]])
    try:
        zombie_shards = {s for s, n in owners(nodes[0]).items() if n == zombie.node_id}
        # Submitted through the zombie and due within its window: they sit in its memory, on its shards.
        pause_s = SESSION_MS / 1000 + 3
        due = now_ms() + int(pause_s * 1000) + 300
        with zombie.client() as c:
            refs = c.submitBatch([TaskSpec(topic=topic, dueAtMs=due + i, payload=b"z")
                                  for i in range(200)])
        ids = {r.taskId for r in refs}
        zombie.kill(signal.SIGSTOP)
        stopped_ms = now_ms()
        wait_until(lambda: zombie.node_id not in owners(nodes[0]).values(), pause_s + 5, 0.05,
                   what="the master to take the zombie's shards")
        assert now_ms() - stopped_ms >= SESSION_MS - 500
        wait_until(lambda: now_ms() >= due - 500, pause_s + 5, 0.05, what="the tasks to come due")
        zombie.kill(signal.SIGCONT)

        wait_until(lambda: ids <= set(down.collector.task_ids()), 30, what="every task")
        down.assert_each_attempt_at_most_once()
        engine = create_engine(zombie.env["DELAYQ_MYSQL_URL"])
        try:
            with engine.connect() as conn:
                rows = conn.execute(text(
                    "SELECT t.shard_id, x.node_id, x.dispatched_ms FROM job_delay_task_execlog x "
                    "JOIN (SELECT task_id, shard_id FROM job_delay_task UNION ALL "
                    "      SELECT task_id, shard_id FROM job_delay_task_backlog) t ON t.task_id = x.task_id "
                    "WHERE x.attempt = 1")).all()
                # The owner is held as node@session: a grant to the zombie's new session.
                grants = {s: ((o or "").split("@")[0], at) for s, o, at in conn.execute(text(
                    "SELECT shard_id, owner, updated_ms FROM job_shard"))}
        finally:
            engine.dispose()
        ours = [(s, n, at) for s, n, at in rows if s in zombie_shards]
        assert ours, "the zombie's old shards held some of the tasks"
        # Back in the cluster with a new session, the zombie may be granted some of its old shards
        # again and then dispatch their tasks rightfully: only a dispatch after that grant counts
        # as its own. Anything it sent of a shard while the shard was another node's is a breach.
        stale = [(s, at) for s, n, at in ours
                 if n == zombie.node_id and not (grants[s][0] == zombie.node_id and at >= grants[s][1])]
        assert not stale, f"the zombie dispatched tasks of shards it had lost: {stale[:5]}"
        assert "fenced" in zombie.log_tail(400) or "lost" in zombie.log_tail(400)
    finally:
        down.close()


def test_a_node_whose_session_expires_drops_its_shards_and_registers_afresh(cluster):
    from kazoo.client import KazooClient

    from conftest import ZK_HOSTS, free_port
    from delayq.nodes.main import NodeRuntime
    from delayq import config
    from delayq.testing import security

    n1 = cluster()
    db = cluster.database
    settings = config.load({
        "DELAYQ_MYSQL_URL": db.url, "DELAYQ_AMQP_URL": AMQP_URL, "DELAYQ_ZK_HOSTS": ZK_HOSTS,
        "DELAYQ_CLUSTER": db.name, "DELAYQ_NODE_ID": "inproc", "DELAYQ_PORT": str(free_port()),
        "DELAYQ_HTTP_PORT": "0",
        "DELAYQ_ZK_SESSION_TIMEOUT_MS": str(SESSION_MS), "DELAYQ_WINDOW_MS": "3000",
        "DELAYQ_SCAN_INTERVAL_MS": "500", **security.node_environment()})
    runtime = NodeRuntime(settings)
    runtime.start()
    try:
        wait_until(lambda: balanced(n1, {"n1", "inproc"}), 15, 0.05, what="the in-process node to get shards")
        old_member = runtime.cluster.membership.member
        lost_seen = threading.Event()
        runtime.cluster.session.subscribe(lambda state, _sid: state == "lost" and lost_seen.set())

        # Expire the session the way kazoo's testing harness does: close it from a second client.
        sid, password = runtime.cluster.session.client.client_id
        twin = KazooClient(hosts=ZK_HOSTS, client_id=(sid, password))
        twin.start(timeout=10)
        twin.stop()
        twin.close()

        assert lost_seen.wait(SESSION_MS / 1000 + 10), "the node never saw its session expire"
        wait_until(lambda: runtime.cluster.membership.member not in (None, old_member), 15, 0.05,
                   what="the node to register with a new session")
        ci = wait_until(lambda: balanced(n1, {"n1", "inproc"}), 15, 0.05, what="the cluster to rebalance")
        mine = {s for s, n in ci.assignment.items() if n == "inproc"}
        owner, fence = wait_until(lambda: set(runtime.ownership.fence()[1]) == mine and runtime.ownership.fence(),
                                  10, 0.05, what="the node to hold its new shards")
        assert owner == runtime.cluster.membership.member != old_member

        # And it dispatches again, as its new self.
        topic = f"t.{uuid.uuid4().hex[:10]}"
        with DelayqClient([f"127.0.0.1:{settings.node.port}"]) as c:
            c.registerService(CallbackService(topic=topic, ttrMs=0))
            collector = Collector("delayq", topic)
            try:
                ref = c.submit(TaskSpec(topic=topic, delayMs=300, payload=b"after"))
                [msg] = collector.wait_for(1, 10)
                assert msg.headers["x-delayq-task-id"] == ref.taskId
            finally:
                collector.close()
    finally:
        runtime.stop()


def test_a_node_paused_between_claim_and_publish_publishes_nothing_when_it_wakes(cluster):
    # Claims a second ahead of the due time, so the pause can fall between a claim and its publish.
    nodes = [cluster(DELAYQ_CLAIM_LEAD_MS="1000"), cluster(DELAYQ_CLAIM_LEAD_MS="1000")]
    wait_until(lambda: balanced(nodes[0], {"n1", "n2"}), 15, 0.05, what="two balanced nodes")
    topic = f"t.{uuid.uuid4().hex[:10]}"
    _register(nodes[0], topic)
    master = info(nodes[0]).master
    victim, survivor = (nodes[1], nodes[0]) if master == "n1" else (nodes[0], nodes[1])
    down = Downstream(topic, [survivor.endpoint])
    engine = create_engine(victim.env["DELAYQ_MYSQL_URL"])
    try:
        due = now_ms() + 3000
        with victim.client() as c:      # due soon: they go to the victim's own shards, into its memory
            refs = c.submitBatch([TaskSpec(topic=topic, dueAtMs=due, payload=b"z") for _ in range(50)])
        ids = {r.taskId for r in refs}

        def claimed():
            with engine.connect() as conn:
                return {r[0] for r in conn.execute(text(
                    "SELECT task_id FROM job_delay_task WHERE status = 1 AND attempt = 1 AND node_id LIKE :n"),
                    {"n": victim.node_id + "%"})}
        wait_until(claimed, 10, 0.002, what="the victim to claim tasks")
        victim.kill(signal.SIGSTOP)
        assert now_ms() < due, "stopped after the due time: the claim may already have been published"
        held = claimed()          # claimed by the victim and not published: attempt 1 must never be sent
        assert held

        # The survivor takes the shards once the session expired, times attempt 1 out and sends attempt 2.
        wait_until(lambda: ids <= set(down.collector.task_ids()), 30, what="the survivor to dispatch every task")
        victim.kill(signal.SIGCONT)
        # Woken, the node finds its session expired and joins again as a new member: by then its
        # releaser has long had the chance to publish what it held.
        wait_until(lambda: victim.node_id in {n.nodeId for n in info(survivor).nodes}, 20, 0.05,
                   what="the woken node to rejoin the cluster")
        wait_until(lambda: all(t.status == TaskStatus.FINISHED for t in _statuses(survivor, ids)), 15, 0.1,
                   what="every task to finish")

        sent = collections.Counter(m.headers["x-delayq-task-id"] for m in down.collector.snapshot())
        assert set(sent) == ids and max(sent.values()) == 1, "a task was delivered twice"
        first = {m.headers["x-delayq-task-id"] for m in down.collector.snapshot() if m.headers["x-delayq-attempt"] == 1}
        assert not first & held, "attempt 1 was claimed by the paused node and must never be sent"
        assert victim.metrics().get("delayq_claims_expired_total") >= len(held)
    finally:
        victim.kill(signal.SIGCONT)
        engine.dispose()
        down.close()


def _statuses(node, ids):
    with node.client() as c:
        return [c.get(t) for t in ids]


def test_a_task_accepted_by_a_node_without_shards_fires_on_time_from_its_owner(cluster):
    # Production scan settings: without a hint the owner would find the task only at its re-read.
    settings = dict(DELAYQ_WINDOW_MS="60000", DELAYQ_SCAN_INTERVAL_MS="5000", DELAYQ_FULL_SCAN_MS="15000")
    n1, n2 = cluster(**settings), cluster(**settings)
    wait_until(lambda: balanced(n1, {"n1", "n2"}), 15, 0.05, what="two balanced nodes")
    import subprocess
    import sys
    drained = subprocess.run([sys.executable, "-m", "delayq.ops.cli", "drain", "n2", "--timeout", "30"], env=n1.env,
                             capture_output=True, text=True, timeout=60)
    assert drained.returncode == 0, drained.stderr
    wait_until(lambda: "n2" not in owners(n1).values(), 10, 0.05, what="n2 to hold no shard")
    topic = f"t.{uuid.uuid4().hex[:10]}"
    with n1.client() as c:
        c.registerService(CallbackService(topic=topic, ttrMs=0))
    collector = Collector("delayq", topic)
    try:
        with n2.client() as c:       # the drained node takes them: they land on n1's shards
            refs = c.submitBatch([TaskSpec(topic=topic, delayMs=1000 + 20 * i, payload=b"h") for i in range(20)])
        got = collector.wait_for(len(refs), 20)
        due = {r.taskId: r.dueAtMs for r in refs}
        late = sorted(m.at_ms - due[m.headers["x-delayq-task-id"]] for m in got)
        assert late[0] >= 0 and late[-1] <= 100, f"lateness (ms): {late}"
    finally:
        collector.close()
