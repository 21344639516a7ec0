"""ZooKeeper: delayq's znodes are readable and writable by delayq's identity alone
(DELAYQ_ZK_AUTH): no other session, anonymous or with another identity, can read the members or
change the assignment and the intents; a `delayq` command without the identity, or with another,
says which setting to give and exits 2."""
from __future__ import annotations

import subprocess
import sys

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from conftest import ZK_HOSTS, wait_until
from delayq import zkauth
from delayq.testing import security
from delayq.zkpaths import Intents, ZkPaths

pytestmark = pytest.mark.integration


def session(**args) -> KazooClient:
    zk = KazooClient(hosts=ZK_HOSTS, timeout=5, **args)
    zk.start(timeout=5)
    return zk


@pytest.fixture(scope="module")
def zk_node(node_factory):
    return node_factory(DELAYQ_ZK_ENABLED="true")


@pytest.fixture(scope="module")
def paths(zk_node, database) -> ZkPaths:
    paths = ZkPaths(database.name)
    ours = session(**zkauth.kazoo_args(security.zk_auth()))
    try:
        wait_until(lambda: ours.exists(paths.assignment), 20, what="the master's first assignment")
        if not ours.exists(paths.intents):
            ours.create(paths.intents, Intents().encode())
    finally:
        ours.stop()
        ours.close()
    return paths


def test_every_znode_carries_delayqs_identity_alone(paths):
    ours = session(**zkauth.kazoo_args(security.zk_auth()))
    try:
        user = security.zk_auth().split(":", 1)[0]
        for path in (paths.root, paths.nodes, paths.assignment, paths.intents,
                     *(paths.member(m) for m in ours.get_children(paths.nodes))):
            acls, _ = ours.get_acls(path)
            assert [(a.id.scheme, a.id.id.split(":")[0], a.perms) for a in acls] == [("digest", user, 31)], path
    finally:
        ours.stop()
        ours.close()


@pytest.mark.parametrize("who", ["anonymous", "another identity"])
def test_no_other_session_can_read_the_members_or_change_the_assignment_or_intents(paths, who):
    zk = session(**({} if who == "anonymous" else {"auth_data": [("digest", "intruder:guess")]}))
    try:
        with pytest.raises(NoAuthError):
            zk.get_children(paths.nodes)
        with pytest.raises(NoAuthError):
            zk.get(paths.assignment)
        with pytest.raises(NoAuthError):
            zk.set(paths.assignment, b'{"epoch": 999999, "shards": {}}')
        with pytest.raises(NoAuthError):
            zk.set(paths.intents, Intents(drained=frozenset({"n1"})).encode())
        with pytest.raises(NoAuthError):
            zk.delete(paths.intents)
        with pytest.raises(NoAuthError):
            zk.create(f"{paths.election}/intruder__", b"", ephemeral=True, sequence=True)
    finally:
        zk.stop()
        zk.close()


def test_another_identity_runs_its_own_cluster_beside_ours_and_cannot_read_ours(paths):
    other = session(**zkauth.kazoo_args("someone:else-entirely"))
    try:
        zkauth.ensure_root(other, "someone:else-entirely")     # /delayq is there already: nothing changes
        mine = f"/delayq/other-{paths.root.rsplit('/', 1)[1]}"
        other.create(f"{mine}/nodes", makepath=True)            # a cluster of its own under the shared root
        assert other.get_children(mine) == ["nodes"]
        with pytest.raises(NoAuthError):
            other.get_children(paths.root)
        with pytest.raises(NoAuthError):
            other.delete(f"{paths.root}/nodes", recursive=True)
        assert other.exists(paths.root)
        other.delete(mine, recursive=True)
    finally:
        other.stop()
        other.close()


@pytest.mark.parametrize("auth, says", [
    ({}, "give delayq's ZooKeeper identity (user:password, as the nodes have it) in DELAYQ_ZK_AUTH or "
         "DELAYQ_ZK_AUTH_FILE"),
    ({"DELAYQ_ZK_AUTH": "intruder:guess"}, "ZooKeeper refused delayq's identity: DELAYQ_ZK_AUTH (or DELAYQ_ZK_AUTH_FILE)"),
])
@pytest.mark.parametrize("command", [["status"], ["tasks", "get", "t-1"], ["topics", "list"], ["intents"],
                                     ["status", "--json"]])
def test_a_command_without_delayqs_identity_says_which_setting_to_give_and_exits_2(zk_node, paths, auth, says,
                                                                                    command):
    env = {**{k: v for k, v in zk_node.env.items() if not k.startswith("DELAYQ_ZK_AUTH")}, **auth}
    out = subprocess.run([sys.executable, "-m", "delayq", *command], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2, (out.stdout, out.stderr)
    shown = out.stdout if "--json" in command else out.stderr
    assert says in shown and "Traceback" not in out.stderr and "guess" not in shown
