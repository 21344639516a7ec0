"""The scenarios: each a function (run, params) -> list of figures (see bench.report.figure).

Every scenario makes its own Cluster (fresh database, dropped after) and its own topic, queue and
consumer process, and removes them when it ends, failed or not. Sizes come from PARAMS (full run) or
SMOKE (a few seconds each, the same code path); run.limits holds the raw limits measured first.
"""
from __future__ import annotations

import uuid

from bench import limits as lim
from bench.cpu import cpu_note, cpu_window, service_pids
from bench.failover import failover
from bench.bulk import bulk
from bench.console import console
from bench.keys import keys
from bench.isolation import guarded, limit, noisy
from bench.faults import FAULTS, faults
from bench.machine import bench_cluster
from bench.measure import Delivery, Run, Topic, drain, fates, load_figures, service_figures, started
from bench.pending import restart, scale
from bench.pruning import retention
from bench.producer import run_producers
from bench.security import security
from delayq.testing.cluster import now_ms

PARAMS: dict[str, dict] = {
    "limits": {"mysql_rows": 200_000, "amqp_messages": 100_000, "amqp_window": 10_000},
    "submit": {"single_tasks_1": 5_000, "single_tasks_8": 20_000, "batch_tasks": 100_000, "batch_size": 1000},
    "security": {"calls": 2000, "batches": 100, "batch": 100, "clients": 8, "client_s": 3.0, "rounds": 4,
                 "idle_s": 2.0},
    "steady": {"rate": 1000, "duration": 60, "delay_min": 1000, "delay_max": 30_000, "batch": 10},
    "burst": {"tasks": 100_000, "producers": 2},
    "noisy": {"tasks": 100_000, "producers": 2, "rate": 200},
    "limit": {"tasks": 20_000, "rate": 500, "nodes": 3},
    "guarded": {"rate": 1000, "duration": 60, "delay_min": 1000, "delay_max": 30_000, "batch": 10, "topics": 20,
                "held_rate": 10, "held_in_flight": 5, "held_tasks": 1000},
    "scale": {"pending": 1_000_000, "days": 7, "rate": 1000, "duration": 60, "delay_min": 1000,
              "delay_max": 30_000, "batch": 10},
    "restart": {"pending": 1_000_000, "days": 7, "probe_interval_ms": 10, "probe_lead_s": 10, "probe_span_s": 60,
                "kill_after_s": 10, "wait_stuck": 1},
    "failover": {"nodes": 3, "rate": 1000, "duration": 60, "delay_min": 1000, "delay_max": 30_000, "batch": 10,
                 "kill_after_s": 20, "session_ms": 6000, "victim": "follower", "wait_stuck": 1},
    "faults": {"faults": ",".join(FAULTS), "rate": 200, "duration": 40, "fault_after_s": 10, "fault_s": 10,
               "session_ms": 6000, "after_s": 20, "rolling_rate": 200, "rolling_delay_max": 15_000,
               "rolling_ttr_ms": 3000, "rolling_lead_s": 15, "rolling_gap_s": 8, "kill_restart_s": 5,
               "rolling_duration": 300, "cut_s": 20, "cut_delay_max": 15_000, "cut_lead_s": 15},
    "keys": {"pending": 10_000_000, "submit_tasks": 100_000, "batch": 1000, "rounds": 2, "lookups": 2000,
             "racers": 1000, "threads": 50},
    "bulk": {"tasks": 1_000_000, "ops": 100_000, "rate": 1000, "duration": 90, "delay_min": 1000, "delay_max": 5000,
             "batch": 10, "lead_s": 10, "job_timeout_s": 600, "raw_rows": 200_000, "raw_batch": 500},
    "console": {"pending": 10_000_000, "archived": 10_000_000, "requests": 300, "consoles": 5, "rate": 1000,
                "duration": 60, "delay_min": 1000, "delay_max": 30_000, "batch": 10},
    "retention": {"rows": 10_000_000, "max_generate_s": 900, "rate": 1000, "duration": 60, "delay_min": 1000,
                  "delay_max": 30_000, "batch": 10, "drop_after_s": 30},
}
BIG = {"scale": {"pending": 10_000_000}, "restart": {"pending": 10_000_000}}
SMOKE: dict[str, dict] = {
    "limits": {"mysql_rows": 5_000, "amqp_messages": 5_000},
    "submit": {"single_tasks_1": 300, "single_tasks_8": 800, "batch_tasks": 3_000},
    "security": {"calls": 100, "batches": 10, "clients": 2, "client_s": 0.5, "rounds": 2, "idle_s": 0.5},
    "steady": {"rate": 200, "duration": 5, "delay_max": 3000},
    "burst": {"tasks": 3_000, "producers": 1},
    "noisy": {"tasks": 3_000, "producers": 1, "rate": 100},
    "limit": {"tasks": 1_000, "rate": 250},
    "guarded": {"rate": 200, "duration": 5, "delay_max": 3000, "topics": 3, "held_tasks": 100},
    "scale": {"pending": 5_000, "rate": 200, "duration": 3, "delay_max": 3000},
    "restart": {"pending": 5_000, "probe_lead_s": 4, "probe_span_s": 10, "kill_after_s": 2, "wait_stuck": 0},
    "failover": {"rate": 200, "duration": 6, "delay_max": 3000, "kill_after_s": 2, "session_ms": 3000, "wait_stuck": 0},
    "faults": {"faults": "node_kill", "rate": 100, "duration": 8, "fault_after_s": 2, "session_ms": 3000,
               "after_s": 3, "rolling_rate": 50, "rolling_delay_max": 3000, "rolling_lead_s": 3, "rolling_gap_s": 1,
               "kill_restart_s": 2, "rolling_duration": 120, "cut_s": 3, "cut_delay_max": 3000, "cut_lead_s": 3},
    "keys": {"pending": 5_000, "submit_tasks": 2_000, "batch": 100, "rounds": 1, "lookups": 100, "racers": 100,
             "threads": 10},
    "bulk": {"tasks": 5_000, "rate": 200, "duration": 3, "delay_min": 500, "delay_max": 1500, "lead_s": 1,
             "job_timeout_s": 60, "raw_rows": 2_000, "raw_batch": 500},
    "console": {"pending": 5_000, "archived": 5_000, "requests": 20, "rate": 200, "duration": 2, "delay_min": 500,
                "delay_max": 1500},
    "retention": {"rows": 5_000, "rate": 200, "duration": 3, "delay_min": 500, "delay_max": 1500, "drop_after_s": 1},
}
COUNTS = {"rows", "mysql_rows", "amqp_messages", "single_tasks_1", "single_tasks_8", "batch_tasks", "tasks", "pending",
          "calls", "batches", "submit_tasks", "lookups", "archived", "requests"}
ORDER = ["limits", "submit", "security", "steady", "burst", "noisy", "limit", "guarded", "scale", "restart",
         "failover"]
# Only when asked for: faults stops shared services; keys, bulk, console and retention first fill
# tables of millions of rows (minutes each at full size), so they are run on their own (bench/README.md).
OPTIONAL = ["faults", "keys", "bulk", "console", "retention"]


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
                           ">= 20000", note=f"bench.receiver, {a['consumed']:,} messages"))
    return out


def submit(run: Run, p: dict) -> list[dict]:
    out = []
    mysql = run.limits.get("mysql")
    with bench_cluster(run.logs) as cl:
        node = cl.add_node()
        topic = f"bench.submit.{uuid.uuid4().hex[:8]}"
        cl.register(topic)
        for label, procs, total, batch in (("single_1_client", 1, p["single_tasks_1"], 1),
                                           ("single_8_clients", 8, p["single_tasks_8"], 1),
                                           ("batch_1000", 1, p["batch_tasks"], p["batch_size"])):
            per = max(1, total // procs)
            delay = 1.0 + 0.5 * procs
            # The CPU each side spends per task, from the instant the clients start calling.
            with cpu_window({"node": node.pid, **service_pids("MariaDB")}, delay) as cpu:
                summaries, tasks = run_producers(procs, {"endpoints": node.endpoint, "topic": topic, "count": per,
                                                         "batch": batch, "server_ids": True}, run.workdir,
                                                 start_delay_s=delay)
            _, used, machine = cpu.read()
            used = {"node": used.pop("node"), "clients": sum(s.get("cpu_s", 0.0) for s in summaries), **used}
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
            out.append(run.fig("submit", f"{label}_node_cpu", 1e6 * used["node"] / max(1, len(tasks)), "us/task",
                               note=cpu_note(used, machine, per=len(tasks))))
        run.results["submit"] = {f["figure"]: f["value"] for f in out}
    return out


def steady(run: Run, p: dict) -> list[dict]:
    with bench_cluster(run.logs) as cl:
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
    with bench_cluster(run.logs) as cl, Topic(run, started(cl), "burst") as topic:
        node = cl.nodes[0]
        due = now_ms() + int(lead_s * 1000)
        summaries, tasks = run_producers(p["producers"], {"endpoints": node.endpoint, "topic": topic.name,
                                                          "count": n // p["producers"], "batch": 1000,
                                                          "due_at": due}, run.workdir, start_delay_s=0.5)
        submitted_by = max(s["end_ms"] for s in summaries)
        # The CPU each process spends on the drain, from the due instant (or now, if that has passed).
        with cpu_window({"node": node.pid, "consumer": topic.consumer.proc.pid, **service_pids()},
                        (due - now_ms()) / 1000) as cpu:
            records = drain(topic.consumer, len(tasks), due, 5.0)
        wall, used, machine = cpu.read()
        d = Delivery.of(tasks, records)
        if d.first:
            recv = sorted(r.recv_us for r in d.first.values())
            drain_s = recv[-1] / 1e6 - due / 1000
            first_ms = recv[0] / 1000 - due
            first = min(d.first.values(), key=lambda r: r.recv_us)
            first_note = (f"due to publish {first.dispatched_ms - due} ms, publish to consumer "
                          f"{first.recv_us / 1000 - first.dispatched_ms:.1f} ms")
        else:
            drain_s, first_ms, first_note = None, None, None
        rate = len(d.first) / drain_s if drain_s else None
        note = None if submitted_by < due else f"the producers finished {submitted_by - due} ms AFTER the due instant"
        out += [run.fig("burst", "drain_time", drain_s, "s", note=note or f"{len(tasks):,} tasks due at one instant"),
                run.fig("burst", "drain_rate", rate, "tasks/s", ">= 12000", limit=amqp),
                run.fig("burst", "drain_rate_vs_publish_limit", rate / amqp if rate and amqp else None, "ratio",
                        ">= 0.65"),
                run.fig("burst", "first_arrival_lateness", first_ms, "ms", note=first_note),
                run.fig("burst", "node_cpu_during_drain", 100.0 * used["node"] / max(0.001, wall), "% of a core",
                        note=cpu_note(used, machine, wall=wall)),
                run.fig("burst", "lost", len(d.lost), "tasks", "== 0",
                        note=f"never received: {fates(cl, d.lost)}" if d.lost else None),
                *d.figures(run, "burst"), *service_figures(run, "burst", used, wall)]
    return out


SCENARIOS = {"limits": limits, "submit": submit, "security": security, "steady": steady, "burst": burst,
             "noisy": noisy, "limit": limit, "guarded": guarded, "scale": scale, "restart": restart,
             "failover": failover, "faults": faults, "keys": keys, "bulk": bulk,
             "console": console, "retention": retention}
