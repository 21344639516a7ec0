"""Peers: what the console asks of every node's HTTP port — its history (GET /history) and its
readiness (GET /readyz) — in parallel, each with a time-out, the answers kept a few seconds so
that five open consoles do not become five times the requests.

Those two paths tell anonymous callers nothing (/history) or only ready or not (/readyz): a node
asks them with the cluster's node credential (delayq.nodes.httpgate), in plain HTTP, which every
node's HTTP port speaks beside TLS (delayq.nodes.http). The credential opens those two paths only.

Threads: a small pool owned here (`stop()` ends it), so a slow node costs the page its time-out,
never a thread per request.
"""
from __future__ import annotations

import concurrent.futures
import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Callable

TIMEOUT_S = 1.0
GRACE_S = 0.5           # beyond the request's own time-out, for the pool's thread to start it
KEEP_S = 5.0


@dataclass(frozen=True)
class Answer:
    endpoint: str
    status: int | None          # None: no answer (refused, timed out)
    doc: dict | None
    error: str | None = None


def fetch(endpoint: str, path: str, timeout_s: float = TIMEOUT_S, credential: str | None = None) -> Answer:
    asked = urllib.request.Request(f"http://{endpoint}{path}",
                                   headers={"Authorization": f"Bearer {credential}"} if credential else {})
    try:
        with urllib.request.urlopen(asked, timeout=timeout_s) as r:
            return Answer(endpoint, r.status, json.loads(r.read()))
    except urllib.error.HTTPError as e:        # /readyz answers 503 with a body that says why
        try:
            return Answer(endpoint, e.code, json.loads(e.read()))
        except ValueError:
            return Answer(endpoint, e.code, None, f"HTTP {e.code}")
    except (OSError, ValueError) as e:
        return Answer(endpoint, None, None, f"no answer: {type(e).__name__}")


class Peers:
    def __init__(self, get: Callable[[str, str], Answer] = fetch, workers: int = 4,
                 now: Callable[[], float] = time.monotonic):
        self._get, self._now = get, now
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="console-peers")
        self._kept: dict[tuple[str, str], tuple[float, Answer]] = {}
        self._lock = threading.Lock()

    def ask(self, endpoints: list[str], path: str) -> dict[str, Answer]:
        """Each endpoint's answer to GET path (kept KEEP_S); all asked at once, the slowest bounded
        by TIMEOUT_S."""
        now = self._now()
        out: dict[str, Answer] = {}
        wanted = []
        with self._lock:
            for ep in endpoints:
                kept = self._kept.get((ep, path))
                if kept is not None and now - kept[0] < KEEP_S:
                    out[ep] = kept[1]
                else:
                    wanted.append(ep)
        futures = {ep: self._pool.submit(self._get, ep, path) for ep in wanted}
        for ep, f in futures.items():
            try:
                out[ep] = f.result(timeout=TIMEOUT_S + GRACE_S)
            except concurrent.futures.TimeoutError:
                out[ep] = Answer(ep, None, None, "no answer in time")
        with self._lock:
            for ep in wanted:
                self._kept[(ep, path)] = (now, out[ep])
            if len(self._kept) > 256:        # endpoints of nodes long gone
                for key in [k for k, (at, _) in self._kept.items() if now - at >= KEEP_S]:
                    del self._kept[key]
        return out

    def stop(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
