"""The console scenario: the web console over a large topic, on one node.

`pending` DELAY tasks and `archived` ended ones (FINISHED, one in ten FAILED) of one topic are made
by INSERT ... SELECT (bench.fill). Logged in as the admin client, one viewer then asks, one request
at a time on a connection already open (so the figure is the node's time, not a TLS handshake):

    list         /ui/tasks of the waiting tasks, from a keyset anywhere in the topic
    search       /ui/tasks of the archived tasks (FINISHED or FAILED) from a keyset anywhere in
                 them, of a business key (waiting or archived), and of the waiting tasks within
                 a due range, a third each
    task page    /ui/task of a random task, waiting or archived (the `get` call and its attempts)

reporting p95 (and p50, max) of each. Then the steady load runs twice, first with no console open,
then with `consoles` viewers each keeping the overview open as a browser does (the page, its nodes
fragment every 5 s, its two charts' series every 10 s): the p99 lateness of each, and the difference.
"""
from __future__ import annotations

import http.client
import random
import ssl
import threading
import time
import urllib.parse
import uuid

from bench import fill
from bench.machine import MODE_ENV, bench_cluster
from bench.measure import Run, Topic, load_figures, pct, round1
from delayq.retention import DAY_MS, day_of
from delayq.testing import security
from delayq.testing.cluster import now_ms

OVERVIEW = [(0, "/ui/overview"), (5, "/ui/fragments/nodes"), (10, "/ui/api/series"), (10, "/ui/api/series")]


class Viewer:
    """One logged-in console session; each request on a fresh connection whose opening is untimed."""

    def __init__(self, port: int):
        self.port = port
        self.tls = None if MODE_ENV.get("DELAYQ_INSECURE") else \
            ssl.create_default_context(cafile=str(security.ensure() / "ca.pem"))
        conn = self._connect()
        try:
            conn.request("POST", "/ui/login", urllib.parse.urlencode({"token": security.admin_token()}),
                         {"Content-Type": "application/x-www-form-urlencoded"})
            r = conn.getresponse()
            r.read()
            cookie = r.getheader("Set-Cookie")
            if r.status != 303 or not cookie:
                raise RuntimeError(f"console login answered {r.status}")
            self.cookie = cookie.split(";", 1)[0]
        finally:
            conn.close()

    def _connect(self) -> http.client.HTTPConnection:
        conn = http.client.HTTPSConnection("localhost", self.port, timeout=10, context=self.tls) if self.tls \
            else http.client.HTTPConnection("localhost", self.port, timeout=10)
        conn.connect()
        return conn

    def get(self, path: str) -> float:
        """The request's time in ms, from sending it to the last byte of the answer (which must be 200)."""
        conn = self._connect()
        try:
            t = time.perf_counter()
            conn.request("GET", path, headers={"Cookie": self.cookie})
            r = conn.getresponse()
            r.read()
            took = (time.perf_counter() - t) * 1000
        finally:
            conn.close()
        if r.status != 200:
            raise RuntimeError(f"GET {path} answered {r.status}")
        return took


def console(run: Run, p: dict) -> list[dict]:
    out = []
    with bench_cluster(run.logs) as cl:
        node = cl.add_node(start=False)
        topic = f"bench.console.{uuid.uuid4().hex[:8]}"
        now = now_ms()
        due_from, due_span = now + DAY_MS, 7 * DAY_MS
        # Archived rows finish today before now: the backlog's partitions are by day.
        done_from = day_of(now) * DAY_MS
        done_span = max(1, now - done_from - 1000)
        with fill.filling(cl) as engine:
            n, secs = fill.pending(engine, topic, p["pending"], cl.shards, due_from, due_span, prefix="cp",
                                   now_ms=now)
            a, asecs = fill.archived(engine, topic, p["archived"], cl.shards, done_from, done_span, prefix="ca",
                                     now_ms=now)
        out += [run.fig("console", "pending", n, "tasks", note=f"made in {secs:.0f} s by INSERT ... SELECT"),
                run.fig("console", "archived", a, "tasks", note=f"made in {asecs:.0f} s by INSERT ... SELECT")]
        node.start()
        cl.register(topic)
        viewer = Viewer(int(node.env["DELAYQ_HTTP_PORT"]))
        rng = random.Random(11)
        due_step, done_step = max(1, due_span // max(1, n)), max(1, done_span // max(1, a))

        def live(k: int) -> tuple[int, str]:
            return due_from + k * due_step, f"cp{k:010d}"

        def ended(k: int) -> tuple[int, str]:
            return done_from + k * done_step, f"ca{k:010d}"

        def listing() -> str:
            due, tid = live(rng.randrange(n))
            return "/ui/tasks?" + urllib.parse.urlencode({"topic": topic, "state": "DELAY", "after": f"{due}:{tid}"})

        def search() -> str:
            kind = rng.randrange(3)
            if kind == 0:
                at, tid = ended(rng.randrange(a))
                state = "FAILED" if rng.random() < 0.5 else "FINISHED"
                return "/ui/tasks?" + urllib.parse.urlencode({"topic": topic, "state": state, "after": f"{at}:{tid}"})
            if kind == 1:         # by business key (findByKey): a waiting task's or an archived one's
                key = fill.key_of("k", rng.randrange(n)) if rng.random() < 0.5 else fill.key_of("a", rng.randrange(a))
                return "/ui/tasks?" + urllib.parse.urlencode({"topic": topic, "key": key})
            since, _ = live(rng.randrange(n))
            return "/ui/tasks?" + urllib.parse.urlencode({"topic": topic, "state": "DELAY", "since": since,
                                                          "until": since + 3_600_000})

        def task_page() -> str:
            tid = live(rng.randrange(n))[1] if rng.random() < 0.5 else ended(rng.randrange(a))[1]
            return "/ui/task?" + urllib.parse.urlencode({"id": tid})

        viewer.get(listing())                 # the node's first page (templates compiled), untimed
        for name, make, target in (("list", listing, "<= 300"), ("search", search, "<= 300"),
                                   ("task_page", task_page, "<= 200")):
            times = sorted(viewer.get(make()) for _ in range(p["requests"]))
            out.append(run.fig("console", f"{name}_p95", pct(times, 0.95), "ms", target,
                               note=f"{len(times)} requests one at a time, p50 {round1(pct(times, 0.5))} ms, max "
                                    f"{round1(times[-1])} ms; {n:,} pending + {a:,} archived tasks of the topic; "
                                    "target is for 10M + 10M"))
        out += _consoles_and_load(run, p, cl, node)
    return out


def _consoles_and_load(run: Run, p: dict, cl, node) -> list[dict]:
    """The steady load with no console open, then with p["consoles"] open; each load on a topic and
    consumer of its own (a consumer counts what it received)."""
    with Topic(run, cl, "quiet") as topic:
        _, qstats = load_figures(run, "console_quiet", p, cl, topic, [node.endpoint], targets=False)
    stop = threading.Event()
    served: list[float] = []
    failed: list[str] = []

    def keep_open(k: int) -> None:
        try:
            viewer = Viewer(int(node.env["DELAYQ_HTTP_PORT"]))
            stop.wait(k * 1.0)                      # the consoles opened a second apart
            started, done = time.monotonic(), [-1] * len(OVERVIEW)
            while not stop.is_set():
                age = time.monotonic() - started
                for i, (every, path) in enumerate(OVERVIEW):
                    due = int(age // every) if every else 0
                    if done[i] < due:
                        served.append(viewer.get(path))
                        done[i] = due
                stop.wait(0.2)      # the next refresh, as the page's own timers would
        except Exception as e:  # noqa: BLE001 - reported in the figure's note
            failed.append(f"{type(e).__name__}: {e}"[:200])

    viewers = [threading.Thread(target=keep_open, args=(k,), name=f"console-{k}", daemon=True)
               for k in range(p["consoles"])]
    with Topic(run, cl, "consoles") as topic:
        for v in viewers:
            v.start()
        try:
            _, bstats = load_figures(run, f"console_{p['consoles']}_consoles", p, cl, topic, [node.endpoint],
                                     targets=False)
        finally:
            stop.set()
            for v in viewers:
                v.join(timeout=15)
    diff = bstats["p99"] - qstats["p99"] if bstats["p99"] is not None and qstats["p99"] is not None else None
    note = (f"{round1(bstats['p99'])} ms with {p['consoles']} consoles open ({len(served):,} requests, p50 "
            f"{round1(pct(sorted(served), 0.5))} ms) against {round1(qstats['p99'])} ms with none, one after the other")
    if failed:
        note += f"; {len(failed)} consoles failed: {failed[0]}"
    return [run.fig("console", "lateness_p99_consoles_minus_none", diff, "ms", "<= 1", note=note)]
