"""Console: the console's requests, from the HTTP port's router (delayq.nodes.http) to a page or
an action and back.

    GET  /ui/login, POST /ui/login                      a client token or certificate in, a session
                                                        cookie out
    POST /ui/logout                                     the session ended on this node (a POST like
                                                        the others: CSRF token and Origin checked)
    GET  /ui/static/<file>                              the package's assets (vendored libraries)
    GET  /ui/<page>, POST /ui/<action>                  pages_* modules; every POST needs the
                                                        session's CSRF token and a same-origin Origin
    GET  /history                                       this node's history, for the other nodes (the
                                                        HTTP port lets only nodes and admins ask)

Every request must name the node in its Host header (door.Door; another name is answered 421,
with no cookie), and every answer to an https page carries HSTS.

Runs on the HTTP server's request threads. Each request runs as the session's client: a
delayq.nodes.front.caller.Caller is set on the thread, and the client is looked up through
Access as a Thrift call's is, so a revoked client or a rotated token ends the session at its next
request. A session opened with a client certificate holds only while the browser presents that
certificate: its cookie alone is not enough. Actions are the Thrift service's own calls
(permission checks and audit rows included).
"""
from __future__ import annotations

import json
import logging
import mimetypes
import secrets
import threading
import urllib.parse
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Callable, Mapping

import jinja2

from delayq.access.grants import Client, Permission
from delayq.client.gen.delayq_thrift import DelayScheduler
from delayq.clock import Clock
from delayq.nodes.console import login, view
from delayq.nodes.console.door import Door
from delayq.nodes.console.fields import ActionRefused
from delayq.nodes.console.history import HistoryThread
from delayq.nodes.console.peers import Peers
from delayq.nodes.console.problems import DECLARED, describe
from delayq.nodes.console.reads import ConsoleReads
from delayq.nodes.console.recent import Recent
from delayq.nodes.console.sessions import Session, Sessions, csrf_ok, local_path, same_origin
from delayq.nodes.console.throttle import LoginThrottle, Summary
from delayq.nodes.front.access import Access
from delayq.nodes.front.caller import CERTIFICATE, Caller, serving
from delayq import errors
from delayq.store.audit import AuditLog, Entry
from delayq.store.tenants import TenantStore

log = logging.getLogger(__name__)

HEADERS = [("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
            "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"),
           ("X-Content-Type-Options", "nosniff"), ("X-Frame-Options", "DENY"), ("Referrer-Policy", "same-origin"),
           ("Cache-Control", "no-store")]


BUSY, BUSY_WAIT_S = 8, 2.0
COUNTED_TTL_S = 10.0        # a topic's counts are shared by the viewers of the next 10 s


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: Mapping[str, str]
    form: Mapping[str, str]
    cookies: Mapping[str, str]
    origin: str | None
    host: str | None
    peer: tuple
    secure: bool            # came over TLS
    certificate: str | None = None      # the common name of the verified client certificate it came with
    polled: bool = False    # a page refreshing itself (htmx, the charts), not its person


@dataclass
class Response:
    status: int
    body: bytes
    ctype: str = "text/html; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Ctx:
    """One request of a logged-in session."""
    req: Request
    session: Session
    client: Client
    caller: Caller
    now_ms: int

    @property
    def admin(self) -> bool:
        return self.client.holds(Permission.ADMIN)

    @property
    def read_only(self) -> bool:
        """The client can change nothing: it holds no permission but `read`, on any topic."""
        return not any(self.client.holds(p) for p in Permission if p is not Permission.READ)

    def may(self, permission: Permission, topic: str | None = None) -> bool:
        return self.client.allows(permission, topic) if topic is not None else self.client.holds(permission)


Handler = Callable[["Console", Ctx], Response]


__all__ = ["ActionRefused", "Console", "Ctx", "DECLARED", "Request", "Response", "describe"]


class Console:
    def __init__(self, *, service: DelayScheduler.Iface, access: Access, reads: ConsoleReads, history: HistoryThread,
                 peers: Peers, http_endpoints: Callable[[], dict[str, str]], clock: Clock, cluster: str,
                 node_id: str, audit: AuditLog, tenants: TenantStore, door: Door, sessions: Sessions | None = None):
        self.service, self.access, self.reads = service, access, reads
        self.node_id, self.audit, self.tenants = node_id, audit, tenants
        self.history, self.peers, self.http_endpoints = history, peers, http_endpoints
        self.clock, self.cluster = clock, cluster
        self.door = door
        self.sessions = sessions or Sessions(clock.monotonic)
        self.throttle = LoginThrottle(clock, self._audit_logins)
        self.counted: Recent[Any] = Recent(COUNTED_TTL_S)       # per-topic counts, shared by every viewer
        self._busy = threading.BoundedSemaphore(BUSY)
        self.env = jinja2.Environment(loader=jinja2.PackageLoader("delayq.nodes.console", "templates"),
                                      autoescape=True, undefined=jinja2.StrictUndefined)
        self.env.filters.update(thousands=view.thousands, duration=view.duration, late=view.late, utc=view.utc,
                                iso=view.iso, relative=lambda ms: view.relative(ms, self.clock.now_ms()))
        # The pages import this module (Console, Ctx): their routes are gathered once it is loaded.
        from delayq.nodes.console import pages_admin, pages_bulk, pages_overview, pages_tasks, pages_topics
        self.routes: dict[tuple[str, str], Handler] = {}
        for module in (pages_overview, pages_topics, pages_tasks, pages_bulk, pages_admin):
            self.routes.update(module.ROUTES)
        self.routes[("POST", "/ui/logout")] = Console.logout

    def start(self) -> None:
        self.history.start()

    def stop(self) -> None:
        self.history.stop()
        self.peers.stop()
        self.throttle.flush()

    def _audit_logins(self, failed: Summary) -> None:
        """One audit row per peer and interval of failed logins (delayq.nodes.console.throttle)."""
        try:
            self.audit.record(Entry(failed.began_ms, "anonymous", failed.peer, "consoleLogin", "", failed.outcome))
        except errors.DelayqError as e:
            log.warning("console: %d failed logins from %s not audited: %s", failed.failed, failed.peer, e)

    # ---- the way in ---------------------------------------------------------------------------

    def handle(self, req: Request) -> Response:
        # At most BUSY requests at once (each may wait on MySQL or another node for seconds): more
        # wait a moment, then are told to retry, rather than pile up threads on the node.
        if not self._busy.acquire(timeout=BUSY_WAIT_S):
            return Response(503, b"the console is busy: retry in a moment\n", "text/plain; charset=utf-8",
                            [("Retry-After", "2"), *HEADERS])
        try:
            self.throttle.report_ended()
            r = self._handle(req)
        finally:
            self._busy.release()
        r.headers.extend(self.door.transport(req.secure))
        return r

    def _handle(self, req: Request) -> Response:
        if req.path == "/history":          # the HTTP port let only nodes and admins through
            return Response(200, json.dumps(self.history.snapshot()).encode(), "application/json")
        if not self.door.admits(req.host):
            # Another site's name (DNS rebinding), or none: nothing of the console, no cookie.
            return self.text(421, "this console answers only under its own names (DELAYQ_CONSOLE_HOSTS)")
        if self.door.tls and not req.secure and not self.door.plaintext:
            # The node has a certificate: the console speaks TLS only (the token and the cookie
            # never cross the network in the clear).
            if req.method == "GET" and req.host:
                return self.redirect(f"https://{req.host}{req.path}", secure_host=True)
            return self.text(403, "the console is served over HTTPS on this port")
        if req.path.startswith("/ui/static/"):
            return self.static(req.path.removeprefix("/ui/static/"))
        if req.path in ("/ui", "/ui/"):
            return self.redirect("/ui/overview")
        if req.path == "/ui/login":
            return login.answer(self, req)
        session = self.sessions.get(req.cookies.get(self.door.cookie(req.secure)), acted=not req.polled)
        if req.path == "/ui/logout" and req.method == "POST" and session is None:
            return self.redirect("/ui/login", cookie=self.door.set_cookie("", req.secure, expire=True))
        if session is None:
            return self.redirect("/ui/login?" + urllib.parse.urlencode({"next": req.path})) if req.method == "GET" \
                else self.text(403, "not logged in")
        handler = self.routes.get((req.method, req.path))
        if handler is None:
            return self.text(404, "no such page")
        if req.method == "POST" and not (csrf_ok(session, req.form.get("csrf"))
                                         and same_origin(req.origin, req.host, req.secure)):
            return self.text(403, "refused: the form is not from this console (missing or wrong CSRF token)")
        caller = Caller(req.peer)
        caller.name, caller.credential = session.client, session.credential
        serving(caller)
        try:
            if session.credential == CERTIFICATE and req.certificate != session.client:
                raise errors.Unauthenticated("the browser no longer presents the certificate it logged in with")
            client = self.access.client(caller)
        except errors.Unauthenticated as e:
            self.sessions.close(session.id)
            return self.redirect("/ui/login?" + urllib.parse.urlencode({"why": login.why_of(e)}),
                                 cookie=self.door.set_cookie("", req.secure, expire=True))
        ctx = Ctx(req, session, client, caller, self.clock.now_ms())
        try:
            return handler(self, ctx)
        except DECLARED + (errors.DelayqError,) as e:      # a call or a read the cluster could not answer
            return self.page(ctx, "error.html", status=503, problem=describe(e))
        except Exception:                                   # noqa: BLE001 - the page's boundary: said, and logged
            ref = secrets.token_hex(4)
            log.exception("console: %s %s failed (error %s)", req.method, req.path, ref)
            return self.page(ctx, "error.html", status=500,
                             problem=f"internal error (error {ref}: this node's log has the details)")
        finally:
            serving(None)

    def logout(self, ctx: Ctx) -> Response:
        """Ends the session on this node, so its cookie, replayed, is a stranger's. A POST like any
        other: without the session's CSRF token (or from another origin) it is refused."""
        self.sessions.close(ctx.session.id)
        log.info("console: %s logged out", ctx.client.name)
        return self.redirect("/ui/login", cookie=self.door.set_cookie("", ctx.req.secure, expire=True))

    # ---- answers ------------------------------------------------------------------------------

    def page(self, ctx: Ctx, template: str, status: int = 200, shows_flash: bool = True, **values: Any) -> Response:
        """A page of the console; one that is part of another (a refreshed fragment) leaves the last
        action's message to the page that shows it."""
        flash = ctx.session.flash
        if shows_flash:
            ctx.session.flash = None
        body = self.env.get_template(template).render(
            me=ctx.client.name, admin=ctx.admin, read_only=ctx.read_only, csrf=ctx.session.csrf, cluster=self.cluster,
            now_ms=ctx.now_ms, path=ctx.req.path, flash=flash, insecure=not self.access.enabled, **values)
        return self.html(body, status)

    def act(self, ctx: Ctx, call: Callable[[], Any], done: Callable[[Any], str], back: str) -> Response:
        """Run an action (a Thrift call as the session's client); back to `back` with what happened."""
        try:
            result = call()
            ctx.session.flash = ("ok", done(result))
        except DECLARED + (errors.DelayqError, ActionRefused) as e:
            ctx.session.flash = ("error", str(e) if isinstance(e, ActionRefused) else describe(e))
        return self.redirect(back)

    def html(self, body: str, status: int = 200) -> Response:
        return Response(status, body.encode(), headers=list(HEADERS))

    def json(self, doc: Any) -> Response:
        return Response(200, json.dumps(doc).encode(), "application/json", list(HEADERS))

    def text(self, status: int, message: str) -> Response:
        return Response(status, (message + "\n").encode(), "text/plain; charset=utf-8", list(HEADERS))

    def redirect(self, location: str, cookie: str | None = None, secure_host: bool = False) -> Response:
        headers = [("Location", location if secure_host else local_path(location) or "/ui/overview"), *HEADERS]
        if cookie:
            headers.append(("Set-Cookie", cookie))
        return Response(303, b"", "text/plain", headers)

    def static(self, name: str) -> Response:
        if "/" in name.replace("vendor/", "", 1) or ".." in name or not name:
            return self.text(404, "no such file")
        try:
            data = resources.files("delayq.nodes.console").joinpath("static", *name.split("/")).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return self.text(404, "no such file")
        ctype = mimetypes.guess_type(name)[0] or "application/octet-stream"
        if ctype.startswith("text/") or ctype.endswith("javascript"):
            ctype += "; charset=utf-8"
        return Response(200, data, ctype, [("Cache-Control", "max-age=3600"), ("X-Content-Type-Options", "nosniff")])
