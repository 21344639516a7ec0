"""The isolation scenarios: what one topic's load costs the others, and whether limits hold.

noisy     topic A has `tasks` due at one instant on one node while topic B fires a steady `rate`
          tasks/s: B's lateness while A drains, and A's drain rate.
limit     a topic limited to `rate`/s with `tasks` due at once on a 3-node ZooKeeper cluster: the
          tasks received in each whole second (every one within the limit + 10%).
guarded   the steady load again while `topics` other topics hold tasks back under their limits in
          memory: its p99 lateness against the steady scenario's of the same run (+1 ms at most).
"""
from __future__ import annotations

import collections

from bench.cpu import cpu_note, cpu_window, service_pids
from bench.machine import bench_cluster
from bench.measure import Delivery, Run, Topic, drain, load_figures, pct, started
from bench.producer import run_producers, start_producers
from delayq.client.gen.delayq_thrift import ttypes
from delayq.testing.cluster import Cluster, now_ms, wait_for


def _limit(cl: Cluster, topic: str, **controls) -> None:
    """Set a topic's controls and wait until every node applied them."""
    with cl.nodes[0].client() as c:
        c.setTopicControls(ttypes.TopicControls(topic=topic, **controls))
    rate = controls.get("maxFireRate") or 0.0
    for node in cl.nodes:
        wait_for(lambda: node.metrics(labelled=True).get(f'delayq_topic_max_fire_rate{{topic="{topic}"}}') == rate,
                 5, 0.05, f"{node.node_id} to apply the limit of {topic}")


def noisy(run: Run, p: dict) -> list[dict]:
    n, rate = p["tasks"], p["rate"]
    amqp = run.limits.get("amqp")
    batch_rate = run.results.get("submit", {}).get("batch_1000") or 5000
    lead_s = max(4.0, 2.0 + 1.5 * n / max(1000.0, batch_rate * 0.7))
    span_s = 2.0 + n / max(1000.0, 0.5 * (amqp or 10_000))       # B's load covers A's whole drain
    with bench_cluster(run.logs) as cl, Topic(run, started(cl), "noisy.a") as a, Topic(run, cl, "noisy.b") as b:
        node = cl.nodes[0]
        due = now_ms() + int(lead_s * 1000)
        # B's tasks are due from a second before A's instant on, each 500 ms after its submit.
        steady = start_producers(1, {"endpoints": node.endpoint, "topic": b.name, "rate": rate, "duration": span_s,
                                     "batch": 1, "delay_min": 500, "delay_max": 500},
                                 run.workdir, start_delay_s=(due - now_ms()) / 1000 - 1.5)
        with cpu_window({"node": node.pid, **service_pids()}, (due - now_ms()) / 1000) as cpu:
            _, tasks = run_producers(p["producers"], {"endpoints": node.endpoint, "topic": a.name,
                                                      "count": n // p["producers"], "batch": 1000, "due_at": due},
                                     run.workdir, start_delay_s=0.5)
            records = drain(a.consumer, len(tasks), due, 5.0)
        wall, used, machine = cpu.read()
        _, b_tasks = steady()
        b_records = drain(b.consumer, len(b_tasks), max(b_tasks.values(), default=due), 5.0)
    da, db = Delivery.of(tasks, records), Delivery.of(b_tasks, b_records)
    recv = sorted(r.recv_us for r in da.first.values())
    end_ms = recv[-1] / 1000 if recv else due
    drain_s = end_ms / 1000 - due / 1000 if recv else None
    a_rate = len(da.first) / drain_s if drain_s else None
    during = sorted(r.recv_us / 1000 - b_tasks[t] for t, r in db.first.items() if due <= b_tasks[t] <= end_ms)
    mine = {t: due_ms for t, due_ms in b_tasks.items() if due <= due_ms <= end_ms}
    in_node = sorted(float(r.dispatched_ms - mine[t]) for t, r in db.first.items() if t in mine)
    in_broker = sorted(r.recv_us / 1000.0 - r.dispatched_ms for t, r in db.first.items() if t in mine)
    def p50_p99(values: list[float]) -> str:
        return "/".join(f"{pct(values, q) or 0:.1f}" for q in (0.5, 0.99))
    note = (f"{len(during)} of B's tasks due during A's {drain_s or 0:.1f} s drain of {n:,}; p50/p99 due to "
            f"publish {p50_p99(in_node)} ms, publish to consumer {p50_p99(in_broker)} ms")
    return [run.fig("noisy", "b_lateness_p50", pct(during, 0.5), "ms", note=note),
            run.fig("noisy", "b_lateness_p99", pct(during, 0.99), "ms", "<= 20"),
            run.fig("noisy", "b_lateness_max", during[-1] if during else None, "ms", "<= 50"),
            run.fig("noisy", "a_drain_rate", a_rate, "tasks/s", limit=amqp),
            run.fig("noisy", "a_drain_rate_vs_publish_limit", a_rate / amqp if a_rate and amqp else None, "ratio",
                    note=cpu_note(used, machine, wall=wall, per=len(da.first))),
            run.fig("noisy", "lost", len(da.lost) + len(db.lost), "tasks", "== 0")]


def limit(run: Run, p: dict) -> list[dict]:
    n, rate = p["tasks"], p["rate"]
    with bench_cluster(run.logs, zk=True) as cl:
        for _ in range(p["nodes"]):
            cl.add_node()
        cl.wait_balanced()
        with Topic(run, cl, "limit") as topic:
            _limit(cl, topic.name, maxFireRate=float(rate))
            due = now_ms() + 3000
            _, tasks = run_producers(1, {"endpoints": ",".join(nd.endpoint for nd in cl.nodes), "topic": topic.name,
                                         "count": n, "batch": 1000, "due_at": due}, run.workdir, start_delay_s=0.5)
            records = drain(topic.consumer, len(tasks), due + int(1000 * n / rate), 5.0)
    d = Delivery.of(tasks, records)
    seconds = collections.Counter(int((r.recv_us / 1000 - due) // 1000) for r in d.first.values())
    whole = [seconds[s] for s in range(0, max(seconds, default=0))]     # the last second is partial
    most = max(whole, default=None)
    return [run.fig("limit", "busiest_second", most, "tasks", f"<= {rate * 1.1:g}",
                    note=f"{n:,} tasks due at once, limit {rate}/s over {p['nodes']} nodes; per second: "
                         + " ".join(str(c) for c in whole)),
            run.fig("limit", "busiest_second_vs_limit", most / rate if most else None, "ratio", "<= 1.1"),
            run.fig("limit", "quietest_second_vs_limit", min(whole) / rate if whole else None, "ratio"),
            run.fig("limit", "lost", len(d.lost), "tasks", "== 0")]


def guarded(run: Run, p: dict) -> list[dict]:
    with bench_cluster(run.logs) as cl:
        node = cl.add_node()
        held = [f"bench.guarded.{i}" for i in range(p["topics"])]
        for topic in held:
            cl.register(topic)
            _limit(cl, topic, maxFireRate=float(p["held_rate"]), maxInFlight=p["held_in_flight"])
            run_producers(1, {"endpoints": node.endpoint, "topic": topic, "count": p["held_tasks"], "batch": 1000,
                              "delay_min": 0, "delay_max": 0}, run.workdir, start_delay_s=0.1)
        with Topic(run, cl, "guarded") as topic:
            figs, stats = load_figures(run, "guarded", p, cl, topic, [node.endpoint], targets=False)
    base = run.results.get("steady", {}).get("p99")
    note = f"{p['topics']} other topics at {p['held_rate']}/s holding {p['held_tasks']:,} tasks each"
    return figs + [run.fig("guarded", "p99_minus_steady_p99", stats["p99"] - base if base is not None else None,
                           "ms", "<= 1", note=note + ("" if base is not None else "; run steady too for the comparison"))]
