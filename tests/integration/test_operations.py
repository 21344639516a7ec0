"""The ops commands on a running 3-node cluster under a steady stream of tasks: reshard, drain,
pin, and `status --json` against the Thrift view. Every task arrives; no attempt arrives twice."""
from __future__ import annotations

import collections
import json
import random
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from delayq.client import CallbackService, DelayqClient, TaskSpec
from conftest import Collector, per_node, wait_until, zk_cluster

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster3(tmp_path):
    """Three ZooKeeper nodes on a fresh 16-shard database, balanced."""
    with zk_cluster(tmp_path, 16, 3) as (_, nodes):
        yield nodes


def _info(node):
    with node.client() as c:
        return c.cluster()


def delayq(node, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "delayq.ops.cli", *args], env=node.env, capture_output=True,
                          text=True, timeout=timeout)


class Stream:
    """Submits tasks through every node, due 0.5-8 s ahead, until stopped; counts arrivals."""

    def __init__(self, nodes, rate_per_s: float = 60):
        self.topic = f"t.{uuid.uuid4().hex[:10]}"
        with nodes[0].client() as c:
            c.registerService(CallbackService(topic=self.topic, ttrMs=0))
        self.collector = Collector("delayq", self.topic)
        self.ids: set[str] = set()
        self._stop = threading.Event()
        self._endpoints = [n.endpoint for n in nodes]
        self._period = 1.0 / rate_per_s
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        rng = random.Random(7)
        with DelayqClient(self._endpoints, timeout_s=10) as c:
            while not self._stop.wait(self._period):
                tid = f"s-{uuid.uuid4().hex[:12]}"
                c.submit(TaskSpec(topic=self.topic, taskId=tid, delayMs=rng.randint(500, 8000), payload=b"s"))
                self.ids.add(tid)

    def finish(self) -> None:
        """Stop submitting; wait for every task; check each attempt arrived once."""
        self._stop.set()
        self._thread.join(15)
        try:
            wait_until(lambda: self.ids <= set(self.collector.task_ids()), 40,
                       what=f"every task ({len(self.ids - set(self.collector.task_ids()))} of {len(self.ids)} missing)")
            mids = collections.Counter(m.properties.message_id for m in self.collector.snapshot())
            assert max(mids.values()) == 1, [m for m, n in mids.items() if n > 1]
        finally:
            self.collector.close()


@pytest.mark.timeout(300)
def test_reshard_16_to_64_and_back_to_32_while_the_cluster_fires(cluster3):
    n1 = cluster3[0]
    stream = Stream(cluster3)
    try:
        wait_until(lambda: len(stream.collector.messages) >= 30, 20, what="the stream to flow")
        dry = delayq(n1, "reshard", "--shards", "64", "--dry-run", "--json")
        plan = json.loads(dry.stdout)
        assert plan["from"] == 16 and plan["to"] == 64, dry.stderr
        assert sum(plan["shardsPerNodeAfter"].values()) == 64

        up = delayq(n1, "reshard", "--shards", "64", "--margin-ms", "1000", "--json", "--timeout", "120")
        assert up.returncode == 0, up.stderr
        info = _info(n1)
        assert info.shardCount == 64 and len(info.assignment) == 64
        assert sorted(collections.Counter(info.assignment.values()).values()) == [21, 21, 22]

        down = delayq(n1, "reshard", "--shards", "32", "--margin-ms", "1000", "--json", "--timeout", "120")
        assert down.returncode == 0, down.stderr
        info = _info(n1)
        assert info.shardCount == 32 and sorted(info.assignment) == list(range(32))
    finally:
        stream.finish()


@pytest.mark.timeout(180)
def test_drain_moves_every_shard_off_a_node_under_load_and_pins_hold(cluster3):
    n1, n2, _ = cluster3
    stream = Stream(cluster3)
    try:
        wait_until(lambda: len(stream.collector.messages) >= 20, 20, what="the stream to flow")
        out = delayq(n1, "drain", "n2", "--json", "--timeout", "30")
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["shardsPerNode"]["n2"] == 0
        assert "n2" not in _info(n1).assignment.values()

        pinned = delayq(n1, "pin", "3", "n2", "--json", "--timeout", "30")
        assert pinned.returncode == 0, pinned.stderr
        assert _info(n1).assignment[3] == "n2"          # a pin wins over the drain
        assert delayq(n1, "unpin", "3", "--timeout", "30").returncode == 0
        assert delayq(n1, "undrain", "n2", "--timeout", "30").returncode == 0
        counts = per_node(n1)
        assert counts.get("n2", 0) >= 5 and max(counts.values()) - min(counts.values()) <= 1
    finally:
        stream.finish()


def test_status_json_agrees_with_the_thrift_view(cluster3):
    n1 = cluster3[0]
    out = delayq(n1, "status", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    info = _info(n1)
    assert report["master"] == info.master and report["epoch"] == info.epoch
    assert {int(s): n for s, n in report["assignment"].items()} == dict(info.assignment)
    assert {n["node"]: n["shards"] for n in report["nodes"]} == {n.nodeId: n.shardCount for n in info.nodes}
    assert set(report["tasks"]) == {"DELAY", "READY", "RUNNING", "FINISHED", "FAILED", "CANCELLED"}


def test_cluster_commands_refuse_what_does_not_exist_and_name_what_does(cluster3):
    n1 = cluster3[0]
    out = delayq(n1, "drain", "node9", "--timeout", "10")
    assert out.returncode == 2 and "'node9' is not a member" in out.stderr and "n1, n2, n3" in out.stderr
    out = delayq(n1, "drain", "node9", "--json", "--timeout", "10")
    assert out.returncode == 2 and "not a member" in json.loads(out.stdout)["error"]
    out = delayq(n1, "undrain", "n2", "--timeout", "10")
    assert out.returncode == 2 and "'n2' is not drained" in out.stderr
    out = delayq(n1, "pin", "999", "n1", "--timeout", "10")
    assert out.returncode == 2 and "shard 999 does not exist" in out.stderr and "0-15" in out.stderr
    out = delayq(n1, "pin", "5", "node9", "--timeout", "10")
    assert out.returncode == 2 and "not a member" in out.stderr
    out = delayq(n1, "unpin", "5", "--timeout", "10")
    assert out.returncode == 2 and "shard 5 is not pinned" in out.stderr
    intents = json.loads(delayq(n1, "intents", "--json").stdout)
    assert intents == {"drained": [], "pinned": {}, "reshardTo": None}, "a refused command recorded something"
    # --force records it for a node that will join later.
    out = delayq(n1, "pin", "5", "node9", "--force", "--timeout", "10")
    assert out.returncode == 0, out.stderr
    assert json.loads(delayq(n1, "intents", "--json").stdout)["pinned"] == {"5": "node9"}
    assert delayq(n1, "unpin", "5", "--timeout", "10").returncode == 0



def test_a_reshard_to_the_current_count_says_nothing_changed_and_is_audited_so(cluster3):
    n1 = cluster3[0]
    out = delayq(n1, "reshard", "--shards", "16", "--timeout", "10")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "nothing changed: the cluster has 16 shards already"
    out = delayq(n1, "reshard", "--shards", "16", "--json", "--timeout", "10")
    assert json.loads(out.stdout) == {"from": 16, "to": 16, "changed": False}
    rows = json.loads(delayq(n1, "audit", "--action", "reshard", "--json").stdout)
    assert [(r["target"], r["outcome"]) for r in rows] == [("16", "unchanged"), ("16", "unchanged")]


def test_timeout_bounds_the_whole_wait_and_the_message_says_what_was_waited_for(cluster3):
    n1, n2, n3 = cluster3
    master = next(n for n in cluster3 if n.node_id == _info(n1).master)
    other = next(n for n in cluster3 if n is not master)
    master.kill(signal.SIGSTOP)
    try:
        started = time.monotonic()
        out = delayq(other, "rebalance", "--timeout", "2", "--endpoint", other.endpoint)
        took = time.monotonic() - started
    finally:
        master.kill(signal.SIGCONT)
    assert out.returncode == 1, out.stderr
    assert took < 2 + 4, f"--timeout 2 took {took:.1f} s"
    assert "--timeout 2 s" in out.stderr and "waited for the master" in out.stderr
    assert f"the master is {master.node_id}" in out.stderr


def test_status_marks_drained_nodes_and_pinned_shards_in_numeric_order(cluster3):
    n1 = cluster3[0]
    assert delayq(n1, "drain", "n3", "--timeout", "30").returncode == 0
    assert delayq(n1, "pin", "12", "n1", "--timeout", "30").returncode == 0
    text = delayq(n1, "status")
    assert text.returncode == 0, text.stderr
    n3_line = next(line for line in text.stdout.splitlines() if line.startswith("n3"))
    assert n3_line.rstrip().endswith("drained")
    assert "pinned shards: 12 -> n1" in text.stdout
    report = json.loads(delayq(n1, "status", "--json").stdout)
    assert list(report["assignment"]) == [str(s) for s in range(16)], "shards not in numeric order"
    assert report["drained"] == ["n3"] and report["pinned"] == {"12": "n1"}
    assert {n["node"]: n["drained"] for n in report["nodes"]} == {"n1": False, "n2": False, "n3": True}
    assert "oldestOverdueMs" in report and all("clockOffsetMs" in n for n in report["nodes"])


@pytest.mark.timeout(120)
def test_a_shrinking_reshard_gives_the_assignment_a_new_epoch_and_leaves_no_fence_on_a_removed_shard(tmp_path):
    """Two nodes own 8 of 16 shards each; at 15 the balance (8/7) needs no move, but the owner of
    shard 15 loses it: the assignment changed, so its epoch does. The fence a claim checks goes
    with the shard's row, so its former owner claims nothing under the grant it still remembers."""
    from sqlalchemy import create_engine, text
    from delayq.store.tasks import TaskStore
    from delayq.store.values import Entry
    with zk_cluster(tmp_path, 16, 2) as (db, (n1, _)):
        engine = create_engine(db.url)
        try:
            with engine.connect() as conn:
                owner, epoch = conn.execute(text("SELECT owner, epoch FROM job_shard WHERE shard_id = 15")).one()
            remembered = ([Entry("t-of-15", 15, 0)], owner, {15: epoch}, 1)
            assert TaskStore(engine).claim(*remembered).fenced == []     # held: it is still that owner's
            before = _info(n1)
            down = delayq(n1, "reshard", "--shards", "15", "--margin-ms", "1000", "--json", "--timeout", "60")
            assert down.returncode == 0, down.stderr
            after = _info(n1)
            assert sorted(after.assignment) == list(range(15))
            assert dict(after.assignment) == {s: n for s, n in before.assignment.items() if s < 15}
            assert after.epoch > before.epoch
            assert TaskStore(engine).claim(*remembered).fenced == [15]
        finally:
            engine.dispose()
