"""Security as a client sees it, on a secured standalone node (TLS, clients with tokens and
grants): who may call what, how refusals read, what a revocation or rotation does to connections
already open, certificates, and the `delayq clients` command.
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid

import pytest
from thrift.transport import TTransport

from conftest import now_ms, wait_until
from delayq.client import CallbackService, CancelResult, DelayqClient, ResultStatus, TaskSpec, TaskStatus
from delayq.client.gen.delayq_thrift import ttypes
from delayq.client.security import ClientSecurity
from delayq.ops.certs import dev_set
from delayq.testing import security

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def topics(node) -> tuple[str, str]:
    """Two topics, A and B, registered by the admin."""
    a, b = f"a-{uuid.uuid4().hex[:6]}", f"b-{uuid.uuid4().hex[:6]}"
    with node.client() as admin:
        for t in (a, b):
            admin.registerService(CallbackService(topic=t, ttrMs=60_000))
    return a, b


def as_client(node, token: str = "", **tls) -> DelayqClient:
    return DelayqClient([node.endpoint], timeout_s=5,
                        security=ClientSecurity(ca_file=str(security.ensure() / "ca.pem"), token=token, **tls))


def refusals(node, reason: str) -> float:
    return node.metrics(labelled=True).get(f'delayq_refusals_total{{reason="{reason}"}}', 0.0)


def closed(node, reason: str) -> float:
    return node.metrics(labelled=True).get(f'delayq_thrift_connections_closed_total{{reason="{reason}"}}', 0.0)


def later(topic: str, task_id: str | None = None) -> TaskSpec:
    return TaskSpec(topic=topic, taskId=task_id, delayMs=600_000, payload=b"x")


# ---- identity ------------------------------------------------------------------------------------

def test_a_call_without_a_token_is_unauthenticated_and_counted(node, topics):
    before = refusals(node, "unauthenticated")
    with as_client(node) as c, pytest.raises(ttypes.Unauthenticated) as e:
        c.submit(later(topics[0]))
    assert "authenticate" in e.value.reason
    assert refusals(node, "unauthenticated") == before + 1


def test_a_wrong_token_is_refused_at_connect(node, clients, topics):
    token = clients.add(f"wrong-{uuid.uuid4().hex[:6]}", grants=(("submit", "*"),))
    name, _, _ = token.partition(".")
    before = refusals(node, "bad_token")
    for bad in (f"{name}.not-the-secret", "nobody.secret", "garbage"):
        with as_client(node, bad) as c, pytest.raises(ttypes.Unauthenticated):
            c.submit(later(topics[0]))
    assert refusals(node, "bad_token") == before + 3


def test_revoking_a_client_ends_its_open_connection_within_a_second(node, clients, topics):
    name = f"rev-{uuid.uuid4().hex[:6]}"
    token = clients.add(name, grants=(("submit", "*"),))
    with as_client(node, token) as c:
        c.submit(later(topics[0]))          # authenticated, connection open
        clients.revoke(name)
        revoked_at = time.monotonic()

        def refused():
            try:
                c.submit(later(topics[0]))
            except ttypes.Unauthenticated as e:
                return e
        e = wait_until(refused, 1.0, what="the revocation to hold")
        assert time.monotonic() - revoked_at < 1.0
        assert "revoked" in e.reason
    with as_client(node, token) as fresh, pytest.raises(ttypes.Unauthenticated):
        fresh.submit(later(topics[0]))


def test_a_rotated_token_stops_working_and_the_new_one_works(node, clients, topics):
    name = f"rot-{uuid.uuid4().hex[:6]}"
    old = clients.add(name, grants=(("submit", "*"),))
    with as_client(node, old) as c:
        c.submit(later(topics[0]))
        new = clients.rotate(name)
        wait_until(lambda: _refused(c, topics[0]), 1.0, what="the old token to stop working")
    with as_client(node, old) as c, pytest.raises(ttypes.Unauthenticated):
        c.submit(later(topics[0]))
    with as_client(node, new) as c:
        assert c.submit(later(topics[0])).created


def test_a_token_revoked_or_replaced_by_a_rotation_is_refused_as_such(node, clients, topics):
    name = f"old-{uuid.uuid4().hex[:6]}"
    first = clients.add(name, grants=(("read", "*"),))
    second = clients.rotate(name)
    clients.revoke(name)
    env = {**{k: v for k, v in node.env.items() if not k.startswith("DELAYQ_TOKEN")}, "DELAYQ_TOKEN": first}
    before = {why: refusals(node, why) for why in ("rotated", "revoked", "bad_token")}
    out = subprocess.run([sys.executable, "-m", "delayq", "status", "--endpoint", node.endpoint], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "not authenticated: the token was rotated" in out.stderr and "Traceback" not in out.stderr
    assert first.partition(".")[2] not in out.stdout + out.stderr
    with as_client(node, second) as c, pytest.raises(ttypes.Unauthenticated) as e:
        c.submit(later(topics[0]))
    assert e.value.reason == "the token was revoked"
    with as_client(node, f"{name}.{uuid.uuid4().hex}") as c, pytest.raises(ttypes.Unauthenticated) as e:
        c.submit(later(topics[0]))
    assert e.value.reason == "the token is not valid"
    assert {why: refusals(node, why) - n for why, n in before.items()} == {"rotated": 1, "revoked": 1, "bad_token": 1}


def test_only_a_clients_newest_retired_tokens_are_told_apart(node, clients, topics):
    from delayq.store.clients import RETIRED_KEPT
    name = f"many-{uuid.uuid4().hex[:6]}"
    issued = [clients.add(name, grants=(("submit", "*"),))]
    issued += [clients.rotate(name) for _ in range(RETIRED_KEPT + 1)]
    for token, says in ((issued[0], "the token is not valid"), (issued[1], "the token was rotated"),
                        (issued[-2], "the token was rotated")):
        with as_client(node, token) as c, pytest.raises(ttypes.Unauthenticated) as e:
            c.submit(later(topics[0]))
        assert e.value.reason.startswith(says)
    with as_client(node, issued[-1]) as c:
        assert c.submit(later(topics[0])).created


def _refused(c, topic) -> bool:
    try:
        c.submit(later(topic))
        return False
    except ttypes.Unauthenticated:
        return True


def test_a_client_certificate_names_its_client_without_a_token(node, clients, topics):
    name = f"cert-{uuid.uuid4().hex[:6]}"
    clients.add(name, token=False, grants=(("submit", topics[0]),))
    folder = security.ensure()
    dev_set(folder, clients=(name,))
    cert = dict(cert_file=str(folder / f"{name}.pem"), key_file=str(folder / f"{name}.key"))

    def known() -> bool:
        # The node learns of the new client within its watch's poll; until then, and while the
        # refusals of the tests before spent its fresh looks, a certificate names no client it knows.
        with as_client(node, **cert) as c:
            return not _refused(c, topics[0])
    wait_until(known, 10, what="the node to know the new client")
    with as_client(node, **cert) as c:
        assert c.submit(later(topics[0])).created
        with pytest.raises(ttypes.Forbidden):
            c.submit(later(topics[1]))


def test_a_certificate_from_another_ca_is_refused_in_the_handshake(node, tmp_path):
    dev_set(tmp_path, clients=("stranger",))        # a CA of its own
    before = closed(node, "tls_handshake")
    with pytest.raises(TTransport.TTransportException):
        with as_client(node, cert_file=str(tmp_path / "stranger.pem"), key_file=str(tmp_path / "stranger.key")) as c:
            c.submit(later("any"))
    wait_until(lambda: closed(node, "tls_handshake") > before, 5, what="the failed handshake to be counted")
    # And a client that trusts only that other CA does not accept the node's certificate.
    other = DelayqClient([node.endpoint], timeout_s=5, security=ClientSecurity(ca_file=str(tmp_path / "ca.pem")))
    with pytest.raises(TTransport.TTransportException) as e, other:
        other.cluster()
    assert "TLS with" in str(e.value) and "CERTIFICATE_VERIFY_FAILED" in str(e.value).upper().replace(" ", "_")


def test_plaintext_to_the_tls_port_is_closed_and_counted(node):
    before = closed(node, "tls_handshake")
    with DelayqClient([node.endpoint], timeout_s=5, security=ClientSecurity(insecure=True)) as c:
        with pytest.raises(TTransport.TTransportException):
            c.cluster()
    wait_until(lambda: closed(node, "tls_handshake") > before, 5, what="the plaintext call to be counted")


def test_a_stalled_handshake_does_not_hold_up_other_clients(node, topics):
    stalled = socket.create_connection(("127.0.0.1", node.port), timeout=5)
    stalled.sendall(b"\x16\x03\x01\x00\xff")        # the head of a ClientHello, and no more
    try:
        started = time.monotonic()
        with node.client() as c:
            assert c.submit(later(topics[0])).created
        assert time.monotonic() - started < 2.0
        before = closed(node, "tls_handshake_timeout")
        stalled.settimeout(10)
        assert stalled.recv(1) == b""               # closed by the node after its first-frame timeout
        wait_until(lambda: closed(node, "tls_handshake_timeout") > before, 5, what="the stall to be counted")
    finally:
        stalled.close()


# ---- permissions ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def only_a(node, clients, topics) -> DelayqClient:
    """A client allowed everything on topic A, nothing on B."""
    a, _ = topics
    token = clients.add(f"only-a-{uuid.uuid4().hex[:6]}",
                        grants=tuple((p, a) for p in ("submit", "cancel", "read", "report")))
    with as_client(node, token) as c:
        yield c


def test_a_client_allowed_on_a_is_forbidden_to_submit_to_b(node, only_a, topics):
    a, b = topics
    assert only_a.submit(later(a)).created
    before = refusals(node, "forbidden")
    with pytest.raises(ttypes.Forbidden) as e:
        only_a.submit(later(b))
    assert (e.value.permission, e.value.topic) == ("submit", b)
    assert refusals(node, "forbidden") == before + 1


def test_a_batch_mixing_a_and_b_is_refused_whole(node, only_a, topics):
    a, b = topics
    ids = [f"mix-{uuid.uuid4().hex[:8]}-{i}" for i in range(3)]
    with pytest.raises(ttypes.Forbidden) as e:
        only_a.submitBatch([later(a, ids[0]), later(b, ids[1]), later(a, ids[2])])
    assert e.value.topic == b
    with node.client() as admin:
        for task_id in ids:
            with pytest.raises(ttypes.NotFound):
                admin.get(task_id)


def test_tasks_of_b_are_not_found_for_a_client_of_a(node, only_a, topics):
    """Cancel, reschedule, get and reportResult on B's task: the client learns nothing of it,
    and the task is untouched."""
    _, b = topics
    task_id = f"b-task-{uuid.uuid4().hex[:8]}"
    with node.client() as admin:
        admin.submit(later(b, task_id))
    before = refusals(node, "hidden")
    assert only_a.cancel(task_id) == CancelResult.NOT_FOUND
    with pytest.raises(ttypes.NotFound):
        only_a.reschedule(task_id, now_ms() + 5_000)
    with pytest.raises(ttypes.NotFound):
        only_a.get(task_id)
    with pytest.raises(ttypes.NotFound):
        only_a.reportResult(task_id, 1, ResultStatus.SUCCESS, "")
    assert refusals(node, "hidden") == before + 4
    with node.client() as admin:
        info = admin.get(task_id)
    assert info.status == TaskStatus.DELAY and info.attempt == 0


def test_listing_services_shows_only_the_clients_topics(only_a, topics):
    assert [s.topic for s in only_a.listServices()] == [topics[0]]


def test_a_client_without_admin_cannot_register_services_or_read_the_cluster(only_a, topics):
    with pytest.raises(ttypes.Forbidden) as e:
        only_a.registerService(CallbackService(topic=topics[0], exchange="elsewhere"))
    assert (e.value.permission, e.value.topic) == ("admin", "")
    with pytest.raises(ttypes.Forbidden):
        only_a.cluster()


def test_a_client_with_no_cancel_grant_is_forbidden_without_naming_a_topic(node, clients, topics):
    token = clients.add(f"sub-{uuid.uuid4().hex[:6]}", grants=(("submit", "*"),))
    with as_client(node, token) as c:
        ref = c.submit(later(topics[0]))
        with pytest.raises(ttypes.Forbidden) as e:
            c.cancel(ref.taskId)
    assert (e.value.permission, e.value.topic) == ("cancel", "")


# ---- the command ---------------------------------------------------------------------------------

def delayq(database, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DELAYQ_MYSQL_URL": database.url}
    return subprocess.run([sys.executable, "-m", "delayq", "clients", *args], env=env, capture_output=True,
                          text=True, timeout=60)


def test_the_clients_command_adds_grants_lists_rotates_and_revokes(node, database, topics, tmp_path):
    name = f"cli-{uuid.uuid4().hex[:6]}"
    added = delayq(database, "add", name, "--grant", f"submit:{topics[0]}")
    assert added.returncode == 0, added.stderr
    token = added.stdout.strip()
    with as_client(node, token) as c:
        assert c.submit(later(topics[0])).created
    assert delayq(database, "grant", name, "read:*").returncode == 0
    listed = json.loads(delayq(database, "list", "--json").stdout)
    mine = next(c for c in listed if c["name"] == name)
    assert mine == {"name": name, "token": True, "revoked": False, "tenant": None,
                    "grants": ["read:*", f"submit:{topics[0]}"]}
    assert token.split(".", 1)[1] not in delayq(database, "list").stdout
    token_file = tmp_path / "token"
    assert delayq(database, "rotate", name, "--token-file", str(token_file)).returncode == 0
    assert token_file.stat().st_mode & 0o077 == 0
    with as_client(node, token_file.read_text().strip()) as c:
        assert c.submit(later(topics[0])).created
    assert delayq(database, "revoke", name).returncode == 0
    assert next(c for c in json.loads(delayq(database, "list", "--json").stdout) if c["name"] == name)["revoked"]


@pytest.mark.parametrize("args, says", [
    (("add", "Bad Name"), "client name"),
    (("add", "ok-name", "--grant", "fly:*"), "unknown permission"),
    (("add", "ok-name2", "--grant", "admin:orders.*"), "cluster-wide"),
    (("grant", "nobody-here", "read:*"), "no client"),
    (("revoke", "nobody-here"), "no client"),
    (("rotate", "nobody-here"), "no client"),
])
def test_the_clients_command_refuses_bad_input_with_exit_2(database, args, says):
    out = delayq(database, *args)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert says in out.stderr and "Traceback" not in out.stderr


def test_a_token_file_that_cannot_be_written_is_refused_before_the_client_changes(node, database, topics):
    name = f"tf-{uuid.uuid4().hex[:6]}"
    added = delayq(database, "add", name, "--grant", f"submit:{topics[0]}")
    assert added.returncode == 0, added.stderr
    token = added.stdout.strip()
    for args in (("rotate", name), ("add", f"{name}-2", "--grant", f"submit:{topics[0]}")):
        out = delayq(database, *args, "--token-file", "/nonexistent/dir/t")
        assert out.returncode == 2, (out.stdout, out.stderr)
        assert "Invalid value for '--token-file'" in out.stderr and "/nonexistent/dir/t" in out.stderr
        assert "Traceback" not in out.stderr
    with as_client(node, token) as c:                   # not rotated: the old token still works
        assert c.submit(later(topics[0])).created
    assert f"{name}-2" not in [c["name"] for c in json.loads(delayq(database, "list", "--json").stdout)]


def test_a_payload_over_the_frame_cap_is_refused_with_exit_2_and_the_node_serves_on(node, topics, tmp_path):
    big = tmp_path / "big"
    big.write_bytes(b"x" * 9_000_000)
    out = subprocess.run([sys.executable, "-m", "delayq", "tasks", "submit", topics[0], "--delay", "60s",
                          "--payload-file", str(big), "--endpoint", node.endpoint], env=node.env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "payload: 9000000 bytes is larger than a node accepts" in out.stderr
    assert "DELAYQ_MAX_FRAME_BYTES" in out.stderr and "Traceback" not in out.stderr
    # Under the cap but over DELAYQ_MAX_PAYLOAD_BYTES: the node's own answer, naming the field.
    big.write_bytes(b"x" * 100_000)
    out = subprocess.run([sys.executable, "-m", "delayq", "tasks", "submit", topics[0], "--delay", "60s",
                          "--payload-file", str(big), "--endpoint", node.endpoint], env=node.env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stderr.startswith("error: payload:"), out.stderr


def test_a_command_without_a_token_says_so_and_exits_2(node):
    env = {k: v for k, v in node.env.items() if not k.startswith("DELAYQ_TOKEN")}
    out = subprocess.run([sys.executable, "-m", "delayq", "status", "--endpoint", node.endpoint], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "not authenticated" in out.stderr and "DELAYQ_TOKEN" in out.stderr and "Traceback" not in out.stderr

