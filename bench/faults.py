"""The faults scenario: what each fault costs a steady load on a 3-node ZooKeeper cluster.

For each fault a fresh cluster takes a steady load (single submits spread over the three nodes,
delays of 1-3 s), the fault is injected part-way through, and the consumer's receipts say what it
cost the tasks due around it:

    node_kill    SIGKILL a node that is not the master; it stays dead
    node_pause   SIGSTOP a node that is not the master for 2.5 session timeouts, then SIGCONT
    mysql        MariaDB shut down for fault_s, then started again
    rabbitmq     RabbitMQ's app stopped for fault_s (rabbitmqctl stop_app), then started
    zookeeper    the ZooKeeper that scripts/services.sh started, stopped for fault_s, then started

Per fault: the worst lateness of tasks due while the fault lasted, how long after it ended tasks
were on time again (every task delivered after that moment within 100 ms of its due time), lost
tasks, early ones, attempts delivered twice and further attempts. This stops SHARED services: it is
not part of the default run (`python -m bench --scenario faults`).
"""
from __future__ import annotations

import signal
import socket
import subprocess
import time
from pathlib import Path

from bench.machine import bench_cluster
from bench.measure import Run, Topic, drain, pct, settle, stuck_note
from bench.producer import start_producers
from delayq.testing.cluster import Cluster, now_ms, wait_for

ROOT = Path(__file__).resolve().parent.parent
SERVICES = str(ROOT / "scripts" / "services.sh")
ON_TIME_MS = 100
FAULTS = ("node_kill", "node_pause", "mysql", "rabbitmq", "zookeeper")


def _answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _run(*cmd: str, timeout: float = 150) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stdout}{r.stderr}")


def _outage(stop, start: list[str], port: int, seconds: float) -> tuple[int, int]:
    """Stop a service, keep it down for `seconds`, start it; (stopped ms, answering again ms). The
    end is when the port answers, not when the start command returns (it may go on a while)."""
    stop()
    wait_for(lambda: not _answers(port), 60, 0.1, f"127.0.0.1:{port} to stop answering")
    down = now_ms()
    time.sleep(seconds)
    starter = subprocess.Popen(start, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: _answers(port), 120, 0.02, f"127.0.0.1:{port} to answer again")
        up = now_ms()
    finally:
        out, _ = starter.communicate(timeout=150)
    if starter.returncode != 0:
        raise RuntimeError(f"{' '.join(start)} failed ({starter.returncode}): {out}")
    return down, up


def _service_fault(kind: str, seconds: float) -> tuple[int, int]:
    if kind == "mysql":
        return _outage(lambda: _run("mysqladmin", "-h127.0.0.1", "-P3306", "-uroot", "shutdown"),
                       [SERVICES, "--only", "mysql"], 3306, seconds)
    if kind == "rabbitmq":
        return _outage(lambda: _run("rabbitmqctl", "stop_app"), ["rabbitmqctl", "start_app"], 5672, seconds)
    out = subprocess.run([SERVICES, "stop-zookeeper"], capture_output=True, text=True, timeout=60).stdout
    if "stopped" not in out:
        raise RuntimeError(f"ZooKeeper on 127.0.0.1:2181 was not started by scripts/services.sh: {out.strip()}")
    return _outage(lambda: None, [SERVICES, "--only", "zookeeper"], 2181, seconds)


def _inject(kind: str, cl: Cluster, nodes, p: dict) -> tuple[int, int, str]:
    """Inject the fault; (start ms, end ms, what was done)."""
    with nodes[0].client() as c:
        master = c.cluster().master
    victim = next(n for n in reversed(nodes) if n.node_id != master)
    if kind == "node_kill":     # the fault lasts until the dead node's session expires
        victim.kill()
        at = now_ms()
        return at, at + p["session_ms"], f"SIGKILL {victim.node_id}, session timeout {p['session_ms'] / 1000:g} s"
    if kind == "node_pause":
        pause_s = 2.5 * p["session_ms"] / 1000
        victim.kill(signal.SIGSTOP)
        start = now_ms()
        time.sleep(pause_s)
        victim.kill(signal.SIGCONT)
        return start, now_ms(), f"SIGSTOP {victim.node_id} for {pause_s:g} s"
    start, end = _service_fault(kind, p["fault_s"])
    return start, end, f"{kind} down {(end - start) / 1000:.1f} s"


def _fault(run: Run, kind: str, p: dict) -> list[dict]:
    with bench_cluster(run.logs, zk=True, DELAYQ_ZK_SESSION_TIMEOUT_MS=p["session_ms"]) as cl:
        nodes = [cl.add_node(start=False) for _ in range(3)]
        for nd in nodes:
            nd.start(wait=False)
        for nd in nodes:
            wait_for(nd.answers, 60, 0.02, f"{nd.node_id} to serve")
        cl.wait_balanced()
        with Topic(run, cl, f"fault-{kind.replace('_', '-')}") as topic:
            wait = start_producers(1, {"endpoints": ",".join(n.endpoint for n in nodes), "topic": topic.name,
                                       "rate": p["rate"], "duration": p["duration"], "batch": 1,
                                       "delay_min": 1000, "delay_max": 3000}, run.workdir, start_delay_s=0.5)
            time.sleep(0.5 + p["fault_after_s"])
            start, end, what = _inject(kind, cl, nodes, p)
            _, tasks = wait()
            records = drain(topic.consumer, len(tasks), max(tasks.values(), default=now_ms()),
                            5 + p["session_ms"] / 1000)
            d, stuck = settle(cl, topic.consumer, tasks, records, True)
    s = f"faults.{kind}"
    during = sorted(d.first[t].recv_us / 1000 - due for t, due in tasks.items() if start <= due <= end and t in d.first)
    late_at = [d.first[t].recv_us / 1000 for t, due in tasks.items()
               if due >= start and t in d.first and d.first[t].recv_us / 1000 - due > ON_TIME_MS]
    further = sum(1 for r in d.first.values() if r.attempt > 1) + d.duplicates - d.repeated
    return [
        run.fig(s, "due_during_fault_max_lateness", during[-1] / 1000 if during else None, "s",
                note=f"{what}; {len(during)} tasks due while it lasted"
                     + (f", p99 {pct(during, 0.99) / 1000:.2f} s" if during else "")),
        run.fig(s, "on_time_again_after", max(0.0, (max(late_at, default=end) - end) / 1000), "s",
                note=f"from the fault's end until the last task delivered more than {ON_TIME_MS} ms late"),
        run.fig(s, "lost", len(d.lost) - len(stuck), "tasks", "== 0",
                note=f"of {len(tasks)} submitted" + stuck_note(stuck, True)),
        run.fig(s, "early", d.early, "tasks", "== 0"),
        run.fig(s, "repeated_attempts", d.repeated, "deliveries", "== 0",
                note="an attempt (<task id>:<attempt>) delivered more than once"),
        run.fig(s, "further_attempts", further, "deliveries",
                note="tasks delivered again as a further attempt (claimed by a node that stopped before recording)"),
    ]


def faults(run: Run, p: dict) -> list[dict]:
    out = []
    for kind in p["faults"].split(","):
        if kind not in FAULTS:
            raise ValueError(f"unknown fault {kind!r} (expected some of {', '.join(FAULTS)})")
        out += _fault(run, kind, p)
    return out
