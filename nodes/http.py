"""HealthServer: the node's HTTP port, for Prometheus, orchestrators and people.

    GET /metrics   Prometheus text format
    GET /healthz   200 while the node's threads are alive (restart the process otherwise)
    GET /readyz    200 when ZooKeeper is connected, the node has its assignment, MySQL answers and the
                   RabbitMQ channel is open, 503 otherwise: to anyone {"status": "ok"} or "fail";
                   to an admin or a node (httpgate.HttpGate) also the failing parts and "detail",
                   what an operator should know that does not stop the node, such as a machine
                   clock far from MySQL's
    GET /history   the console's data for the other nodes (admins and nodes only: 403 otherwise)
    /ui/...        the web console (delayq.nodes.console)

One port, two protocols: with a TLS context (the node has a certificate), a connection whose first
byte opens a TLS handshake is served over TLS, any other in plain HTTP; so Prometheus and probes
keep scraping in plain HTTP while the console (which refuses plain HTTP then) is reached with
https://. This module only routes; the console decides what it answers.

Threads: one accept thread plus one per request (the standard library's ThreadingHTTPServer), owned
here; `stop()` shuts it down. A request's socket times out after REQUEST_TIMEOUT_S.
"""
from __future__ import annotations

import http.cookies
import json
import logging
import socket
import ssl
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Protocol, Sequence

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from delayq.access.tls import common_name
from delayq.nodes.metrics import Metrics

if TYPE_CHECKING:
    from delayq.nodes.console.app import Console

log = logging.getLogger(__name__)


class Health(Protocol):
    """The node's checks (delayq.nodes.probes.Probes): part -> None when fine, else what is wrong."""
    def alive(self) -> dict[str, str | None]: ...
    def ready(self) -> dict[str, str | None]: ...
    def detail(self) -> dict: ...


class Gate(Protocol):
    """Who may read the whole of /readyz and /history (delayq.nodes.httpgate.HttpGate)."""
    def admits(self, authorization: str | None, peer: tuple) -> bool: ...
    def credential(self) -> str | None: ...         # what this node shows the others' ports


REQUEST_TIMEOUT_S = 10.0
MAX_FORM_BYTES = 64 * 1024
TLS_RECORD = b"\x16"                             # a TLS handshake record's first byte


class _Server(ThreadingHTTPServer):
    """Serves a connection over TLS when it opens with a handshake and a context is given."""
    daemon_threads = True
    tls: ssl.SSLContext | None = None

    def finish_request(self, request, client_address) -> None:     # on the request's own thread
        if self.tls is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(REQUEST_TIMEOUT_S)
        try:
            first = request.recv(1, socket.MSG_PEEK)
        except OSError:
            return
        if first != TLS_RECORD:
            super().finish_request(request, client_address)
            return
        try:
            secured = self.tls.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as e:
            log.debug("HTTP TLS handshake from %s failed: %s", client_address[0], e)
            return
        try:
            super().finish_request(secured, client_address)
        finally:
            secured.close()

    def handle_error(self, request, client_address) -> None:
        """A client that went away mid-answer (a browser closing a tab, a scraper's time-out) is
        routine: one DEBUG line. Anything else is logged with its traceback, through logging
        (the standard library would print it to stderr, outside the node's log format)."""
        gone = sys.exc_info()[1]
        if isinstance(gone, (ConnectionError, ssl.SSLEOFError, ssl.SSLZeroReturnError, socket.timeout)):
            log.debug("HTTP client %s went away: %s", client_address[0], gone)
            return
        log.exception("HTTP request from %s failed", client_address[0])


class HealthServer:
    def __init__(self, host: str, port: int, metrics: Metrics, health: Health, gate: Gate,
                 tls: ssl.SSLContext | None = None):
        self.console: Console | None = None       # set by the node once built (it needs the node's parts)
        self.gate = gate
        server = self

        class Handler(BaseHTTPRequestHandler):
            timeout = REQUEST_TIMEOUT_S

            def do_GET(self) -> None:  # noqa: N802 - the standard library's name
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, generate_latest(metrics.registry), CONTENT_TYPE_LATEST)
                elif path == "/healthz":
                    self._checks(health.alive(), {})
                elif path == "/readyz":
                    # Anyone learns ready or not; what is failing, and why, is for admins and nodes.
                    if gate.admits(self.headers.get("Authorization"), self.client_address):
                        self._checks(health.ready(), {"detail": health.detail()})
                    else:
                        failing = any(v is not None for v in health.ready().values())
                        self._send(503 if failing else 200, json.dumps({"status": "fail" if failing else "ok"})
                                   .encode(), "application/json")
                elif path == "/history" and server.console is not None:
                    if gate.admits(self.headers.get("Authorization"), self.client_address):
                        self._console("GET", path, {})
                    else:
                        self._send(403, b"/history needs an admin's or a node's credential\n", "text/plain")
                elif server.console is not None and (path == "/ui" or path.startswith("/ui/")):
                    self._console("GET", path, {})
                else:
                    self._send(404, b"not found\n", "text/plain")

            def do_POST(self) -> None:  # noqa: N802
                path = self.path.split("?", 1)[0]
                if server.console is None or not path.startswith("/ui/"):
                    self._send(404, b"not found\n", "text/plain")
                    return
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                except ValueError:
                    length = -1
                if not 0 <= length <= MAX_FORM_BYTES:
                    self._send(413, b"form too large\n", "text/plain")
                    return
                body = self.rfile.read(length).decode("utf-8", errors="replace")
                form = {k: v[0] for k, v in urllib.parse.parse_qs(body, keep_blank_values=True).items()}
                self._console("POST", path, form)

            def _checks(self, checks: dict[str, str | None], more: dict) -> None:
                failing = {k: v for k, v in checks.items() if v is not None}
                doc = {"status": "fail" if failing else "ok", "failing": failing, "checked": sorted(checks), **more}
                self._send(503 if failing else 200, json.dumps(doc).encode(), "application/json")

            def _console(self, method: str, path: str, form: dict[str, str]) -> None:
                from delayq.nodes.console.app import Request
                assert server.console is not None
                query = urllib.parse.urlsplit(self.path).query
                jar = http.cookies.SimpleCookie()
                try:
                    jar.load(self.headers.get("Cookie") or "")
                except http.cookies.CookieError:
                    pass
                secure = isinstance(self.connection, ssl.SSLSocket)
                cert = self.connection.getpeercert() if secure else None      # verified, or none given
                req = Request(method, path, {k: v[0] for k, v in urllib.parse.parse_qs(query).items()}, form,
                              {k: m.value for k, m in jar.items()}, self.headers.get("Origin"),
                              self.headers.get("Host"), self.client_address, secure,
                              common_name(cert) if cert else None,
                              polled=bool(self.headers.get("HX-Request") or self.headers.get("X-Delayq-Poll")))
                r = server.console.handle(req)
                self._send(r.status, r.body, r.ctype, r.headers)

            def _send(self, code: int, body: bytes, ctype: str, headers: Sequence[tuple[str, str]] = ()) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                for name, value in headers:
                    if "\r" in value or "\n" in value:        # never a header of the request's making
                        raise ValueError(f"header {name} holds a line break")
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass       # scrapes every few seconds are not news

        self._server = _Server((host, port), Handler)
        self._server.tls = tls
        self._server.timeout = 5
        self._thread = threading.Thread(target=self._server.serve_forever, name="http", daemon=True)
        self.port: int = self._server.server_address[1]
        self.tls = tls is not None

    def start(self) -> None:
        self._thread.start()
        log.info("metrics, health%s on port %d", " and the console" if self.console else "", self.port)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
