"""The console's guards, on fakes, as a person or an attacker sees them: the Host must name the
node; logins are throttled per address and their failures summarised in the audit log; a page
refreshing itself does not keep an idle session alive; one client's logins never end another
client's session; "read-only" only for a client that can change nothing. Time is the console's
injected clock: nothing here sleeps."""
from __future__ import annotations

import dataclasses

import pytest

from delayq import config
from delayq.access import tokens
from delayq.access.grants import Client, Permission
from delayq.client.gen.delayq_thrift import ttypes
from delayq.nodes.console import sessions, throttle
from delayq.nodes.console.assembly import serves_console
from delayq.store.audit import Entry
from delayq.testing.fakes import ManualClock
from test_console_app import ADMIN_TOKEN, VIEWER_TOKEN, console, login, req

pytestmark = pytest.mark.timeout(30)


class AuditRows:
    """The audit log, as its rows."""

    def __init__(self):
        self.rows: list[Entry] = []

    def record(self, entry: Entry) -> None:
        self.rows.append(entry)


def with_request(r, **changed):
    return dataclasses.replace(r, **changed)


def add_client(clients, access, name: str, grants) -> str:
    """A client added as `delayq clients add` does; its token."""
    token, digest = tokens.new_token(name)
    clients.clients[name] = Client(name, digest, grants=frozenset(grants))
    clients.version_ = str(int(clients.version_) + 1)
    access.seen(clients.version_)
    return token


def test_a_request_naming_another_host_is_refused_without_a_cookie():
    c, _, _, _ = console()
    for host in ("evil.example", "evil.example:8080", "node.evil.example", None, "node:80\r\nX: y"):
        r = c.handle(with_request(req("POST", "/ui/login", {"token": ADMIN_TOKEN}, origin=f"http://{host}"), host=host))
        assert r.status == 421 and "Set-Cookie" not in dict(r.headers), host
    assert c.handle(req("POST", "/ui/login", {"token": ADMIN_TOKEN})).status == 303       # Host: node:8080


def test_an_https_answer_has_hsts_and_a_host_prefixed_cookie_for_the_whole_port():
    c, _, _, _ = console(tls=True)
    r = c.handle(req("POST", "/ui/login", {"token": ADMIN_TOKEN}, secure=True))
    headers = dict(r.headers)
    assert headers["Strict-Transport-Security"].startswith("max-age=")
    cookie = headers["Set-Cookie"].split("; ")
    assert cookie[0].startswith("__Host-sid=") and "Secure" in cookie and "Path=/" in cookie
    assert not any(part.startswith("Domain") for part in cookie)


def test_the_login_page_shows_its_own_words_for_why_never_the_requests():
    c, _, _, _ = console()
    page = c.handle(req("GET", "/ui/login", query={"why": "your account is locked: call +1 555 0100"})).body.decode()
    assert "555 0100" not in page and "session ended" not in page
    page = c.handle(req("GET", "/ui/login", query={"why": "revoked"})).body.decode()
    assert "The session ended: the client was revoked." in page


def test_past_its_failures_a_peer_is_refused_without_its_token_being_checked_and_audited_once():
    c, service, _, _ = console()
    c.audit = audit = AuditRows()
    checked = []
    authenticate = service.authenticate
    service.authenticate = lambda token: checked.append(token) or authenticate(token)
    for _ in range(throttle.FAILURES):
        assert c.handle(req("POST", "/ui/login", {"token": "ops.guess"})).status == 401
    assert len(checked) == throttle.FAILURES
    for _ in range(5):
        r = c.handle(req("POST", "/ui/login", {"token": ADMIN_TOKEN}))      # even a good one, unchecked
        assert r.status == 429 and "Set-Cookie" not in dict(r.headers) and b"Too many failed logins" in r.body
    assert len(checked) == throttle.FAILURES and audit.rows == []
    other = with_request(req("POST", "/ui/login", {"token": ADMIN_TOKEN}), peer=("10.0.0.10", 1))
    assert c.handle(other).status == 303                                   # another address is not held back
    c.clock.now += int(throttle.INTERVAL_S * 1000)                         # type: ignore[attr-defined]
    assert c.handle(req("GET", "/ui/login")).status == 200                 # the next request of anyone writes it
    assert [(e.address, e.action, e.outcome) for e in audit.rows] == [
        ("10.0.0.9", "consoleLogin", f"refused: {throttle.FAILURES} failed, 5 throttled")]


def test_the_throttle_keeps_one_summary_per_peer_and_interval_and_hands_the_rest_over_when_stopped():
    clock, got = ManualClock(0), []
    t = throttle.LoginThrottle(clock, got.append)
    for _ in range(3):
        t.failed("a")
    t.failed("b")
    clock.now += 1000
    assert t.allows("a") and got == []
    t.flush()
    assert sorted((s.peer, s.failed, s.refused) for s in got) == [("a", 3, 0), ("b", 1, 0)]


def test_a_page_refreshing_itself_does_not_keep_an_idle_session_alive():
    c, service, _, _ = console()
    service.cluster = lambda: ttypes.ClusterInfo(nodes=[])
    service.intents = lambda: ttypes.Intents()
    sid, _ = login(c, ADMIN_TOKEN)
    step_ms = 60_000
    for _ in range(sessions.IDLE_S * 1000 // step_ms):
        c.clock.now += step_ms                                          # type: ignore[attr-defined]
        assert c.handle(with_request(req("GET", "/ui/fragments/nodes", cookies={"sid": sid}), polled=True)).status == 200
    c.clock.now += step_ms                                              # type: ignore[attr-defined]
    r = c.handle(req("GET", "/ui/overview", cookies={"sid": sid}))
    assert r.status == 303 and dict(r.headers)["Location"].startswith("/ui/login")


def test_a_person_clicking_keeps_the_session_alive():
    c, _, _, _ = console()
    sid, _ = login(c, ADMIN_TOKEN)
    for _ in range(3):
        c.clock.now += (sessions.IDLE_S - 1) * 1000                     # type: ignore[attr-defined]
        assert c.sessions.get(sid) is not None


def test_one_clients_many_logins_do_not_end_another_clients_session(monkeypatch):
    monkeypatch.setattr(sessions, "MAX_SESSIONS", 8)
    monkeypatch.setattr(sessions, "PER_CLIENT", 3)
    c, _, _, _ = console()
    admin_sid, _ = login(c, ADMIN_TOKEN)
    for _ in range(50):
        c.clock.now += 1                                                # type: ignore[attr-defined]
        r = c.handle(req("POST", "/ui/login", {"token": VIEWER_TOKEN}))
        assert r.status == 303
    assert c.sessions.get(admin_sid) is not None and c.sessions.get(admin_sid).client == "ops"
    assert len(c.sessions) == 3 + 1                                    # the viewer's newest three, and the admin's


def test_a_full_node_refuses_a_login_and_ends_no_session(monkeypatch):
    monkeypatch.setattr(sessions, "MAX_SESSIONS", 2)
    c, _, clients, access = console()
    kept = [login(c, ADMIN_TOKEN)[0], login(c, VIEWER_TOKEN)[0]]
    extra = add_client(clients, access, "third", {(Permission.READ, "*")})
    r = c.handle(req("POST", "/ui/login", {"token": extra}))
    assert r.status == 503 and "Set-Cookie" not in dict(r.headers)
    assert all(c.sessions.get(sid) is not None for sid in kept)


@pytest.mark.parametrize("grants, read_only", [
    ({(Permission.READ, "*")}, True),
    ({(Permission.READ, "*"), (Permission.CANCEL, "orders.*")}, False),
    ({(Permission.SUBMIT, "orders.*")}, False),
    ({(Permission.ADMIN, "*")}, False)])
def test_read_only_is_said_only_of_a_client_that_can_change_nothing(grants, read_only):
    c, service, clients, access = console()
    service.cluster = lambda: ttypes.ClusterInfo(nodes=[])
    service.intents = lambda: ttypes.Intents()
    sid, _ = login(c, add_client(clients, access, "someone", grants))
    page = c.handle(req("GET", "/ui/overview", cookies={"sid": sid})).body.decode()
    assert ("read-only" in page) is read_only


def test_a_node_without_security_serves_the_console_only_when_asked():
    assert not serves_console(config.load({"DELAYQ_INSECURE": "true"}))
    assert serves_console(config.load({"DELAYQ_INSECURE": "true", "DELAYQ_CONSOLE_INSECURE": "true"}))
    assert serves_console(config.load({"DELAYQ_TLS_CERT_FILE": "n.pem", "DELAYQ_TLS_KEY_FILE": "n.key"}))
    assert not serves_console(config.load({"DELAYQ_TLS_CERT_FILE": "n.pem", "DELAYQ_TLS_KEY_FILE": "n.key",
                                           "DELAYQ_CONSOLE": "false"}))


def test_a_read_stopped_at_its_time_limit_is_said_in_delayqs_own_words():
    from delayq import errors
    from delayq.nodes.console.problems import describe
    assert describe(errors.StatementStopped("a statement was stopped after 3 s", 1969)) == \
        "a statement was stopped after 3 s"


def test_a_host_header_is_read_as_its_name_without_the_port():
    from delayq.nodes.console.hosts import allowed, listed, name_of, own_names
    assert [name_of(h) for h in ("node1:10090", "NODE1.", "[::1]:8443", "[::1]", "127.0.0.1")] == \
        ["node1", "node1", "::1", "::1", "127.0.0.1"]
    assert [name_of(h) for h in ("", None, "node:port", "[::1", "[::1]x", "a b", "node:80\r\n")] == [None] * 7
    names = own_names("node1", "0.0.0.0")
    assert {"node1", "localhost", "127.0.0.1", "::1"} <= names and "0.0.0.0" not in names
    assert allowed("localhost:10090", names) and not allowed("rebound.example:10090", names)
    assert listed(" proxy.example , Console.Example. ,") == {"proxy.example", "console.example"}
