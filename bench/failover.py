"""The failover scenario: a steady load on a 3-node ZooKeeper cluster, one node SIGKILLed part-way
(a follower, or the master with victim=master). What it costs the tasks of the dead node's
shards: how late they fire, how soon after the kill the first of them fires, and how many
attempts the dead node had claimed and not recorded (sent again after their time-to-run).
"""
from __future__ import annotations

import time

from bench.machine import bench_cluster
from bench.measure import Delivery, Run, Topic, load_figures, pct, shards_of
from delayq.testing.cluster import now_ms, wait_for


def failover(run: Run, p: dict) -> list[dict]:
    out = []
    session_s = p["session_ms"] / 1000
    with bench_cluster(run.logs, zk=True, DELAYQ_ZK_SESSION_TIMEOUT_MS=p["session_ms"]) as cl:
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
