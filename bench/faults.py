"""The faults scenario: what each fault costs a steady load on a 3-node ZooKeeper cluster.

For each fault a fresh cluster takes a steady load (single submits spread over the three nodes),
the fault is injected part-way through, and the consumer's receipts say what it cost the tasks due
around it:

    node_kill     SIGKILL a node that is not the master; it stays dead
    node_pause    SIGSTOP a node that is not the master for 2.5 session timeouts, then SIGCONT
    claim_pause   the same, but the node stops itself inside a claim's transaction, holding the
                  locks of its shard and task rows (DELAYQ_FREEZE_IN_CLAIM_FILE)
    mysql         MariaDB shut down for fault_s, then started again
    rabbitmq      RabbitMQ's app stopped for fault_s (rabbitmqctl stop_app), then started
    zookeeper     the ZooKeeper that scripts/services.sh started, stopped for fault_s, then started
    mysql_cut     every node's MySQL connections cut for cut_s by a relay between the nodes and
                  MariaDB (delayq.testing.relay), then restored: MariaDB itself keeps running
    rolling_term  each node in turn SIGTERMed, started again, rolling_gap_s between nodes (bench.rolling)
    rolling_kill  the same with SIGKILL, each node started again kill_restart_s after its kill

The first six take delays of 1-3 s and a topic with ttr 0. mysql_cut takes the load under which
catch-up claims were seen to expire: rate submits/s with delays of 1 s to cut_delay_max (15 s, so
that every node holds seconds of overdue tasks in memory when MySQL answers again), ttr 0, the cut
after cut_lead_s of load and the load going on until after_s after it. The rolling restarts take the load
under which they were seen to make tasks late: rolling_rate submits/s, delays of 1 s to
rolling_delay_max, a time-to-run of rolling_ttr_ms that the consumer answers with a result, and
the load going on until after_s after the last node is back.

Per fault, measured from its recovery point (bench.recovery: a task due while the cluster could
not fire it is judged from the moment it could again): the worst and p99 lateness of the tasks due
during the fault or within after_s after it; lost tasks, early ones, attempts delivered twice and
further attempts. The first six also report the worst lateness from the due time of tasks due
while the fault lasted, and how long after it ended tasks were on time again (every task delivered
after that moment within 100 ms of its due time). Nodes run with the production scan settings.
This stops SHARED services: it is not part of the default run (`python -m bench --scenario faults`;
node_kill, node_pause, claim_pause and mysql_cut alone stop none: `--set faults.faults=claim_pause`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench import rolling
from bench.machine import bench_cluster
from bench.measure import Delivery, Run, Topic, drain, pct, settle, stuck_note
from bench.producer import start_producers
from bench.recovery import CLAIMED_BEFORE_MS, Event, from_recovery
from delayq.testing.cluster import Cluster, Node, now_ms, wait_for
from delayq.testing.relay import Relay
from delayq.testing.process import process_state

ROOT = Path(__file__).resolve().parent.parent
SERVICES = str(ROOT / "scripts" / "services.sh")
ON_TIME_MS = 100
MYSQL_PORT = 3306
FREEZE = "DELAYQ_FREEZE_IN_CLAIM_FILE"
FAULTS = ("node_kill", "node_pause", "claim_pause", "mysql", "rabbitmq", "zookeeper", "mysql_cut") + rolling.ROLLING


@dataclass(frozen=True)
class Fault:
    what: str
    start_ms: int
    end_ms: int                 # the fault over (a service back, SIGCONT; a rolling restart: its last recovery point)
    events: tuple[Event, ...]


@dataclass(frozen=True)
class Load:
    rate: float                 # submits/s
    duration_s: float           # at most
    delay_max_ms: int           # delays are uniform in 1 s .. this
    ttr_ms: int
    lead_s: float               # of load before the fault
    tail_ms: int | None         # the load ends this long after the fault's end (None: after duration_s)


@dataclass(frozen=True)
class Outcome:
    tasks: dict[str, int]       # acknowledged submits: task id -> due ms
    delivery: Delivery
    stuck: dict
    producer: dict              # the producer's summary
    caveat: str = ""            # why the figures may mislead (a MariaDB restarted by another user of it)
    acked: dict[str, int] = field(default_factory=dict)    # task id -> when its submit was answered


def _load(kind: str, p: dict) -> Load:
    if kind in rolling.ROLLING:
        return Load(p["rolling_rate"], p["rolling_duration"], p["rolling_delay_max"], p["rolling_ttr_ms"],
                    p["rolling_lead_s"], int(p["after_s"] * 1000))
    if kind == "mysql_cut":
        return Load(p["rate"], p["cut_lead_s"] + p["cut_s"] + p["after_s"] + 30, p["cut_delay_max"], 0,
                    p["cut_lead_s"], int(p["after_s"] * 1000))
    return Load(p["rate"], p["duration"], 3000, 0, p["fault_after_s"], None)


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


def _cut(relay: Relay, seconds: float) -> Fault:
    relay.cut()
    start = now_ms()
    time.sleep(seconds)
    relay.restore()
    end = now_ms()
    return Fault(f"MySQL cut from every node {(end - start) / 1000:.1f} s", start, end,
                 (Event("MySQL cut", start, end),))


def _inject(kind: str, cl: Cluster, nodes: list[Node], p: dict, relay: Relay | None = None) -> Fault:
    session = p["session_ms"]
    if relay is not None:
        return _cut(relay, p["cut_s"])
    if kind in rolling.ROLLING:
        plan = rolling.plan_for(kind, p)
        events = rolling.roll(cl, nodes, plan)
        steps = ", ".join(f"{e.what} {(e.recovered_ms - e.start_ms) / 1000:.1f} s" + (f" ({e.note})" if e.note else "")
                          for e in events)
        return Fault(f"{plan.describe()}: {steps}", events[0].start_ms, events[-1].recovered_ms, tuple(events))
    with nodes[0].client() as c:
        master = c.cluster().master
    victim = next(n for n in reversed(nodes) if n.node_id != master)
    if kind == "node_kill":     # the fault lasts until the dead node's session expires
        victim.kill()
        at = now_ms()
        return Fault(f"SIGKILL {victim.node_id}, session timeout {session / 1000:g} s", at, at + session,
                     (Event(f"SIGKILL {victim.node_id}", at - CLAIMED_BEFORE_MS, at + session),))
    if kind in ("node_pause", "claim_pause"):
        pause_s = 2.5 * session / 1000
        if kind == "claim_pause":       # the node stops itself at its next claim, inside its transaction
            Path(victim.env[FREEZE]).touch()
            wait_for(lambda: process_state(victim.pid) == "T", 30, 0.001, f"{victim.node_id} to stop inside a claim")
        else:
            victim.kill(signal.SIGSTOP)
        start = now_ms()
        time.sleep(pause_s)
        victim.kill(signal.SIGCONT)
        end = now_ms()
        # Paused, it is a dead node to the others once its session expires; resumed, a node rejoining.
        back = rolling.resumed(cl, victim, end, f"SIGCONT {victim.node_id}", 60)
        where = " inside a claim" if kind == "claim_pause" else ""
        return Fault(f"SIGSTOP {victim.node_id}{where} for {pause_s:g} s", start, end,
                     (Event(f"SIGSTOP {victim.node_id}", start - CLAIMED_BEFORE_MS, start + session), back))
    start, end = _service_fault(kind, p["fault_s"])
    return Fault(f"{kind} down {(end - start) / 1000:.1f} s", start, end, (Event(f"{kind} down", start, end),))


def _mariadb_started_ms(cl: Cluster) -> int:
    engine = cl.engine()
    try:
        with engine.connect() as conn:
            uptime = int(conn.exec_driver_sql("SHOW GLOBAL STATUS LIKE 'Uptime'").one()[1])
    finally:
        engine.dispose()
    return now_ms() - uptime * 1000


def _under_load(run: Run, kind: str, p: dict, load: Load) -> tuple[Fault, Outcome]:
    relay = Relay(("127.0.0.1", MYSQL_PORT)) if kind == "mysql_cut" else None
    with bench_cluster(run.logs, zk=True, DELAYQ_ZK_SESSION_TIMEOUT_MS=p["session_ms"]) as cl, \
            contextlib.closing(relay) if relay is not None else contextlib.nullcontext():
        # The services are shared: a test elsewhere restarting MariaDB would pass for this fault's cost.
        mariadb_started = _mariadb_started_ms(cl)
        through = {} if relay is None else {"DELAYQ_MYSQL_URL": relay.url(cl.database.node_url or cl.database.url)}
        # Each node stops itself inside a claim once its own file appears (claim_pause only).
        freeze = (lambda i: {FREEZE: str(run.workdir / f"freeze-{kind}-n{i + 1}")}) if kind == "claim_pause" \
            else (lambda i: {})
        nodes = [cl.add_node(start=False, **through, **freeze(i)) for i in range(3)]
        for nd in nodes:
            nd.start(wait=False)
        for nd in nodes:
            wait_for(nd.answers, 60, 0.02, f"{nd.node_id} to serve")
        cl.wait_balanced()
        with Topic(run, cl, f"fault-{kind.replace('_', '-')}", ttr_ms=load.ttr_ms) as topic:
            stop_file = run.workdir / f"{topic.name}.stop"
            acked: dict[str, int] = {}
            wait = start_producers(1, {"endpoints": ",".join(n.endpoint for n in nodes), "topic": topic.name,
                                       "rate": load.rate, "duration": load.duration_s, "batch": 1,
                                       "delay_min": 1000, "delay_max": load.delay_max_ms,
                                       "stop_file": stop_file if load.tail_ms is not None else None},
                                   run.workdir, start_delay_s=0.5, acked=acked)
            time.sleep(0.5 + load.lead_s)
            fault = _inject(kind, cl, nodes, p, relay)
            if load.tail_ms is not None:
                # Tasks due up to tail_ms after the fault are measured: go on submitting them until then.
                time.sleep(max(0.0, (fault.end_ms + load.tail_ms - now_ms()) / 1000))
                stop_file.touch()
            summaries, tasks = wait()
            records = drain(topic.consumer, len(tasks), max(tasks.values(), default=now_ms()),
                            5 + (p["session_ms"] + load.ttr_ms) / 1000)
            d, stuck = settle(cl, topic.consumer, tasks, records, True)
        caveats = []
        restarted = _mariadb_started_ms(cl)
        if kind != "mysql" and restarted > mariadb_started + 2000:
            caveats.append(f"MariaDB was restarted during the load by something else (last at "
                           f"{time.strftime('%H:%M:%S', time.localtime(restarted / 1000))}): the figures say little")
        short_s = (fault.end_ms + (load.tail_ms or 0) - summaries[0]["end_ms"]) / 1000
        if load.tail_ms is not None and short_s > 1:
            caveats.append(f"the load ended {short_s:.0f} s too soon (duration {load.duration_s:g} s): few tasks "
                           "were due after the fault")
    return fault, Outcome(tasks, d, stuck, summaries[0], "; ".join(caveats), acked)


def _window_figures(run: Run, s: str, fault: Fault, out: Outcome) -> list[dict]:
    """Lateness from the due time of the tasks due while the fault lasted; when on time again."""
    first, start, end = out.delivery.first, fault.start_ms, fault.end_ms
    during = sorted(first[t].recv_us / 1000 - due for t, due in out.tasks.items() if start <= due <= end and t in first)
    late_at = [first[t].recv_us / 1000 for t, due in out.tasks.items()
               if due >= start and t in first and first[t].recv_us / 1000 - due > ON_TIME_MS]
    return [
        run.fig(s, "due_during_fault_max_lateness", during[-1] / 1000 if during else None, "s",
                note=f"{fault.what}; {len(during)} tasks due while it lasted"
                     + (f", p99 {pct(during, 0.99) / 1000:.2f} s" if during else "")),
        run.fig(s, "on_time_again_after", max(0.0, (max(late_at, default=end) - end) / 1000), "s",
                note=f"from the fault's end until the last task delivered more than {ON_TIME_MS} ms late"),
    ]


def _recovery_figures(run: Run, s: str, fault: Fault, out: Outcome, after_ms: int) -> list[dict]:
    d = out.delivery
    rec = from_recovery(out.tasks, {t: r.recv_us / 1000 for t, r in d.first.items()}, fault.events, after_ms,
                        out.acked)
    further = sum(1 for r in d.first.values() if r.attempt > 1) + d.duplicates - d.repeated
    unacked = out.producer["calls"] - out.producer["submitted"]
    # The events and the late tasks, to set beside the node logs (kept with --keep-logs).
    (run.workdir / f"{s}-{fault.start_ms}.json").write_text(json.dumps(
        {"events": [dataclasses.asdict(e) for e in fault.events], "slow": [dataclasses.asdict(t) for t in rec.slow],
         "caveat": out.caveat}, indent=1))
    return [
        run.fig(s, "from_recovery_max_lateness", rec.max_s, "s", "<= 2",
                note=(f"{out.caveat}! " if out.caveat else "") + rec.note(fault.what)),
        run.fig(s, "from_recovery_p99_lateness", rec.p99_s, "s", "<= 1",
                note="first delivery minus the due time, or minus the recovery point of an event whose window "
                     f"holds the due time (negative: fired before that point); tasks due during an event or up "
                     f"to {after_ms / 1000:g} s after one"),
        run.fig(s, "lost", len(d.lost) - len(out.stuck), "tasks", "== 0",
                note=f"of {len(out.tasks)} acknowledged submits" + stuck_note(out.stuck, True)
                + (f"; {unacked} submits acknowledged by no node (not counted)" if unacked else "")),
        run.fig(s, "early", d.early, "tasks", "== 0"),
        run.fig(s, "repeated_attempts", d.repeated, "deliveries", "== 0",
                note="an attempt (<task id>:<attempt>) delivered more than once"),
        run.fig(s, "further_attempts", further, "deliveries",
                note="deliveries of an attempt after the first: a claim by a node that stopped before recording it, "
                     "or an attempt timed out before its result was applied"),
    ]


def _fault(run: Run, kind: str, p: dict) -> list[dict]:
    fault, out = _under_load(run, kind, p, _load(kind, p))
    s = f"faults.{kind}"
    window = [] if kind in rolling.ROLLING else _window_figures(run, s, fault, out)
    return window + _recovery_figures(run, s, fault, out, int(p["after_s"] * 1000))


def faults(run: Run, p: dict) -> list[dict]:
    kinds = p["faults"].split(",")
    unknown = [k for k in kinds if k not in FAULTS]
    if unknown:     # before any fault runs: a typo should not cost the minutes of the others
        raise ValueError(f"unknown fault {unknown[0]!r} (expected some of {', '.join(FAULTS)})")
    return [f for kind in kinds for f in _fault(run, kind, p)]
