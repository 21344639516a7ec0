"""The scenarios of a large table: a million DELAY tasks pending (ten with --big) over a week.

    scale    what they cost: loading them, a node's start-up and first window scan, its memory
             idle and under a steady load, and the steady load's lateness against a nearly
             empty table
    restart  a node SIGKILLed and restarted at once while probes fire every 10 ms: how soon it
             serves and fires again, how late the tasks due meanwhile are, and that none is lost
"""
from __future__ import annotations

import statistics
import time
import uuid

from bench import limits as lim
from bench.machine import bench_cluster
from bench.measure import Run, Topic, drain, fates, load_figures, settle, started, stuck_note
from delayq.testing.cluster import Cluster, now_ms, wait_for

DAY_MS = 86_400_000


def _load_pending(cl: Cluster, p: dict) -> tuple[int, float]:
    """p["pending"] DELAY tasks straight into MySQL, due from 10 minutes on over p["days"] days (none
    fires during the scenario; their topic needs no service until then)."""
    rows = lim.task_rows(p["pending"], f"bench.pending.{uuid.uuid4().hex[:8]}", cl.shards, now_ms() + 600_000,
                         p["days"] * DAY_MS, prefix="pend-", ordered=True)
    return lim.insert_rows(cl.url, rows, writers=2)


def scale(run: Run, p: dict) -> list[dict]:
    out = []
    with bench_cluster(run.logs) as cl:
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
        with bench_cluster(run.logs) as cl, Topic(run, started(cl), "baseline") as topic:
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
    from delayq.clock import SYSTEM_CLOCK
    from delayq.store.epochs import ShardEpochs
    from delayq.store.tasks import TaskStore
    engine = cl.engine()
    try:
        store = TaskStore(engine)
        shards = ShardEpochs(engine, SYSTEM_CLOCK).shard_ids()
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
    with bench_cluster(run.logs) as cl:
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
