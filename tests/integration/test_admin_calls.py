"""The admin calls over Thrift, as an admin client and as one without `admin`: the cluster's layout
(drain, undrain, pin, unpin, reshard), redrive, and client management, on secured nodes. Each is
refused to a non-admin (counted, and in the audit log), checks its arguments against the cluster
as it is, and does what the operator's `delayq` command does."""
from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import uuid

import pytest

from conftest import Collector, per_node, wait_until, zk_cluster
from delayq.client import CallbackService, DelayqClient, ResultStatus, TaskSpec, TaskStatus
from delayq.client.gen.delayq_thrift import ttypes
from delayq.client.security import ClientSecurity
from delayq.testing import security

pytestmark = pytest.mark.integration

ADMIN_CALLS = [("drain", ("n1", False)), ("undrain", ("n1",)), ("pin", (0, "n1", False)), ("unpin", (0,)),
               ("intents", ()), ("reshard", (8,)), ("redrive", (ttypes.RedriveFilter(topic="t"),)),
               ("addClient", ("someone", [], False)), ("grantClient", ("someone", ttypes.Grant("read", "*"))),
               ("revokeClient", ("someone", None)), ("rotateClient", ("someone",)), ("listClients", ())]


def as_client(node, token: str) -> DelayqClient:
    return DelayqClient([node.endpoint], timeout_s=10,
                        security=ClientSecurity(ca_file=str(security.ensure() / "ca.pem"), token=token))


def audit(database, *filters: str) -> list[tuple]:
    out = subprocess.run([sys.executable, "-m", "delayq", "audit", "--json", *filters], capture_output=True,
                         text=True, timeout=60, env={**os.environ, "DELAYQ_MYSQL_URL": database.url})
    assert out.returncode == 0, out.stderr
    return [(r["actor"], r["action"], r["target"], r["outcome"]) for r in json.loads(out.stdout)]


def test_a_client_without_admin_is_forbidden_every_admin_call_and_each_is_recorded(node, database, clients):
    name = f"plain-{uuid.uuid4().hex[:6]}"
    token = clients.add(name, grants=(("submit", "*"), ("read", "*"), ("cancel", "*"), ("report", "*")))
    before = node.metrics(labelled=True).get('delayq_refusals_total{reason="forbidden"}', 0.0)
    with as_client(node, token) as c:
        for method, args in ADMIN_CALLS:
            with pytest.raises(ttypes.Forbidden) as e:
                getattr(c, method)(*args)
            assert (e.value.permission, e.value.topic) == ("admin", ""), method
    after = node.metrics(labelled=True).get('delayq_refusals_total{reason="forbidden"}', 0.0)
    assert after - before == len(ADMIN_CALLS)
    rows = audit(database, "--actor", name)
    for action, target in [("drain", "n1"), ("pin", "0 n1"), ("reshard", "8"), ("redrive", "topic=t"),
                           ("addClient", "someone"), ("revokeClient", "someone"), ("rotateClient", "someone")]:
        assert (name, action, target, "refused: forbidden") in rows, (action, rows)
    assert not [r for r in rows if r[1] in ("intents", "listClients")], "reads are not audited"
    assert "someone" not in {c.name for c in clients.list()}


def test_layout_calls_on_a_node_without_zookeeper_say_so(node):
    with node.client() as admin:
        for method, args in ADMIN_CALLS[:6]:
            with pytest.raises(ttypes.InvalidRequest) as e:
                getattr(admin, method)(*args)
            assert e.value.field == "cluster" and "without ZooKeeper" in e.value.reason


def test_an_admin_manages_clients_and_each_change_holds_at_once(node, database, topic):
    name = f"managed-{uuid.uuid4().hex[:6]}"
    with node.client() as admin:
        token = admin.addClient(name, [ttypes.Grant("submit", topic)], False)
        assert token.startswith(f"{name}.")
        with as_client(node, token) as c:
            task_id = c.submit(TaskSpec(topic=topic, delayMs=600_000)).taskId
            with pytest.raises(ttypes.Forbidden):
                c.get(task_id)
            admin.grantClient(name, ttypes.Grant("read", topic))
            wait_until(lambda: [s.topic for s in c.listServices()] == [topic], 1.0, what="the read grant")
            assert c.get(task_id).topic == topic
            listed = {i.name: i for i in admin.listClients()}[name]
            assert (listed.hasToken, listed.revoked) == (True, False)
            assert {(g.permission, g.pattern) for g in listed.grants} == {("submit", topic), ("read", topic)}
            fresh = admin.rotateClient(name)
            wait_until(lambda: _raises(ttypes.Unauthenticated, lambda: c.get(task_id)), 1.0,
                       what="the old token to stop working")
        with as_client(node, token) as c, pytest.raises(ttypes.Unauthenticated):
            c.get(task_id)
        with as_client(node, fresh) as c:
            admin.revokeClient(name, ttypes.Grant("read", topic))
            wait_until(lambda: _raises(ttypes.Forbidden, lambda: c.get(task_id)), 1.0, what="the read grant to go")
            admin.revokeClient(name, None)
            later = TaskSpec(topic=topic, delayMs=600_000)
            wait_until(lambda: _raises(ttypes.Unauthenticated, lambda: c.submit(later)), 1.0, what="the revocation")
        # Bad input names the argument; nothing is changed.
        for call, field in [(lambda: admin.addClient("Bad Name!", [], False), "name"),
                            (lambda: admin.addClient(name, [], False), "name"),
                            (lambda: admin.addClient("x-" + name, [ttypes.Grant("admin", "orders")], False), "grant"),
                            (lambda: admin.addClient("x-" + name, [ttypes.Grant("fly", "*")], False), "grant"),
                            (lambda: admin.rotateClient("nobody-" + name), "name"),
                            (lambda: admin.revokeClient(name, ttypes.Grant("cancel", topic)), "grant")]:
            with pytest.raises(ttypes.InvalidRequest) as e:
                call()
            assert e.value.field == field, (e.value, field)
        assert "x-" + name not in {i.name for i in admin.listClients()}
    rows = audit(database, "--action", "addClient")
    assert (security.ADMIN, "addClient", f"{name} submit:{topic}", "ok") in rows
    assert (security.ADMIN, "rotateClient", name, "ok") in audit(database, "--action", "rotateClient")


def _raises(error: type, call) -> bool:
    try:
        call()
    except error:
        return True
    return False


def test_an_admin_redrives_failed_tasks_and_they_fire_again(node, database):
    topic = f"rd-{uuid.uuid4().hex[:6]}"
    collector = Collector("delayq", topic)
    try:
        with node.client() as admin:
            admin.registerService(CallbackService(topic=topic, ttrMs=60_000, maxRetries=0))
            ids = [admin.submit(TaskSpec(topic=topic, delayMs=50, payload=b"r")).taskId for _ in range(3)]
            collector.wait_for(3, 15)
            for task_id in ids:
                assert admin.reportResult(task_id, 1, ResultStatus.FATAL, "broken") == ttypes.ReportOutcome.APPLIED
            assert {admin.get(t).status for t in ids} == {TaskStatus.FAILED}
            for bad, field in [(ttypes.RedriveFilter(), "filter"),
                               (ttypes.RedriveFilter(taskIds=["ok", "no spaces"]), "taskIds[1]"),
                               (ttypes.RedriveFilter(taskIds=[f"t{i}" for i in range(501)]), "taskIds")]:
                with pytest.raises(ttypes.InvalidRequest) as e:
                    admin.redrive(bad)
                assert e.value.field == field
            one = admin.redrive(ttypes.RedriveFilter(taskIds=[ids[0]]))
            assert (one.redriven, one.more) == (1, False)
            rest = admin.redrive(ttypes.RedriveFilter(topic=topic))
            assert (rest.redriven, rest.more) == (2, False)
            assert admin.redrive(ttypes.RedriveFilter(topic=topic)).redriven == 0
            # Written to MySQL like `delayq tasks redrive`: fired within DELAYQ_FULL_SCAN_MS.
            received = collector.wait_for(6, 30)
        assert sorted(m.properties.message_id for m in received) == sorted(f"{t}:{a}" for t in ids for a in (1, 2))
    finally:
        collector.close()
    rows = audit(database, "--action", "redrive")
    assert (security.ADMIN, "redrive", f"id={ids[0]}", "redriven 1") in rows
    assert (security.ADMIN, "redrive", f"topic={topic}", "redriven 2") in rows


@pytest.fixture
def cluster2(tmp_path):
    """Two ZooKeeper nodes on a fresh 8-shard database."""
    with zk_cluster(tmp_path, 8, 2) as (db, nodes):
        yield db, nodes


@pytest.mark.timeout(180)
def test_an_admin_drains_pins_and_reshards_a_running_cluster(cluster2):
    db, (n1, n2) = cluster2
    with n1.client() as admin:
        with pytest.raises(ttypes.InvalidRequest) as e:
            admin.drain("node9", False)
        assert e.value.field == "nodeId" and "'node9' is not a member" in e.value.reason and "n1, n2" in e.value.reason
        with pytest.raises(ttypes.InvalidRequest) as e:
            admin.pin(99, "n1", False)
        assert e.value.field == "shard" and "shard 99 does not exist" in e.value.reason and "0-7" in e.value.reason
        with pytest.raises(ttypes.InvalidRequest) as e:
            admin.undrain("n2")
        assert "'n2' is not drained" in e.value.reason
        for call in (lambda: admin.drain("", True), lambda: admin.drain("a/b", True),
                     lambda: admin.pin(0, "x\x1by", True), lambda: admin.undrain("a/b")):
            with pytest.raises(ttypes.InvalidRequest) as e:      # no node can have these names, force or not
                call()
            assert e.value.field == "nodeId" and ("is required" in e.value.reason or "must not hold" in e.value.reason)
        assert admin.intents() == ttypes.Intents(drained=[], pinned={}, reshardTo=None)

        assert admin.drain("n2", False).drained == ["n2"]
        wait_until(lambda: per_node(n1) == {"n1": 8}, 15, 0.1, what="n2 drained")
        assert admin.pin(3, "n2", False).pinned == {3: "n2"}       # a pin wins over a drain
        wait_until(lambda: per_node(n1) == {"n1": 7, "n2": 1}, 15, 0.1, what="shard 3 pinned to n2")
        admin.unpin(3)
        admin.undrain("n2")
        wait_until(lambda: sorted(per_node(n1).values()) == [4, 4], 15, 0.1, what="n2 back")

        topic = f"rs-{uuid.uuid4().hex[:6]}"
        admin.registerService(CallbackService(topic=topic, ttrMs=0))
        collector = Collector("delayq", topic)
        try:
            near = {admin.submit(TaskSpec(topic=topic, delayMs=d, payload=b"x")).taskId for d in range(200, 4000, 200)}
            far = {admin.submit(TaskSpec(topic=topic, delayMs=600_000, payload=b"x")).taskId for _ in range(40)}
            started = admin.reshard(12)
            assert (started.fromShards, started.toShards, started.started) == (8, 12, True)
            with pytest.raises(ttypes.InvalidRequest) as e:
                admin.reshard(16)
            assert "a reshard to 12 shards is in progress" in e.value.reason

            def finished() -> bool:
                s = admin.reshard(12)
                assert s.error is None, s.error
                return not s.running
            wait_until(finished, 60, 0.2, what="the reshard to finish")
            assert admin.cluster().shardCount == 12 and admin.intents().reshardTo is None
            done = admin.reshard(12)
            assert (done.fromShards, done.toShards, done.running, done.error, done.started) == (8, 12, False, None, False)
            shards = {t: admin.get(t).shardId for t in far}
            assert done.moved >= sum(1 for s in shards.values() if s >= 8) > 0, (done.moved, shards)
            assert set(shards.values()) <= set(range(12))
            wait_until(lambda: near <= set(collector.task_ids()), 20, what="every near task to fire")
            assert max(collections.Counter(collector.task_ids()).values()) == 1
            assert not far & set(collector.task_ids())
        finally:
            collector.close()
    rows = audit(db, "--actor", security.ADMIN)
    for action, target in [("drain", "n2"), ("pin", "3 n2"), ("unpin", "3"), ("undrain", "n2"), ("reshard", "12")]:
        assert (security.ADMIN, action, target, "ok") in rows, action
    assert (security.ADMIN, "drain", "node9", "InvalidRequest") in rows
    # The run is recorded once, the refused second target too; polls of its progress are not.
    assert [r for r in rows if r[1] == "reshard"] == [(security.ADMIN, "reshard", "16", "InvalidRequest"),
                                                      (security.ADMIN, "reshard", "12", "ok")]
