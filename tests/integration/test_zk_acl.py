"""ZooKeeper: delayq's znodes are readable and writable by delayq's identity alone
(DELAYQ_ZK_AUTH): no other session, anonymous or with another identity, can read the members,
change the assignment and the intents, or create, delete or re-ACL anything under /delayq; a node
refuses to join a cluster whose znode another identity made; a `delayq` command without the
identity, or with another, says which setting to give and exits 2.

The module runs under a ZooKeeper chroot of its own, so that /delayq is made here, by this
version, whatever the shared ZooKeeper's /delayq is."""
from __future__ import annotations

import subprocess
import sys
import uuid

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import ACL, ANYONE_ID_UNSAFE, OPEN_ACL_UNSAFE, Permissions, make_digest_acl

from conftest import ZK_HOSTS, wait_until
from delayq import zkauth
from delayq.testing import security
from delayq.zkpaths import Intents, ZkPaths

pytestmark = pytest.mark.integration


CHROOT = f"/zk-acl-{uuid.uuid4().hex[:8]}"
HOSTS = f"{ZK_HOSTS}{CHROOT}"


def session(**args) -> KazooClient:
    zk = KazooClient(hosts=HOSTS, timeout=5, **args)
    zk.start(timeout=5)
    return zk


@pytest.fixture(scope="module")
def chroot(node_factory):
    ours = KazooClient(hosts=ZK_HOSTS, timeout=5, **zkauth.kazoo_args(security.zk_auth()))
    ours.start(timeout=5)
    ours.create(CHROOT)
    try:
        yield HOSTS
    finally:
        node_factory.stop_all()      # their ephemeral znodes go with their sessions
        _remove(ours, CHROOT)
        ours.stop()
        ours.close()


def _remove(zk: KazooClient, path: str) -> None:
    """Delete path and what is under it; a znode this identity may not list (another identity's,
    made empty by a test) is deleted as its parent's owner."""
    try:
        children = zk.get_children(path)
    except NoAuthError:
        children = []
    for child in children:
        _remove(zk, f"{path}/{child}")
    zk.delete(path)


@pytest.fixture(scope="module")
def zk_node(node_factory, chroot):
    return node_factory(DELAYQ_ZK_ENABLED="true", DELAYQ_ZK_HOSTS=chroot)


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


def test_an_anonymous_session_cannot_create_delete_or_re_acl_under_delayq_or_the_cluster(paths):
    zk = session()
    try:
        for parent in (zkauth.ROOT, paths.root):
            with pytest.raises(NoAuthError):
                zk.create(f"{parent}/squat-{uuid.uuid4().hex[:6]}", b"")
            with pytest.raises(NoAuthError):
                zk.set_acls(parent, OPEN_ACL_UNSAFE)
            with pytest.raises(NoAuthError):
                zk.get_children(parent)
        with pytest.raises(NoAuthError):
            zk.delete(paths.nodes, recursive=False)
        with pytest.raises(NoAuthError):
            zk.delete(paths.intents)
        with pytest.raises(NoAuthError):
            zk.get_acls(zkauth.ROOT)         # the identity's digest stays unseen
    finally:
        zk.stop()
        zk.close()


def test_a_second_identity_runs_the_cluster_its_znode_was_made_for_and_cannot_read_ours(paths):
    """As docs/security.md says: /delayq's owner makes /delayq/<cluster> for the other identity."""
    other_auth = "someone:else-entirely"
    mine = f"{zkauth.ROOT}/other-{uuid.uuid4().hex[:6]}"
    ours = session(**zkauth.kazoo_args(security.zk_auth()))
    other = session(**zkauth.kazoo_args(other_auth))
    try:
        ours.create(mine, b"", acl=[make_digest_acl("someone", "else-entirely", all=True)])
        zkauth.claim_cluster(other, other_auth, mine)          # what its node does on starting: accepted
        other.create(f"{mine}/nodes")
        assert other.get_children(mine) == ["nodes"]
        with pytest.raises(NoAuthError):
            other.create(f"{zkauth.ROOT}/another-{uuid.uuid4().hex[:6]}", b"")
        with pytest.raises(NoAuthError):
            other.get_children(paths.root)
        with pytest.raises(NoAuthError):
            other.delete(f"{paths.root}/nodes", recursive=True)
        assert other.exists(paths.root)
    finally:
        other.delete(f"{mine}/nodes")
        ours.delete(mine)        # its parent's owner deletes it: the other identity may not, nor list it
        for zk in (ours, other):
            zk.stop()
            zk.close()


@pytest.mark.parametrize("acl, says", [
    ([make_digest_acl("intruder", "guess", all=True)], "ZooKeeper refused delayq's identity (NoAuth) on it"),
    ([make_digest_acl("intruder", "guess", all=True), make_digest_acl(*security.zk_auth().split(":", 1), read=True)],
     "its ACL gives digest:intruder, digest:delayq-test, not delayq's identity alone"),
    (OPEN_ACL_UNSAFE, "its ACL gives world:anyone, not delayq's identity alone"),
])
def test_a_node_refuses_to_start_on_a_cluster_znode_another_identity_made(node_factory, chroot, paths, acl, says):
    cluster = f"squat-{uuid.uuid4().hex[:6]}"
    ours = session(**zkauth.kazoo_args(security.zk_auth()))
    try:
        ours.create(f"{zkauth.ROOT}/{cluster}", b"", acl=acl)
    finally:
        ours.stop()
        ours.close()
    node = node_factory(start=False, DELAYQ_ZK_ENABLED="true", DELAYQ_ZK_HOSTS=chroot, DELAYQ_CLUSTER=cluster)
    node.start(wait=False)
    assert node.proc is not None
    node.proc.wait(60)
    log = node.log_path.read_text()
    assert node.proc.returncode == 2, log
    assert f"/delayq/{cluster} was created by another ZooKeeper identity ({says})" in log, log
    assert "registering" not in log                 # nothing was written under it first
    assert "Traceback" not in log and "guess" not in log and security.zk_auth().split(":", 1)[1] not in log


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


def test_a_node_logs_that_a_delayq_znode_an_older_version_left_open_is_open_and_leaves_it(node_factory, chroot, paths):
    ours = session(**zkauth.kazoo_args(security.zk_auth()))
    closed, _ = ours.get_acls(zkauth.ROOT)
    older = [ACL(Permissions.READ | Permissions.CREATE | Permissions.DELETE, ANYONE_ID_UNSAFE), *closed]
    ours.set_acls(zkauth.ROOT, older)
    try:
        node = node_factory(DELAYQ_ZK_ENABLED="true", DELAYQ_ZK_HOSTS=chroot,
                            DELAYQ_CLUSTER=f"older-{uuid.uuid4().hex[:6]}")
        assert "/delayq lets anyone create or delete a cluster's znode under it" in node.log_path.read_text()
        assert ours.get_acls(zkauth.ROOT)[0] == older
        node.stop()
    finally:
        ours.set_acls(zkauth.ROOT, closed)
        ours.stop()
        ours.close()
