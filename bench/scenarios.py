"""The scenarios: each a function (run, params) -> list of figures (see bench.report.figure).

Every scenario makes its own Cluster (fresh database, dropped after) and its own topic, queue and
consumer process, and removes them when it ends, failed or not. Sizes come from PARAMS (full run) or
SMOKE (a few seconds each, the same code path); run.limits holds the raw limits measured first.
"""
from __future__ import annotations

import math
import os
import statistics
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from bench import limits as lim
from bench.cluster import AMQP_URL, Cluster, now_ms, wait_for
from bench.consumer import ConsumerProcess, Record
from bench.producer import run_producers, start_producers
from bench.report import figure

DAY_MS = 86_400_000

PARAMS: dict[str, dict] = {
    "limits": {"mysql_rows": 200_000, "amqp_messages": 100_000, "amqp_window": 10_000},
    "submit": {"single_tasks_1": 5_000, "single_tasks_8": 20_000, "batch_tasks": 100_000, "batch_size": 1000},
    "steady": {"rate": 1000, "duration": 60, "delay_min": 1000, "delay_max": 30_000, "batch": 10},
    "burst": {"tasks": 100_000, "producers": 2},
    "scale": {"pending": 1_000_000, "days": 7, "rate": 1000, "duration": 60, "delay_min": 1000,
              "delay_max": 30_000, "batch": 10},
    "restart": {"pending": 1_000_000, "days": 7, "probe_interval_ms": 10, "probe_lead_s": 10, "probe_span_s": 60,
                "kill_after_s": 10, "wait_stuck": 1},
    "failover": {"nodes": 3, "rate": 1000, "duration": 60, "delay_min": 1000, "delay_max": 30_000, "batch": 10,
                 "kill_after_s": 20, "session_ms": 6000, "victim": "follower", "wait_stuck": 1},
}
BIG = {"scale": {"pending": 10_000_000}, "restart": {"pending": 10_000_000}}
SMOKE: dict[str, dict] = {
    "limits": {"mysql_rows": 5_000, "amqp_messages": 5_000},
    "submit": {"single_tasks_1": 300, "single_tasks_8": 800, "batch_tasks": 3_000},
    "steady": {"rate": 200, "duration": 5, "delay_max": 3000},
    "burst": {"tasks": 3_000, "producers": 1},
    "scale": {"pending": 5_000, "rate": 200, "duration": 3, "delay_max": 3000},
    "restart": {"pending": 5_000, "probe_lead_s": 4, "probe_span_s": 10, "kill_after_s": 2, "wait_stuck": 0},
    "failover": {"rate": 200, "duration": 6, "delay_max": 3000, "kill_after_s": 2, "session_ms": 3000, "wait_stuck": 0},
}
COUNTS = {"mysql_rows", "amqp_messages", "single_tasks_1", "single_tasks_8", "batch_tasks", "tasks", "pending"}
ORDER = ["limits", "submit", "steady", "burst", "scale", "restart", "failover"]


@dataclass
class Run:
    workdir: Path
    logs: Path
    emit: callable
    limits: dict = field(default_factory=dict)
    results: dict = field(default_factory=dict)

    def fig(self, *args, **kwargs) -> dict:
        f = figure(*args, **kwargs)
        self.emit(f)
        return f


# ---- measuring ------------------------------------------------------------------------------------

def pct(sorted_values: list[float], q: float) -> float | None:
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))]     # nearest rank


@dataclass
class Delivery:
    """What the consumer saw of a set of submitted tasks (task id -> due ms)."""
    first: dict[str, Record]
    lost: set[str]
    duplicates: int             # deliveries beyond the first of each task
    repeated: int               # of those, the same attempt delivered again (one dispatch per attempt broken)
    lateness: list[float]       # ms, first receipt of each task, sorted

    @classmethod
    def of(cls, tasks: dict[str, int], records: list[Record]) -> "Delivery":
        first: dict[str, Record] = {}
        extra = 0
        seen: set[tuple[str, int]] = set()
        repeated = 0
        for r in records:
            if r.task_id not in tasks:
                continue
            repeated += (r.task_id, r.attempt) in seen
            seen.add((r.task_id, r.attempt))
            if r.task_id in first:
                extra += 1
                if r.recv_us < first[r.task_id].recv_us:
                    first[r.task_id] = r
            else:
                first[r.task_id] = r
        late = sorted(r.recv_us / 1000.0 - tasks[t] for t, r in first.items())
        return cls(first, set(tasks) - set(first), extra, repeated, late)

    def figures(self, run: "Run", scenario: str) -> list[dict]:
        """duplicates, and how many of them were the same attempt again."""
        return [run.fig(scenario, "duplicates", self.duplicates, "deliveries", "== 0",
                        note=f"{self.duplicates - self.repeated} a further attempt, {self.repeated} the same "
                             "attempt again" if self.duplicates else None),
                run.fig(scenario, "repeated_attempts", self.repeated, "deliveries", "== 0",
                        note="an attempt (<task id>:<attempt>) delivered more than once")]

    def claim_delays(self, tasks: dict[str, int]) -> list[float]:
        return sorted(float(r.dispatched_ms - tasks[t]) for t, r in self.first.items())

    def broker_delays(self) -> list[float]:
        return sorted(r.recv_us / 1000.0 - r.dispatched_ms for r in self.first.values())

    @property
    def early(self) -> int:
        return sum(1 for x in self.lateness if x < 0)


def _r(x):
    return None if x is None else round(x, 1)


def rows_for(cl: Cluster, query: str, task_ids) -> list[tuple]:
    """query (with {ids} where the id list goes) run over task_ids, 1,000 at a time."""
    ids, rows = list(task_ids), []
    engine = cl.engine()
    try:
        with engine.connect() as conn:
            for i in range(0, len(ids), 1000):
                chunk = ids[i:i + 1000]
                rows += conn.exec_driver_sql(query.format(ids=",".join(["%s"] * len(chunk))), tuple(chunk)).all()
    finally:
        engine.dispose()
    return rows


def live_statuses(cl: Cluster, task_ids) -> dict[str, tuple[int, int | None]]:
    """task id -> (status, deadline ms) for those of the ids still live in job_delay_task."""
    return {tid: (status, deadline) for tid, status, deadline in rows_for(
        cl, "SELECT task_id, status, deadline_ms FROM job_delay_task WHERE task_id IN ({ids})", task_ids)}


def fates(cl: Cluster, task_ids) -> str:
    """Where tasks the consumer never saw ended up, e.g. "3 FINISHED/CONFIRMED, 1 missing"."""
    seen = {tid: f"{ {3: 'FINISHED', 4: 'FAILED', 5: 'CANCELLED'}.get(status, status)}/{result}"
            for tid, status, result in rows_for(
                cl, "SELECT b.task_id, b.status, GROUP_CONCAT(x.result ORDER BY x.attempt) "
                    "FROM job_delay_task_backlog b LEFT JOIN job_delay_task_execlog x USING (task_id) "
                    "WHERE b.task_id IN ({ids}) GROUP BY b.task_id, b.status", task_ids)}
    counts: dict[str, int] = {}
    for tid in task_ids:
        key = seen.get(tid, "not in MySQL")
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))


def shards_of(cl: Cluster, task_ids) -> dict[str, int]:
    ids = list(task_ids)
    return {tid: shard for table in ("job_delay_task", "job_delay_task_backlog")
            for tid, shard in rows_for(cl, f"SELECT task_id, shard_id FROM {table} WHERE task_id IN ({{ids}})", ids)}


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def drain(consumer: ConsumerProcess, count: int, until_ms: int, grace_s: float, quiet_s: float = 5.0) -> list[Record]:
    """Records until `count` arrived: waits until until_ms + grace_s, then on for as long as records
    keep coming (a node that fell behind still delivers; what never comes is lost)."""
    records = consumer.wait_count(count, max(1.0, (until_ms - now_ms()) / 1000 + grace_s))
    if len(records) < count:
        records = consumer.wait_count(count, 1800, quiet_s=quiet_s)
    return records


def settle(cl: Cluster, consumer: ConsumerProcess, tasks: dict[str, int], records: list[Record],
           wait_stuck: bool) -> tuple[Delivery, dict]:
    """The delivery, and the undelivered tasks still live in MySQL (READY: claimed by a node that died
    before recording the publish; they go again after their time-to-run, 60 s for ttr 0). With
    wait_stuck, waits for those to arrive first."""
    d = Delivery.of(tasks, records)
    stuck = live_statuses(cl, d.lost) if d.lost else {}
    deadlines = [dl for _, dl in stuck.values() if dl]
    if wait_stuck and deadlines:
        consumer.wait_count(len(tasks), max(1.0, (max(deadlines) - now_ms()) / 1000 + 15))
        d = Delivery.of(tasks, consumer.poll())
        stuck = live_statuses(cl, d.lost) if d.lost else {}
    return d, stuck


def stuck_note(stuck: dict, waited: bool) -> str:
    if not stuck:
        return ""
    return (f"; {len(stuck)} tasks undelivered but still live in MySQL (claimed before a kill, sent again only "
            f"after their time-to-run{'' if waited else '; not waited for'})")


class RssSampler:
    """The peak VmRSS of some nodes, sampled every interval on a thread."""

    def __init__(self, nodes, interval: float = 0.25):
        self.nodes, self.peak_kb = nodes, 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        while not self._stop.is_set():
            for n in self.nodes:
                self.peak_kb = max(self.peak_kb, n.rss_kb())
            self._stop.wait(0.25)

    def stop(self) -> float:
        self._stop.set()
        self._t.join(2)
        return self.peak_kb / 1024


class Topic:
    """A fresh topic registered with ttr 0, and a consumer process on its queue; removed on exit."""

    def __init__(self, run: Run, cl: Cluster, prefix: str, extra_keys: tuple[str, ...] = ()):
        self.name = f"bench.{prefix}.{uuid.uuid4().hex[:8]}"
        self.run, self.cl, self.keys = run, cl, (self.name,) + extra_keys

    def __enter__(self) -> "Topic":
        for key in self.keys:
            self.cl.register(key)
        self.queue = f"delayq.{self.name}"
        self.consumer = ConsumerProcess(self.queue, list(self.keys), self.run.workdir / f"{self.name}.txt", AMQP_URL)
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.consumer.stop()
        finally:
            lim.delete_queue(self.queue)


def load_figures(run: Run, scenario: str, p: dict, cl: Cluster, topic: Topic, endpoints: list[str],
                 during=None, targets: bool = True) -> tuple[list[dict], dict]:
    """The steady load (rate tasks/s for duration s, delays uniform in [delay_min, delay_max] ms)
    against endpoints, waited for until every task arrived; lateness, lost and duplicate figures.
    `during(start_ms)` runs on this thread while the producer works (failover kills a node there)."""
    nodes = [n for n in cl.nodes if n.alive()]
    cpu0 = {n.pid: cpu_seconds(n.pid) for n in nodes}
    rss = RssSampler(nodes)
    started = time.monotonic()
    wait = start_producers(1, {"endpoints": ",".join(endpoints), "topic": topic.name, "rate": p["rate"],
                               "duration": p["duration"], "batch": p["batch"], "delay_min": p["delay_min"],
                               "delay_max": p["delay_max"]}, run.workdir, start_delay_s=0.5)
    extra = during(now_ms() + 500) if during else {}
    summaries, tasks = wait()
    last_due = max(tasks.values(), default=now_ms())
    grace = 3 + p.get("session_ms", 0) / 1000
    records = drain(topic.consumer, len(tasks), last_due, grace)
    load_s = time.monotonic() - started
    alive = [n for n in nodes if n.alive()]
    cpu = sum(cpu_seconds(n.pid) - cpu0[n.pid] for n in alive) / max(1, len(alive))
    rss_mb = rss.stop()
    d, stuck = settle(cl, topic.consumer, tasks, records, p.get("wait_stuck", False))
    s = summaries[0]
    rate = s["submitted"] / max(0.001, (s["end_ms"] - s["start_ms"]) / 1000)
    note = f"producer up to {s['max_behind_ms']} ms behind schedule" + \
        (f", {s['errors']} failed calls (retried)" if s["errors"] else "")
    figs = [
        run.fig(scenario, "submitted_rate", rate, "tasks/s", f">= {p['rate'] * 0.95:g}", note=note),
        run.fig(scenario, "lateness_p50", pct(d.lateness, 0.5), "ms", "<= 3" if targets else None),
        run.fig(scenario, "lateness_p99", pct(d.lateness, 0.99), "ms", "<= 10" if targets else None),
        run.fig(scenario, "lateness_max", d.lateness[-1] if d.lateness else None, "ms"),
        run.fig(scenario, "claim_delay_p50", pct(d.claim_delays(tasks), 0.5), "ms",
                note="due time to the node's dispatch stamp (x-delayq-dispatched-at): p99 "
                     f"{pct(d.claim_delays(tasks), 0.99)} ms"),
        run.fig(scenario, "broker_delay_p50", pct(d.broker_delays(), 0.5), "ms",
                note=f"dispatch stamp to receipt: p99 {_r(pct(d.broker_delays(), 0.99))} ms"),
        run.fig(scenario, "early", d.early, "tasks", "== 0"),
        run.fig(scenario, "lost", len(d.lost) - len(stuck), "tasks", "== 0",
                note=f"of {len(tasks)} submitted" + stuck_note(stuck, p.get("wait_stuck", False))
                + (f"; never received: {fates(cl, set(d.lost) - set(stuck))}" if len(d.lost) > len(stuck) else "")),
        *d.figures(run, scenario),
        run.fig(scenario, "node_cpu", 100.0 * cpu / load_s, "% of a core" + (" per node" if len(nodes) > 1 else ""),
                note="from the start of the load until the last task arrived"
                     + (" (surviving nodes)" if len(alive) < len(nodes) else "")),
        run.fig(scenario, "node_rss_peak", rss_mb, "MB"),
    ]
    return figs, {"delivery": d, "tasks": tasks, "records": records, "stuck": stuck, "extra": extra,
                  "p50": pct(d.lateness, 0.5), "p99": pct(d.lateness, 0.99)}


# ---- scenarios ------------------------------------------------------------------------------------

def _started(cl: Cluster) -> Cluster:
    """The cluster, with its one standalone node started."""
    cl.add_node()
    return cl


def limits(run: Run, p: dict) -> list[dict]:
    m = lim.mysql_insert_rate(run.logs, p["mysql_rows"])
    a = lim.amqp_confirm_rate(run.workdir, p["amqp_messages"], p["amqp_window"])
    run.limits = {"mysql": m["rows_per_s"], "amqp": a["publishes_per_s"]}
    out = [run.fig("limits", "mysql_insert_rows", m["rows_per_s"], "rows/s",
                   note=f"{m['rows']:,} rows, 1000-row INSERT statements, autocommit, one connection"),
           run.fig("limits", "rabbitmq_confirmed_publishes", a["publishes_per_s"], "msg/s",
                   note=f"{a['messages']:,} persistent mandatory messages to a durable queue, ConfirmedPublisher, "
                        f"window {a['window']:,}")]
    if "consumer_msgs_per_s" in a:
        out.append(run.fig("limits", "consumer_drain", a["consumer_msgs_per_s"], "msg/s",
                           ">= 20000", note=f"bench.consumer, {a['consumed']:,} messages"))
    return out


def submit(run: Run, p: dict) -> list[dict]:
    out = []
    mysql = run.limits.get("mysql")
    with Cluster(run.logs) as cl:
        node = cl.add_node()
        topic = f"bench.submit.{uuid.uuid4().hex[:8]}"
        cl.register(topic)
        for label, procs, total, batch in (("single_1_client", 1, p["single_tasks_1"], 1),
                                           ("single_8_clients", 8, p["single_tasks_8"], 1),
                                           ("batch_1000", 1, p["batch_tasks"], p["batch_size"])):
            per = max(1, total // procs)
            summaries, tasks = run_producers(procs, {"endpoints": node.endpoint, "topic": topic, "count": per,
                                                     "batch": batch, "server_ids": True}, run.workdir,
                                             start_delay_s=1.0 + 0.5 * procs)
            span = (max(s["end_ms"] for s in summaries) - min(s["start_ms"] for s in summaries)) / 1000
            skew = max(s["start_ms"] for s in summaries) - min(s["start_ms"] for s in summaries)
            errors = sum(s["errors"] for s in summaries)
            target = {"single_8_clients": ">= 5000", "batch_1000": ">= 40000"}.get(label)
            note = (f"{len(tasks):,} tasks, call p50 {summaries[0]['call_p50_ms']} ms p99 {summaries[0]['call_p99_ms']} ms"
                    + (f", clients started {skew} ms apart" if skew > 50 else ""))
            if errors:
                note += f", {errors} failed calls: {summaries[0]['first_errors'][:1]}"
            out.append(run.fig("submit", label, len(tasks) / max(span, 0.001), "tasks/s", target, limit=mysql,
                               note=note))
        run.results["submit"] = {f["figure"]: f["value"] for f in out}
    return out


def steady(run: Run, p: dict) -> list[dict]:
    with Cluster(run.logs) as cl:
        cl.add_node()
        with Topic(run, cl, "steady") as topic:
            figs, stats = load_figures(run, "steady", p, cl, topic, [cl.nodes[0].endpoint])
    run.results["steady"] = {"p50": stats["p50"], "p99": stats["p99"], "params": p}
    return figs


def burst(run: Run, p: dict) -> list[dict]:
    n = p["tasks"]
    amqp = run.limits.get("amqp")
    batch_rate = run.results.get("submit", {}).get("batch_1000") or 5000
    lead_s = max(4.0, 2.0 + 1.5 * n / max(1000.0, batch_rate * 0.7))
    out = []
    with Cluster(run.logs) as cl, Topic(run, _started(cl), "burst") as topic:
        node = cl.nodes[0]
        due = now_ms() + int(lead_s * 1000)
        summaries, tasks = run_producers(p["producers"], {"endpoints": node.endpoint, "topic": topic.name,
                                                          "count": n // p["producers"], "batch": 1000,
                                                          "due_at": due}, run.workdir, start_delay_s=0.5)
        submitted_by = max(s["end_ms"] for s in summaries)
        cpu0 = cpu_seconds(node.pid)
        records = drain(topic.consumer, len(tasks), due, 5.0)
        d = Delivery.of(tasks, records)
        if d.first:
            recv = sorted(r.recv_us for r in d.first.values())
            drain_s = recv[-1] / 1e6 - due / 1000
            first_ms = recv[0] / 1000 - due
        else:
            drain_s, first_ms = None, None
        rate = len(d.first) / drain_s if drain_s else None
        note = None if submitted_by < due else f"the producers finished {submitted_by - due} ms AFTER the due instant"
        out += [run.fig("burst", "drain_time", drain_s, "s", note=note or f"{len(tasks):,} tasks due at one instant"),
                run.fig("burst", "drain_rate", rate, "tasks/s", ">= 12000", limit=amqp),
                run.fig("burst", "drain_rate_vs_publish_limit", rate / amqp if rate and amqp else None, "ratio",
                        ">= 0.65"),
                run.fig("burst", "first_arrival_lateness", first_ms, "ms"),
                run.fig("burst", "node_cpu_during_drain", 100.0 * (cpu_seconds(node.pid) - cpu0) /
                        max(0.001, (now_ms() - max(due, submitted_by)) / 1000), "% of a core"),
                run.fig("burst", "lost", len(d.lost), "tasks", "== 0",
                        note=f"never received: {fates(cl, d.lost)}" if d.lost else None),
                *d.figures(run, "burst")]
    return out


def _load_pending(cl: Cluster, p: dict) -> tuple[int, float]:
    """p["pending"] DELAY tasks straight into MySQL, due from 10 minutes on over p["days"] days (none
    fires during the scenario; their topic needs no service until then)."""
    rows = lim.task_rows(p["pending"], f"bench.pending.{uuid.uuid4().hex[:8]}", cl.shards, now_ms() + 600_000,
                         p["days"] * DAY_MS, prefix="pend-", ordered=True)
    return lim.insert_rows(cl.url, rows, writers=2)


def scale(run: Run, p: dict) -> list[dict]:
    out = []
    with Cluster(run.logs) as cl:
        node = cl.add_node(start=False)
        n, secs = _load_pending(cl, p)
        out.append(run.fig("scale", "pending_loaded", n, "tasks", note=f"over {p['days']} days, direct INSERTs"))
        out.append(run.fig("scale", "load_rate", n / secs, "rows/s", limit=run.limits.get("mysql"),
                           note="two connections"))
        node.start(wait=False)
        serving = wait_for(lambda: node.answers() and now_ms(), 120, 0.01, "the node to serve")
        first_scan = wait_for(lambda: _scans(node) >= 1 and now_ms(), 60, 0.01, "the first window scan")
        out.append(run.fig("scale", "startup_to_serving", (serving - node.spawned_ms) / 1000, "s"))
        out.append(run.fig("scale", "startup_to_first_scan", (first_scan - node.spawned_ms) / 1000, "s"))
        out.append(run.fig("scale", "window_scan", _window_scan_ms(cl), "ms",
                           note="TaskStore.scan_due over every shard, window 60 s, median of 5"))
        time.sleep(1.0)
        out.append(run.fig("scale", "node_rss_idle", node.rss_kb() / 1024, "MB", "<= 200",
                           note="target is for 10M pending (--big)"))
        with Topic(run, cl, "scale") as topic:
            figs, stats = load_figures(run, "scale", p, cl, topic, [node.endpoint])
        out += figs
        out.append(run.fig("scale", "node_rss_after_load", node.rss_kb() / 1024, "MB", "<= 200"))
    base = run.results.get("steady")
    if base is None or base["params"]["rate"] != p["rate"]:
        with Cluster(run.logs) as cl, Topic(run, _started(cl), "baseline") as topic:
            _, bstats = load_figures(run, "scale_baseline", p, cl, topic, [cl.nodes[0].endpoint])
        base = {"p50": bstats["p50"], "p99": bstats["p99"]}
    for q in ("p50", "p99"):
        if base[q] is not None and stats[q] is not None:
            out.append(run.fig("scale", f"lateness_{q}_vs_empty_table", stats[q] - base[q], "ms", "<= 2",
                               note=f"{stats[q]:.1f} ms with {n:,} pending vs {base[q]:.1f} ms on an almost empty table"))
    return out


def _scans(node) -> float:
    try:
        return node.metrics().get("delayq_window_scans_total", 0)
    except OSError:
        return 0


def _window_scan_ms(cl: Cluster, window_ms: int = 60_000, cap: int = 200_000) -> float:
    from nodes.store import TaskStore
    engine = cl.engine()
    try:
        store = TaskStore(engine)
        shards = store.shard_ids()
        times = []
        for _ in range(5):
            t = time.perf_counter()
            store.scan_due(shards, now_ms() + window_ms, cap)
            times.append((time.perf_counter() - t) * 1000)
        return statistics.median(times)
    finally:
        engine.dispose()


def restart(run: Run, p: dict) -> list[dict]:
    out = []
    with Cluster(run.logs) as cl:
        node = cl.add_node(start=False)
        n, _ = _load_pending(cl, p)
        node.start()
        with Topic(run, cl, "restart") as topic:
            # Probes straight into MySQL: one due every probe_interval_ms, so "firing again" is visible.
            count = int(p["probe_span_s"] * 1000 / p["probe_interval_ms"])
            first_due = now_ms() + int(p["probe_lead_s"] * 1000)
            probes = {f"probe-{i:07d}": first_due + i * p["probe_interval_ms"] for i in range(count)}
            lim.insert_rows(cl.url, _probe_rows(probes, topic.name, cl.shards))
            # Wait for the probes to fire for kill_after_s, then SIGKILL and restart at once.
            topic.consumer.wait_count(10 ** 9, (first_due - now_ms()) / 1000 + p["kill_after_s"])
            before = len(topic.consumer.poll())
            node.kill()
            killed = now_ms()
            node.start(wait=False)
            serving = wait_for(lambda: node.answers() and now_ms(), 120, 0.005, "the restarted node to serve")

            def fired():
                fresh = [r for r in topic.consumer.poll() if r.dispatched_ms >= node.spawned_ms]
                return min(r.recv_us for r in fresh) / 1000 if fresh else None
            fire = wait_for(fired, 60, 0.005, "the restarted node to fire")
            last_due = max(probes.values())
            records = drain(topic.consumer, len(probes), last_due, 5.0)
            d, stuck = settle(cl, topic.consumer, probes, records, p["wait_stuck"])
            outage = sorted(r.recv_us / 1000 - probes[t] for t, r in d.first.items() if probes[t] >= killed
                            and probes[t] <= fire)
            late_stuck = max((now_ms() - probes[t] for t in stuck), default=None)
        out += [run.fig("restart", "pending", n, "tasks"),
                run.fig("restart", "restart_to_serving", (serving - node.spawned_ms) / 1000, "s"),
                run.fig("restart", "restart_to_firing", (fire - node.spawned_ms) / 1000, "s", "<= 2",
                        note="process start to the first task it dispatched, at the consumer"),
                run.fig("restart", "kill_to_firing", (fire - killed) / 1000, "s"),
                run.fig("restart", "outage_tasks_max_lateness", outage[-1] if outage else None, "ms",
                        note=f"{len(outage)} probes due between the kill and the first fire"),
                run.fig("restart", "in_flight_at_kill_max_lateness",
                        max(late_stuck or 0, max((d.first[t].recv_us / 1000 - probes[t] for t in d.first
                                                  if d.first[t].attempt > 1), default=0)) or None, "ms",
                        note="probes claimed by the killed node and not recorded: sent again after their "
                             "time-to-run" + ("" if not stuck else f"; {len(stuck)} still undelivered, so a lower "
                                                                   "bound")),
                run.fig("restart", "lost", len(d.lost) - len(stuck), "tasks", "== 0",
                        note=f"of {len(probes)} probes ({before} delivered before the kill)" + stuck_note(stuck, p["wait_stuck"])
                        + (f"; never received: {fates(cl, set(d.lost) - set(stuck))}" if len(d.lost) > len(stuck) else "")),
                *d.figures(run, "restart")]
    return out


def _probe_rows(probes: dict[str, int], topic: str, shards: int):
    import hashlib
    spec = hashlib.blake2b(topic.encode(), digest_size=16).hexdigest()
    now = now_ms()
    for i, (tid, due) in enumerate(probes.items()):
        yield f"('{tid}','{topic}',{i % shards},{due},0,0,X'70',X'{spec}',3,0,NULL,NULL,{now},{now})"


def failover(run: Run, p: dict) -> list[dict]:
    out = []
    session_s = p["session_ms"] / 1000
    with Cluster(run.logs, zk=True, DELAYQ_ZK_SESSION_TIMEOUT_MS=p["session_ms"]) as cl:
        nodes = [cl.add_node(start=False) for _ in range(p["nodes"])]
        for nd in nodes:
            nd.start(wait=False)
        for nd in nodes:
            wait_for(nd.answers, 60, 0.02, f"{nd.node_id} to serve")
        cl.wait_balanced()
        with Topic(run, cl, "failover") as topic:
            state: dict = {}

            def kill(start_ms):
                time.sleep(max(0.0, (start_ms - now_ms()) / 1000 + p["kill_after_s"]))
                with nodes[0].client() as c:
                    ci = c.cluster()
                victims = [n for n in nodes if (n.node_id == ci.master) == (p["victim"] == "master")]
                victim = victims[-1]
                state["shards"] = {s for s, owner in ci.assignment.items() if owner == victim.node_id}
                state["victim"] = victim.node_id
                victim.kill()
                state["killed"] = now_ms()
                return state
            figs, stats = load_figures(run, "failover", p, cl, topic, [n.endpoint for n in nodes], during=kill,
                                       targets=False)
            out += figs
            d: Delivery = stats["delivery"]
            killed = state["killed"]
            shard = shards_of(cl, stats["tasks"])
            theirs = {t: due for t, due in stats["tasks"].items() if shard.get(t) in state["shards"]
                      and (t not in d.first or d.first[t].recv_us / 1000 >= killed)}
            late = sorted(d.first[t].recv_us / 1000 - due for t, due in theirs.items() if t in d.first)
            stuck = stats["stuck"]
            bound = [now_ms() - due for t, due in theirs.items() if t in stuck]     # still undelivered
            late = sorted(late + bound)
            overdue = [d.first[t].recv_us / 1000 for t, due in theirs.items() if t in d.first and due <= killed + 500]
            out += [run.fig("failover", "dead_node_tasks", len(theirs), "tasks",
                            note=f"{state['victim']} ({p['victim']}) killed with {len(state['shards'])} shards; "
                                 f"tasks of its shards not delivered before the kill"),
                    run.fig("failover", "dead_node_tasks_max_lateness", late[-1] / 1000 if late else None, "s",
                            f"<= {session_s + 2:g}", note=f"session timeout {session_s:g} s" + (
                                f"; includes {len(bound)} tasks still undelivered (lower bound)" if bound else "")),
                    run.fig("failover", "dead_node_tasks_p99_lateness", pct(late, 0.99) / 1000 if late else None,
                            "s"),
                    run.fig("failover", "kill_to_first_fire_of_dead_node_shards",
                            (min(overdue) - killed) / 1000 if overdue else None, "s"),
                    run.fig("failover", "dead_node_tasks_in_flight_at_kill",
                            len(stuck) + sum(1 for t in theirs if t in d.first and d.first[t].attempt > 1), "tasks",
                            "== 0", note="claimed by the killed node and not recorded: sent again as a further "
                                         "attempt after their time-to-run (2 s for ttr 0)")]
    return out


SCENARIOS = {"limits": limits, "submit": submit, "steady": steady, "burst": burst, "scale": scale,
             "restart": restart, "failover": failover}
