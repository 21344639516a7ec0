"""The security scenario: what TLS and client identity cost a call, measured on two nodes at once.

A secured node (TLS and a token on its port, publishing over amqps when the local RabbitMQ has a
TLS listener) and an insecure one (DELAYQ_INSECURE), each of its own cluster, serve one client
that alternates its calls between them: `calls` single submits, then `batches` submitBatch calls
of `batch` tasks. Then many callers at once: `clients` client processes on each node, both nodes
at the same time, each making single submits for `client_s` seconds; the processes change sides
from round to round. (With many callers the node serves their submits in shared transactions:
the base cost of a call is about a third of a lone call's, so the same TLS cost is a larger share
of it.) All this for `rounds` rounds (made even). Each side's figures: the node's CPU per task,
less what it spends with no calls (measured for `idle_s` first), and the mean latency of a call,
noted with how busy the whole machine was meanwhile; then the secured side's cost over the
insecure one, in percent (target: 10 at most). A machine near 100% busy makes a call wait for a
core: its latency then carries the clients' share of TLS as well as the node's. With a fixed
number of callers each waiting for its answer, the rate is that number over the latency: a call
10% slower is a rate 9% lower.

Why pairs: the host's speed moves by half within minutes, so two whole runs taken minutes apart
differ by more than 10% even in figures security does not touch (MariaDB's insert rate); calls
alternated one by one run on the same host. Each call goes first in turn, and each side's node is
started first for half of the rounds: with both sides insecure, the node started first measured
2-3% dearer per call.
"""
from __future__ import annotations

import contextlib
import os
import time
import uuid
from dataclasses import dataclass

from bench.cpu import CpuWindow, thread_cpu_seconds
from bench.crowd import SIDES, Crowd
from bench.machine import bench_cluster, publish_over_tls
from bench.measure import Run
from delayq.client import TaskSpec, connect
from delayq.client.security import ClientSecurity
from delayq.testing.cluster import Node
from delayq.testing.services import AMQP_URL

DAY_MS = 86_400_000


@dataclass
class Side:
    """What one side spent on one kind of call: the node's CPU seconds, the calls' wall seconds
    (and the many callers' own CPU seconds)."""
    cpu_s: float = 0.0
    wall_s: float = 0.0
    client_cpu_s: float = 0.0
    calls: int = 0
    tasks: int = 0


def security(run: Run, p: dict) -> list[dict]:
    kinds = {"single_submit": 1, f"batch_{p['batch']}": p["batch"]}
    many = _many(p)
    spent = {(kind, side): Side() for kind in [*kinds, many] for side in SIDES}
    machine = {kind: [] for kind in [*kinds, many]}     # (wall seconds, the machine's busy share) of each window
    idle = {}
    with Crowd(2 * p["clients"]) as crowd:
        for first in SIDES:
            idle[first] = _measure(run, p, kinds, crowd, first, max(1, (p["rounds"] + 1) // 2), spent, machine)
    out = []
    for kind in [*kinds, many]:
        cpu = {side: 1e6 * spent[kind, side].cpu_s / max(1, spent[kind, side].tasks) for side in SIDES}
        latency = {side: 1e3 * spent[kind, side].wall_s / max(1, spent[kind, side].calls) for side in SIDES}
        for side in SIDES:
            s = spent[kind, side]
            out.append(run.fig("security", f"{kind}_node_cpu_{side}", cpu[side], "us/task",
                               note=f"{s.tasks:,} tasks in {s.calls:,} calls; less the node's idle CPU, "
                                    + ", ".join(f"{1e3 * idle[first][side]:.1f}" for first in SIDES)
                                    + " ms/s in the two pairs"))
            callers = (f"; {p['clients']} clients on each node at once, "
                       f"{1e6 * s.client_cpu_s / max(1, s.calls):.0f} us of their CPU a call") if kind == many else ""
            busy = sum(wall * share for wall, share in machine[kind]) / max(1e-9, sum(w for w, _ in machine[kind]))
            out.append(run.fig("security", f"{kind}_latency_{side}", latency[side], "ms",
                               note=f"mean of a call{callers}; the machine {busy:.0%} busy "
                                    f"(of {os.cpu_count()} cores) meanwhile"))
        for name, figures in (("node_cpu", cpu), ("latency", latency)):
            out.append(run.fig("security", f"{kind}_{name}_secured_vs_insecure", _cost(figures), "%", "<= 10",
                               note="the secured side's cost over the insecure side's"))
    return out


def _many(p: dict) -> str:
    """The name of the many-callers kind."""
    return f"single_{p['clients']}_clients"


def _cost(figures: dict[str, float]) -> float | None:
    base = figures["insecure"]
    return 100.0 * (figures["secured"] / base - 1) if base else None


def _measure(run: Run, p: dict, kinds: dict[str, int], crowd: Crowd, first: str, rounds: int,
             spent: dict, machine: dict) -> dict[str, float]:
    """`rounds` rounds on a fresh pair of nodes, the `first` side's started first, into `spent`
    (and the whole machine's CPU into `machine`); returns each node's idle CPU (seconds per
    second), which it takes off."""
    # Each side states its mode whole, whichever the run's (--insecure or not).
    settings = {"secured": {**publish_over_tls(), "DELAYQ_INSECURE": "false"},
                "insecure": {"DELAYQ_INSECURE": "true", "DELAYQ_AMQP_URL": AMQP_URL, "DELAYQ_AMQP_CA_FILE": ""}}
    with contextlib.ExitStack() as stack:
        clusters = {side: stack.enter_context(bench_cluster(run.logs, **settings[side])) for side in SIDES}
        nodes = {side: clusters[side].add_node() for side in sorted(SIDES, key=lambda s: s != first)}
        _check_secured(nodes["secured"])
        topic = f"bench.security.{uuid.uuid4().hex[:8]}"
        for cl in clusters.values():
            cl.register(topic)
        clients = {side: stack.enter_context(nodes[side].client()) for side in SIDES}
        spec = TaskSpec(topic=topic, delayMs=DAY_MS, payload=b"x" * 100)
        calls = {kind: _caller(spec, n) for kind, n in kinds.items()}
        for kind, call in calls.items():      # connections open, code paths warm
            for side in SIDES:
                for _ in range(20):
                    call(clients[side])
        crowd.connect({side: (nodes[side].endpoint, nodes[side].security) for side in SIDES}, spec)
        idle = _idle(nodes, p["idle_s"])
        for r in range(rounds):
            for kind, n in kinds.items():
                count = p["calls"] if n == 1 else p["batches"]
                cpu0 = {side: thread_cpu_seconds(nodes[side].pid) for side in SIDES}
                window, start = CpuWindow({}), time.perf_counter()
                wall = dict.fromkeys(SIDES, 0.0)
                for i in range(count):
                    for side in (SIDES if (i + r) % 2 else SIDES[::-1]):
                        t0 = time.perf_counter()
                        calls[kind](clients[side])
                        wall[side] += time.perf_counter() - t0
                _account(spent, kind, nodes, cpu0, idle, time.perf_counter() - start,
                         {side: (count, wall[side], 0.0) for side in SIDES}, n)
                machine[kind].append(_busy(window))
            crowd.wake()
            cpu0 = {side: thread_cpu_seconds(nodes[side].pid) for side in SIDES}
            window, start = CpuWindow({}), time.perf_counter()
            done = crowd.round(r + SIDES.index(first), p["client_s"])   # each process on each side as often
            _account(spent, _many(p), nodes, cpu0, idle, time.perf_counter() - start, done, 1)
            machine[_many(p)].append(_busy(window))
    return idle


def _busy(window: CpuWindow) -> tuple[float, float]:
    """(wall seconds, the whole machine's busy share) since the window opened."""
    wall, _, (busy, _, _) = window.read()
    return wall, busy


def _account(spent: dict, kind: str, nodes: dict[str, Node], cpu0: dict[str, float], idle: dict[str, float],
             elapsed: float, done: dict[str, tuple[int, float, float]], per_call: int) -> None:
    """Add what each side's node spent since cpu0, less its idle CPU, and its (calls, wall seconds,
    client CPU seconds)."""
    for side in SIDES:
        s = spent[kind, side]
        s.cpu_s += thread_cpu_seconds(nodes[side].pid) - cpu0[side] - idle[side] * elapsed
        s.calls += done[side][0]
        s.wall_s += done[side][1]
        s.client_cpu_s += done[side][2]
        s.tasks += done[side][0] * per_call


def _idle(nodes: dict[str, Node], seconds: float) -> dict[str, float]:
    """Each node's CPU seconds per second while no call comes."""
    before = {side: thread_cpu_seconds(node.pid) for side, node in nodes.items()}
    start = time.perf_counter()
    time.sleep(seconds)
    elapsed = time.perf_counter() - start
    return {side: (thread_cpu_seconds(node.pid) - before[side]) / elapsed for side, node in nodes.items()}


def _caller(spec: TaskSpec, n: int):
    if n == 1:
        return lambda client: client.submit(spec)
    batch = [spec] * n
    return lambda client: client.submitBatch(batch)


def _check_secured(node: Node) -> None:
    """The secured node refuses a plaintext call; else the figures would compare two insecure nodes."""
    client, transport = connect("127.0.0.1", node.port, 5.0, ClientSecurity(insecure=True))
    try:
        client.cluster()
    except Exception:  # noqa: BLE001 - refused, as it must be
        return
    finally:
        transport.close()
    raise RuntimeError(f"the secured node {node.endpoint} answered a plaintext call")
