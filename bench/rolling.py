"""Rolling restarts, the faults rolling_term and rolling_kill of bench.faults: each node of the
cluster in turn stopped and started again, as an operator's upgrade does. Every stop and every
start is an Event (bench.recovery) with its recovery point:

    SIGTERM   the process exited (its ZooKeeper session closed as it went)
    SIGKILL   the kill plus the session timeout (ZooKeeper then lets the others take its shards)
    start     the node answers, holds its shards, and the cluster is balanced again
"""
from __future__ import annotations

import collections
import signal
import time
from dataclasses import dataclass

from bench.recovery import CLAIMED_BEFORE_MS, Event
from delayq.testing.cluster import Cluster, Node, now_ms, wait_for

ROLLING = ("rolling_term", "rolling_kill")


@dataclass(frozen=True)
class Plan:
    sig: signal.Signals
    restart_after_s: float      # from the stop's signal to the start (SIGTERM: 0, start once it exited)
    gap_s: float                # from a node's recovery to the next node's stop
    session_ms: int
    step_timeout_s: float = 60.0    # for a node to exit, or to hold its shards

    def describe(self) -> str:
        how = "SIGTERM, started again once it exited" if self.sig == signal.SIGTERM else \
            f"SIGKILL, started again {self.restart_after_s:g} s after the kill"
        return f"each node in turn: {how}; the next {self.gap_s:g} s after the cluster is balanced again"


def plan_for(kind: str, p: dict) -> Plan:
    if kind == "rolling_term":
        return Plan(signal.SIGTERM, 0.0, p["rolling_gap_s"], p["session_ms"])
    return Plan(signal.SIGKILL, p["kill_restart_s"], p["rolling_gap_s"], p["session_ms"])


def roll(cl: Cluster, nodes: list[Node], plan: Plan) -> list[Event]:
    """Stop and start each node in turn; the events, in order."""
    events: list[Event] = []
    for i, node in enumerate(nodes):
        if i:
            time.sleep(plan.gap_s)      # the scenario's pace between nodes, not a wait for anything
        stopped = _stop(node, plan)
        events.append(stopped)
        # The restart's moment is part of the scenario (a supervisor restarting a dead process).
        time.sleep(max(0.0, (stopped.start_ms + plan.restart_after_s * 1000 - now_ms()) / 1000))
        events.append(start(cl, node, plan.step_timeout_s))
    return events


def _stop(node: Node, plan: Plan) -> Event:
    at = now_ms()
    if plan.sig == signal.SIGKILL:
        node.kill()
        return Event(f"SIGKILL {node.node_id}", at - CLAIMED_BEFORE_MS, at + plan.session_ms)
    node.proc.send_signal(signal.SIGTERM)
    try:
        wait_for(lambda: not node.alive(), plan.step_timeout_s, 0.005, f"{node.node_id} to exit on SIGTERM")
        return Event(f"SIGTERM {node.node_id}", at, now_ms())
    except TimeoutError:
        # It hung: what is left is a dead node whose session ZooKeeper must expire.
        node.kill()
        killed = now_ms()
        return Event(f"SIGTERM {node.node_id}", at, killed + plan.session_ms,
                     note=f"did not exit within {plan.step_timeout_s:g} s of SIGTERM: SIGKILLed")


def start(cl: Cluster, node: Node, timeout_s: float) -> Event:
    """Start the node; the event ends once it holds its shards in a balanced cluster."""
    node.start(wait=False)
    return resumed(cl, node, node.spawned_ms, f"start {node.node_id}", timeout_s)


def resumed(cl: Cluster, node: Node, since_ms: int, what: str, timeout_s: float) -> Event:
    """The event from since_ms until the node holds its shards (or the timeout, said in its note)."""
    try:
        wait_for(lambda: holds_shards(cl, node), timeout_s, 0.02, f"{node.node_id} to hold its shards")
        return Event(what, since_ms, now_ms())
    except TimeoutError:
        return Event(what, since_ms, now_ms(), note=f"did not hold its shards within {timeout_s:g} s")


def holds_shards(cl: Cluster, node: Node) -> bool:
    """The node answers, every shard is assigned to a live node, balanced to +-1, and the node's own
    count of the shards it owns is its share of the assignment (the cluster's view alone is not
    enough: a restarted node has the id its dead predecessor was assigned shards under)."""
    if not node.answers():
        return False
    try:
        with node.client(timeout_s=2) as c:
            ci = c.cluster()
        owned = node.metrics().get("delayq_shards_owned", 0)
    except Exception:  # noqa: BLE001 - still starting: not yet
        return False
    counts = collections.Counter(ci.assignment.values())
    live = {n.node_id for n in cl.nodes if n.alive()}
    return (len(ci.assignment) == cl.shards and set(counts) == live
            and max(counts.values()) - min(counts.values()) <= 1 and owned == counts[node.node_id] > 0)
