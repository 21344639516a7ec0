"""The console's way in, on fakes: a login is `authenticate` through the node's Access; each request
runs as the session's client (a revoked client is logged out); a POST needs the CSRF token and a
same-origin Origin; on a node with TLS the console is only served over TLS; the assets are served
from the package."""
from __future__ import annotations

import re

from delayq import errors
from delayq.access import tokens
from delayq.access.grants import Client, Permission
from delayq.client.gen.delayq_thrift import ttypes
from delayq.nodes.console.app import Console, Request
from delayq.nodes.console.door import Door
from delayq.nodes.console.history import HistoryThread
from delayq.nodes.console.peers import Answer, Peers
from delayq.nodes.front.access import Access
from delayq.nodes.front.caller import current
from delayq.nodes.metrics import Metrics
from delayq.testing.fakes import Clients, ManualClock

ADMIN_TOKEN, ADMIN_DIGEST = tokens.new_token("ops")
VIEWER_TOKEN, VIEWER_DIGEST = tokens.new_token("viewer")


def two_clients() -> Clients:
    return Clients(Client("ops", ADMIN_DIGEST, grants=frozenset({(Permission.ADMIN, "*"), (Permission.CANCEL, "*"),
                                                                (Permission.READ, "*")})),
                   Client("viewer", VIEWER_DIGEST, grants=frozenset({(Permission.READ, "*")})))


class Service:
    """The Thrift service's calls the tests reach, with the node's Access deciding as it does."""

    def __init__(self, access: Access):
        self.access = access
        self.cancelled: list[tuple[str, str]] = []

    def authenticate(self, token):
        try:
            return self.access.authenticate(current(), token)
        except errors.Unauthenticated as e:
            raise ttypes.Unauthenticated(reason=e.reason) from None

    def cancel(self, task_id):
        try:
            client = self.access.require(current(), Permission.CANCEL)
        except errors.DelayqError:
            raise ttypes.Forbidden(permission="cancel", topic="") from None
        self.cancelled.append((client.name, task_id))
        return ttypes.CancelResult.CANCELLED


def console(tls: bool = False):
    clients = two_clients()
    access = Access(clients, Metrics(), enabled=True)     # type: ignore[arg-type]
    access.load()
    service = Service(access)
    c = Console(service=service, access=access, reads=None, history=HistoryThread(Metrics(), ManualClock(0)),  # type: ignore[arg-type]
                peers=Peers(get=lambda ep, path: Answer(ep, None, None, "down")), http_endpoints=dict,
                clock=ManualClock(1_000_000), cluster="c1", node_id="n1", audit=None, tenants=None,  # type: ignore[arg-type]
                door=Door("sid", frozenset({"node"}), tls=tls))
    return c, service, clients, access


def req(method, path, form=None, cookies=None, secure=False, origin=None, query=None, certificate=None):
    return Request(method, path, query or {}, form or {}, cookies or {}, origin, "node:8080", ("10.0.0.9", 5555), secure,
                   certificate)


def login(c, token):
    r = c.handle(req("POST", "/ui/login", {"token": token}))
    assert r.status == 303, r.body
    cookie = dict(r.headers)["Set-Cookie"]
    sid = cookie.split(";")[0].split("=", 1)[1]
    return sid, c.sessions.get(sid)


def test_login_takes_a_valid_token_only_and_sets_a_strict_cookie():
    c, _, _, _ = console()
    bad = c.handle(req("POST", "/ui/login", {"token": "ops.wrong"}))
    assert bad.status == 401 and b"ops.wrong" not in bad.body
    r = c.handle(req("POST", "/ui/login", {"token": ADMIN_TOKEN}))
    cookie = dict(r.headers)["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    assert "Secure" not in cookie          # a plain-HTTP node (the test's request did not come over TLS)
    assert ADMIN_TOKEN.split(".")[1] not in cookie


def test_a_rotated_token_is_refused_as_rotated_and_a_wrong_one_as_not_valid():
    rotated, digest = tokens.new_token("ops")
    c, _, clients, access = console()
    clients.clients["ops"] = Client("ops", ADMIN_DIGEST, retired=((digest, "rotated"),))
    clients.version_ = "2"
    access.seen(clients.version())
    old = c.handle(req("POST", "/ui/login", {"token": rotated}))
    assert old.status == 401 and b"Refused: the token was rotated: use the client&#39;s new token." in old.body
    assert rotated.split(".")[1].encode() not in old.body
    wrong = c.handle(req("POST", "/ui/login", {"token": "ops.wrong"}))
    assert wrong.status == 401 and b"not a valid client token" in wrong.body


def test_an_action_needs_the_csrf_token_and_runs_as_the_sessions_client():
    c, service, _, _ = console()
    sid, session = login(c, ADMIN_TOKEN)
    assert c.handle(req("POST", "/ui/task/cancel", {"id": "t1"}, {"sid": sid})).status == 403
    assert c.handle(req("POST", "/ui/task/cancel", {"id": "t1", "csrf": session.csrf}, {"sid": sid},
                        origin="http://evil.example")).status == 403
    assert service.cancelled == []
    r = c.handle(req("POST", "/ui/task/cancel", {"id": "t1", "csrf": session.csrf}, {"sid": sid},
                     origin="http://node:8080"))
    assert r.status == 303 and service.cancelled == [("ops", "t1")]
    assert session.flash == ("ok", "cancel t1: CANCELLED")
    assert current() is None           # the thread serves nobody once the request is answered


def test_a_read_only_client_is_refused_by_the_call_itself():
    c, service, _, _ = console()
    sid, session = login(c, VIEWER_TOKEN)
    c.handle(req("POST", "/ui/task/cancel", {"id": "t1", "csrf": session.csrf}, {"sid": sid}))
    assert service.cancelled == [] and session.flash[0] == "error" and "not allowed" in session.flash[1]


def test_a_revoked_client_is_logged_out_at_its_next_request():
    c, _, clients, access = console()
    sid, _ = login(c, ADMIN_TOKEN)
    clients.clients["ops"] = Client("ops", ADMIN_DIGEST, revoked=True)
    clients.version_ = "2"
    access.seen("2")
    r = c.handle(req("GET", "/ui/overview", cookies={"sid": sid}))
    assert r.status == 303 and dict(r.headers)["Location"].startswith("/ui/login?why=")
    assert c.sessions.get(sid) is None


def test_no_session_goes_to_the_login_and_next_stays_inside_the_console():
    c, _, _, _ = console()
    r = c.handle(req("GET", "/ui/tasks"))
    assert r.status == 303 and dict(r.headers)["Location"] == "/ui/login?next=%2Fui%2Ftasks"
    r = c.handle(req("POST", "/ui/login", {"token": ADMIN_TOKEN, "next": "https://evil.example/"}))
    assert dict(r.headers)["Location"] == "/ui/overview"
    assert c.handle(req("POST", "/ui/task/cancel", {"id": "t1"})).status == 403


def test_with_tls_the_console_is_served_over_tls_only():
    c, _, _, _ = console(tls=True)
    r = c.handle(req("GET", "/ui/overview"))
    assert r.status == 303 and dict(r.headers)["Location"] == "https://node:8080/ui/overview"
    assert c.handle(req("POST", "/ui/login", {"token": ADMIN_TOKEN})).status == 403
    r = c.handle(req("POST", "/ui/login", {"token": ADMIN_TOKEN}, secure=True))
    assert "Secure" in dict(r.headers)["Set-Cookie"]
    assert c.handle(req("GET", "/history")).status == 200          # for the other nodes (the HTTP port asks who)


def test_assets_come_from_the_package_and_nothing_else():
    c, _, _, _ = console()
    js = c.handle(req("GET", "/ui/static/vendor/uPlot.iife.min.js"))
    assert js.status == 200 and js.ctype.startswith("text/javascript")
    assert c.handle(req("GET", "/ui/static/../app.py")).status == 404
    assert c.handle(req("GET", "/ui/static/vendor/../../app.py")).status == 404
    page = c.handle(req("GET", "/ui/login"))
    assert "script-src 'self'" in dict(page.headers)["Content-Security-Policy"]


def test_a_page_whose_call_fails_says_what_happened_and_leaves_the_outages_text_to_the_log(caplog):
    c, _, _, _ = console()
    sid, _ = login(c, ADMIN_TOKEN)
    raw = "(pymysql.err.OperationalError) (2003, \"Can't connect to MySQL server on 'db7.internal'\")"

    def unavailable(console_, ctx):
        raise ttypes.Unavailable(reason="ZooKeeper: ConnectionLoss")

    def mysql_away(console_, ctx):
        raise errors.StoreUnavailable(raw, 2003)

    def broken(console_, ctx):
        raise KeyError("bug")
    c.routes[("GET", "/ui/x")] = unavailable
    c.routes[("GET", "/ui/m")] = mysql_away
    c.routes[("GET", "/ui/y")] = broken
    r = c.handle(req("GET", "/ui/x", cookies={"sid": sid}))
    assert r.status == 503 and b"the cluster could not do it now (error " in r.body and b"ZooKeeper" not in r.body
    r = c.handle(req("GET", "/ui/m", cookies={"sid": sid}))
    page = r.body.decode()
    ref = re.search(r"\(error ([0-9a-f]{8}): this node&#39;s log has the details\)", page)
    assert r.status == 503 and ref and "pymysql" not in page and "db7.internal" not in page and "2003" not in page
    assert any(ref.group(1) in m and "db7.internal" in m for m in caplog.messages)   # the log has it, by the id
    r = c.handle(req("GET", "/ui/y", cookies={"sid": sid}))
    assert r.status == 500 and b"internal error" in r.body and b"bug" not in r.body


def test_a_client_certificate_logs_in_as_its_client_and_only_while_the_browser_presents_it():
    c, service, _, _ = console(tls=True)
    page = c.handle(req("GET", "/ui/login", secure=True, certificate="ops"))
    assert b"Log in as <strong>ops</strong> with your certificate" in page.body
    assert b"with your certificate" not in c.handle(req("GET", "/ui/login", secure=True)).body

    r = c.handle(req("POST", "/ui/login", {"with": "certificate"}, secure=True, certificate="ops"))
    assert r.status == 303, r.body
    sid = dict(r.headers)["Set-Cookie"].split(";")[0].split("=", 1)[1]
    session = c.sessions.get(sid)
    r = c.handle(req("POST", "/ui/task/cancel", {"id": "t1", "csrf": session.csrf}, {"__Host-sid": sid}, secure=True,
                     origin="https://node:8080", certificate="ops"))
    assert r.status == 303 and service.cancelled == [("ops", "t1")]

    # The cookie without the certificate (or with another) ends the session.
    gone = c.handle(req("GET", "/ui/overview", cookies={"__Host-sid": sid}, secure=True, certificate="viewer"))
    assert gone.status == 303 and "/ui/login?why=" in dict(gone.headers)["Location"]
    assert c.sessions.get(sid) is None


def test_a_certificate_naming_no_client_or_none_at_all_is_refused_and_says_which():
    c, _, _, _ = console(tls=True)
    r = c.handle(req("POST", "/ui/login", {"with": "certificate"}, secure=True, certificate="mallory"))
    assert r.status == 401 and b"(mallory) names no client of this cluster" in r.body
    r = c.handle(req("POST", "/ui/login", {"with": "certificate"}, secure=True))
    assert r.status == 401 and b"presented no client certificate" in r.body


class Reads:
    """The console's MySQL reads, counting what it is asked."""

    def __init__(self):
        self.asked: list[str] = []

    def topic_counts(self, topic, now_ms):
        from delayq.nodes.console.reads import TopicCounts
        self.asked.append(topic)
        return TopicCounts(3, 0, 1, 2, 3, 0)


def test_topics_are_counted_fifty_to_a_page_and_a_count_is_shared_by_the_viewers_of_ten_seconds():
    c, service, _, _ = console()
    names = [f"orders.{i:02d}" for i in range(60)]
    service.listServices = lambda: [ttypes.CallbackService(topic=t) for t in names]
    service.listTopicControls = lambda: []
    c.reads = reads = Reads()
    sid, _ = login(c, ADMIN_TOKEN)
    first = c.handle(req("GET", "/ui/topics", cookies={"sid": sid})).body.decode()
    assert "orders.49" in first and "orders.50" not in first and "/ui/topics?after=orders.49" in first
    assert reads.asked == names[:50]
    second = c.handle(req("GET", "/ui/topics", cookies={"sid": sid}, query={"after": "orders.49"})).body.decode()
    assert "orders.59" in second and "Next topics" not in second and "End of the list" in second
    c.handle(req("GET", "/ui/topics", cookies={"sid": sid}))         # another look within 10 s: nothing counted again
    assert reads.asked == names


def test_a_next_page_with_a_line_break_or_from_another_site_is_not_followed():
    c, _, _, _ = console()
    for bad in ("/ui/x\r\nSet-Cookie: sid=attacker", "//evil.example/ui/", "https://evil.example/ui/", "/ui/caf\u00e9"):
        r = c.handle(req("POST", "/ui/login", {"token": ADMIN_TOKEN, "next": bad}))
        assert r.status == 303 and dict(r.headers)["Location"] == "/ui/overview", (bad, r.headers)
    r = c.handle(req("POST", "/ui/login", {"token": ADMIN_TOKEN, "next": "/ui/tasks?topic=a"}))
    assert dict(r.headers)["Location"] == "/ui/tasks?topic=a"


def test_a_logout_needs_the_csrf_token_and_ends_the_session_on_the_node():
    c, service, _, _ = console()
    service.cluster = lambda: ttypes.ClusterInfo(nodes=[])
    service.intents = lambda: ttypes.Intents()
    sid, session = login(c, ADMIN_TOKEN)
    for forged in (req("POST", "/ui/logout", {}, {"sid": sid}),
                   req("POST", "/ui/logout", {"csrf": session.csrf}, {"sid": sid}, origin="http://evil.example")):
        r = c.handle(forged)
        assert r.status == 403 and "Set-Cookie" not in dict(r.headers)
    assert c.handle(req("GET", "/ui/overview", cookies={"sid": sid})).status == 200
    r = c.handle(req("POST", "/ui/logout", {"csrf": session.csrf}, {"sid": sid}, origin="http://node:8080"))
    assert r.status == 303 and "Max-Age=0" in dict(r.headers)["Set-Cookie"]
    replayed = c.handle(req("GET", "/ui/overview", cookies={"sid": sid}))
    assert replayed.status == 303 and dict(replayed.headers)["Location"].startswith("/ui/login")


def test_an_unknown_topic_is_said_on_the_page_not_an_internal_error():
    c, service, _, _ = console()

    def unknown(controls):
        raise ttypes.UnknownTopic(topic=controls.topic)
    service.setTopicControls = unknown
    sid, session = login(c, ADMIN_TOKEN)
    r = c.handle(req("POST", "/ui/topics/controls", {"topic": "no\x01such", "action": "pause", "csrf": session.csrf},
                     {"sid": sid}))
    assert r.status == 303
    assert session.flash == ("error", "topic: no topic 'no\\x01such' (no enabled callback service has it)")


def test_a_disabled_topic_is_said_to_be_disabled():
    c, service, _, _ = console()

    def disabled(controls):
        raise ttypes.UnknownTopic(topic=controls.topic, disabled=True)
    service.setTopicControls = disabled
    sid, session = login(c, ADMIN_TOKEN)
    c.handle(req("POST", "/ui/topics/controls", {"topic": "orders", "action": "pause", "csrf": session.csrf},
                 {"sid": sid}))
    assert session.flash == ("error", "topic: the service of 'orders' is disabled and takes no new tasks "
                                      "(delayq services disable 'orders' --enable)")


def test_a_refreshed_fragment_leaves_the_last_actions_message_to_the_page():
    c, service, _, _ = console()
    service.cluster = lambda: ttypes.ClusterInfo(nodes=[])
    service.intents = lambda: ttypes.Intents()
    sid, session = login(c, ADMIN_TOKEN)
    c.handle(req("POST", "/ui/task/cancel", {"id": "t1", "csrf": session.csrf}, {"sid": sid}))
    assert c.handle(req("GET", "/ui/fragments/nodes", cookies={"sid": sid})).status == 200
    page = c.handle(req("GET", "/ui/overview", cookies={"sid": sid})).body.decode()
    assert "cancel t1: CANCELLED" in page
