"""What the scenarios measure with: the Run that collects figures, what the consumer saw of a set
of tasks (Delivery), where undelivered tasks stand in MySQL, a topic with its consumer, and the
figures of a paced load (load_figures). CPU, speed and memory of the machine: bench.cpu."""
from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from bench import limits as lim
from bench.cpu import CpuWindow, RssSampler, by_service, cpu_note, cpu_seconds, service_pids
from bench.producer import start_producers
from bench.receiver import ConsumerProcess, Record
from bench.report import figure
from delayq.client import CallbackService
from delayq.testing.cluster import Cluster, now_ms
from delayq.testing.services import AMQP_URL
from delayq.topology import results_queue


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


def round1(x):
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
    before recording the publish; they go again after their time-to-run, 2 s for ttr 0). With
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


class Topic:
    """A fresh topic and a consumer process on its queue; removed on exit. Registered with ttr 0
    (each task finishes at the broker's confirm), or with ttr_ms, when the consumer reports SUCCESS
    of each attempt over the cluster's results queue as a real consumer would."""

    def __init__(self, run: Run, cl: Cluster, prefix: str, extra_keys: tuple[str, ...] = (), ttr_ms: int = 0):
        self.name = f"bench.{prefix}.{uuid.uuid4().hex[:8]}"
        self.run, self.cl, self.keys, self.ttr_ms = run, cl, (self.name,) + extra_keys, ttr_ms

    def __enter__(self) -> "Topic":
        for key in self.keys:
            if self.ttr_ms:
                with next(n for n in self.cl.nodes if n.alive()).client() as c:
                    c.registerService(CallbackService(topic=key, ttrMs=self.ttr_ms))
            else:
                self.cl.register(key)
        self.queue = f"delayq.{self.name}"
        self.consumer = ConsumerProcess(self.queue, list(self.keys), self.run.workdir / f"{self.name}.txt", AMQP_URL,
                                        report_to=results_queue(self.cl.name) if self.ttr_ms else None)
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
    services = CpuWindow(service_pids())
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
    wall, used, machine = services.read()
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
                note=f"dispatch stamp to receipt: p99 {round1(pct(d.broker_delays(), 0.99))} ms"),
        run.fig(scenario, "early", d.early, "tasks", "== 0"),
        run.fig(scenario, "lost", len(d.lost) - len(stuck), "tasks", "== 0",
                note=f"of {len(tasks)} submitted" + stuck_note(stuck, p.get("wait_stuck", False))
                + (f"; never received: {fates(cl, set(d.lost) - set(stuck))}" if len(d.lost) > len(stuck) else "")),
        *d.figures(run, scenario),
        run.fig(scenario, "node_cpu", 100.0 * cpu / load_s, "% of a core" + (" per node" if len(nodes) > 1 else ""),
                note="from the start of the load until the last task arrived"
                     + (" (surviving nodes)" if len(alive) < len(nodes) else "") + "; "
                     + cpu_note(used, machine, wall=wall)),
        run.fig(scenario, "node_rss_peak", rss_mb, "MB"),
        *service_figures(run, scenario, used, wall),
    ]
    return figs, {"delivery": d, "tasks": tasks, "records": records, "stuck": stuck, "extra": extra,
                  "p50": pct(d.lateness, 0.5), "p99": pct(d.lateness, 0.99)}


def service_figures(run: Run, scenario: str, used: dict[str, float], wall: float) -> list[dict]:
    """Each backing service's CPU over the window, as a share of a core, its members summed (the
    replicated topology's per member in the note): mariadb_cpu, rabbitmq_cpu, zookeeper_cpu."""
    figs = []
    for service, seconds in by_service(used).items():
        members = [f"{name} {100 * s / max(wall, 1e-9):.0f}%" for name, s in used.items()
                   if name.startswith(service + " ")]
        figs.append(run.fig(scenario, f"{service.lower()}_cpu", 100 * seconds / max(wall, 1e-9), "% of a core",
                            note=", ".join(members) or None))
    return figs


# ---- scenarios ------------------------------------------------------------------------------------

def started(cl: Cluster) -> Cluster:
    """The cluster, with its one standalone node started."""
    cl.add_node()
    return cl
