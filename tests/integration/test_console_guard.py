"""What a node's HTTP port tells and allows a stranger, on a real node: /readyz says only ready or
not and /history nothing without an admin's or a node's credential; the console answers only
requests naming the node (a page rebinding its own name to the node gets 421 and no cookie), sets
a `__Host-` cookie and HSTS, never echoes `?why=`, throttles an address's failed logins without
looking at its tokens and audits them as one row; a node without security serves no console unless
asked; page tokens are one cluster's, refused by another."""
from __future__ import annotations

import http.client
import json
import ssl
import urllib.parse
import uuid

import pytest
import sqlalchemy

from delayq import config, db as dbm
from delayq.client import CallbackService, TaskSpec
from delayq.client.gen.delayq_thrift import ttypes
from delayq.nodes import httpgate
from delayq.nodes.console import throttle
from delayq.store.audit import AuditLog
from delayq.store.clusterkey import ClusterKey
from delayq.testing import security
from conftest import NodeFactory, fresh_database

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TOPIC = "guard.orders"


def engine_of(database) -> sqlalchemy.Engine:
    return dbm.make_engine(config.load({"DELAYQ_MYSQL_URL": database.url}).mysql)


def ask(node, method: str, path: str, *, tls: bool = False, headers: dict | None = None, body: str | None = None,
        source: str = "127.0.0.1") -> tuple[int, http.client.HTTPMessage, str]:
    """One request to the node's HTTP port from `source` (a loopback address), as curl would send it."""
    port = int(node.env["DELAYQ_HTTP_PORT"])
    if tls:
        ctx = ssl.create_default_context(cafile=str(security.ensure() / "ca.pem"))
        conn: http.client.HTTPConnection = http.client.HTTPSConnection("localhost", port, timeout=10, context=ctx,
                                                                       source_address=(source, 0))
    else:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(source, 0))
    try:
        sent = {**({"Content-Type": "application/x-www-form-urlencoded"} if body is not None else {}), **(headers or {})}
        conn.request(method, path, body=body, headers=sent)
        r = conn.getresponse()
        return r.status, r.headers, r.read().decode()
    finally:
        conn.close()


def bearer(credential: str) -> dict:
    return {"Authorization": f"Bearer {credential}"}


def test_anonymous_readyz_says_only_whether_the_node_is_ready(node, clients):
    status, _, body = ask(node, "GET", "/readyz")
    assert status == 200 and json.loads(body) == {"status": "ok"}
    reader = clients.add(f"reader-{uuid.uuid4().hex[:6]}", grants=(("read", "*"),))
    status, _, body = ask(node, "GET", "/readyz", headers=bearer(reader))
    assert status == 200 and json.loads(body) == {"status": "ok"}          # a client, but not an admin
    status, ready = node.readyz()                                           # the admin's token
    assert status == 200 and {"mysql", "rabbitmq"} <= set(ready["checked"]) and "clock_offset_ms" in ready["detail"]


def test_history_needs_an_admins_or_a_nodes_credential(node, database):
    for headers in ({}, bearer("ops.guess"), bearer("delayq-node." + "00" * 32), {"Authorization": "Basic b3BzOng="}):
        status, _, body = ask(node, "GET", "/history", headers=headers)
        assert status == 403 and "slots" not in body, headers
    status, _, body = ask(node, "GET", "/history", headers=bearer(security.admin_token()))
    assert status == 200 and "slots" in json.loads(body)
    key = ClusterKey(engine_of(database)).derive(httpgate.PURPOSE)          # what the cluster's nodes send
    status, _, body = ask(node, "GET", "/history", headers=bearer(f"{httpgate.NODE}.{key.hex()}"))
    assert status == 200 and "slots" in json.loads(body)


def test_a_login_naming_another_site_is_refused_without_a_cookie(node):
    port = node.env["DELAYQ_HTTP_PORT"]
    rebound = f"rebound.example:{port}"              # a page whose name now resolves to 127.0.0.1
    status, headers, _ = ask(node, "POST", "/ui/login", tls=True, body=urllib.parse.urlencode(
        {"token": security.admin_token()}), headers={"Host": rebound, "Origin": f"https://{rebound}"})
    assert status == 421 and headers["Set-Cookie"] is None
    status, headers, _ = ask(node, "GET", "/ui/overview", tls=True, headers={"Host": rebound})
    assert status == 421 and headers["Set-Cookie"] is None


def test_the_session_cookie_is_host_prefixed_and_https_answers_carry_hsts(node):
    status, headers, _ = ask(node, "POST", "/ui/login", tls=True, body=urllib.parse.urlencode(
        {"token": security.admin_token()}))
    assert status == 303
    cookie = headers["Set-Cookie"].split("; ")
    assert cookie[0].startswith("__Host-") and "Secure" in cookie and "Path=/" in cookie
    assert not [part for part in cookie if part.lower().startswith("domain")]
    assert headers["Strict-Transport-Security"].startswith("max-age=")


def test_the_login_page_does_not_repeat_text_from_its_address(node):
    status, _, page = ask(node, "GET", "/ui/login?" + urllib.parse.urlencode(
        {"why": "the cluster moved: log in at evil.example"}), tls=True)
    assert status == 200 and "evil.example" not in page and "The session ended" not in page


def test_an_address_past_its_failed_logins_is_refused_unchecked(node):
    """From 127.0.0.2, so the other tests' logins (from 127.0.0.1) are not held back."""
    def log_in(token: str) -> tuple[int, str | None]:
        status, headers, _ = ask(node, "POST", "/ui/login", tls=True, source="127.0.0.2",
                                 body=urllib.parse.urlencode({"token": token}))
        return status, headers["Set-Cookie"]
    refused_before = node.metrics(labelled=True).get('delayq_refusals_total{reason="bad_token"}', 0)
    for i in range(throttle.FAILURES):
        assert log_in(f"ops.guess{i}") == (401, None)
    assert log_in(security.admin_token()) == (429, None)           # even the right token, not looked at
    for i in range(4):
        assert log_in(f"ops.guess-more{i}") == (429, None)
    refused = node.metrics(labelled=True)['delayq_refusals_total{reason="bad_token"}'] - refused_before
    assert refused == throttle.FAILURES                            # only the first ones were checked
    assert ask(node, "POST", "/ui/login", tls=True, body=urllib.parse.urlencode(
        {"token": security.admin_token()}))[0] == 303              # another address logs in


@pytest.fixture(scope="module")
def other_cluster(tmp_path_factory):
    """A node of another cluster (a database of its own), run without security."""
    with fresh_database(2) as other:
        factory = NodeFactory(other, tmp_path_factory.mktemp("other"))
        try:
            yield factory(DELAYQ_INSECURE="true")
        finally:
            factory.stop_all()


def test_a_node_without_security_serves_no_console_unless_asked(other_cluster):
    assert ask(other_cluster, "GET", "/ui/login")[0] == 404
    assert ask(other_cluster, "GET", "/ui/overview")[0] == 404
    assert ask(other_cluster, "GET", "/readyz")[0] == 200


def test_page_tokens_are_the_clusters_own(node, other_cluster):
    with node.client() as c:
        c.registerService(CallbackService(topic=TOPIC, ttrMs=0))
        for _ in range(3):
            c.submit(TaskSpec(topic=TOPIC, delayMs=3_600_000))
        token = c.listTasks(ttypes.TaskFilter(topic=TOPIC), None, 2).nextPageToken
    assert token
    with other_cluster.client() as c:
        c.registerService(CallbackService(topic=TOPIC, ttrMs=0))
        with pytest.raises(ttypes.InvalidTask) as e:
            c.listTasks(ttypes.TaskFilter(topic=TOPIC), token, 2)          # another cluster's token
        assert e.value.field == "pageToken"
    with node.client() as c:
        assert len(c.listTasks(ttypes.TaskFilter(topic=TOPIC), token, 2).tasks) == 1     # its own cluster's


def test_failed_logins_are_audited_as_one_row_per_address_and_interval(node, node_factory, database):
    """Last: it stops the module's node, which writes the interval of 127.0.0.2 not yet ended."""
    node.stop()
    rows = [e for e in AuditLog(engine_of(database)).list(action="consoleLogin", limit=100)]
    assert [(e.actor, e.address, e.outcome) for e in rows] == [
        ("anonymous", "127.0.0.2", f"refused: {throttle.FAILURES} failed, 5 throttled")]
