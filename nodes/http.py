"""HealthServer: the node's HTTP port for Prometheus and orchestrators.

    GET /metrics   Prometheus text format
    GET /healthz   200 while the node's threads are alive (restart the process otherwise)
    GET /readyz    200 when ZooKeeper is connected, the node has its assignment, MySQL answers and the
                   RabbitMQ channel is open; 503 naming the failing parts otherwise (JSON body; its
                   "detail" says what an operator should know that does not stop the node, such
                   as a machine clock far from MySQL's)

Threads: one accept thread plus one per request (the standard library's ThreadingHTTPServer), owned
here; `stop()` shuts it down.
"""
from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from delayq.nodes.metrics import Metrics

log = logging.getLogger(__name__)

Checks = Callable[[], dict[str, str | None]]     # part -> None when fine, else what is wrong


class HealthServer:
    def __init__(self, host: str, port: int, metrics: Metrics, alive: Checks, ready: Checks,
                 detail: Callable[[], dict] = dict):

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the standard library's name
                if self.path == "/metrics":
                    self._send(200, generate_latest(metrics.registry), CONTENT_TYPE_LATEST)
                elif self.path in ("/healthz", "/readyz"):
                    checks = alive() if self.path == "/healthz" else ready()
                    failing = {k: v for k, v in checks.items() if v is not None}
                    doc = {"status": "fail" if failing else "ok", "failing": failing, "checked": sorted(checks)}
                    if self.path == "/readyz":
                        doc["detail"] = detail()
                    body = json.dumps(doc).encode()
                    self._send(503 if failing else 200, body, "application/json")
                else:
                    self._send(404, b"not found\n", "text/plain")

            def _send(self, code: int, body: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass       # scrapes every few seconds are not news

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._server.timeout = 5
        self._thread = threading.Thread(target=self._server.serve_forever, name="http", daemon=True)
        self.port: int = self._server.server_address[1]

    def start(self) -> None:
        self._thread.start()
        log.info("metrics and health on port %d", self.port)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
