"""The steady and burst scenarios on the replicated topology beside the single instances, in one
sitting: what a ZooKeeper ensemble, a RabbitMQ cluster with quorum queues and a Galera cluster
cost delayq, and each backing service's CPU.

    python -m bench.topologies --runs 2 --out bench/RESULTS-ha.md
    python -m bench.topologies --smoke                  # a few seconds a side: it works

It brings the topology up (scripts/services.sh --ha; stopped again at the end when it was not
running before), then runs `python -m bench` once per side and run, alternating single and
replicated so both share the host's drift, and sets the two side by side (bench.compare: the
replicated side first, its change against the single one). The replicated side's nodes write to
Galera member 1 with members 2 and 3 as their failover list, publish over TLS to RabbitMQ member 1
(5691) with 2 and 3 as theirs, and the benchmark's consumer reads member 1. The queues are quorum
queues on both sides (replicated on the three members on this one), as production's consumers
declare them; `python -m bench` alone uses classic ones. Both sides secured as in production. Each service's CPU is
summed over its members (`mariadb_cpu` and so on; the note gives each member's share).
"""
from __future__ import annotations

import argparse
import datetime
import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

from bench.compare import compare, load, markdown
from bench.cpu import TOPOLOGY_ENV
from bench.receiver import QUEUE_TYPE_ENV
from bench.machine import describe_machine
from delayq.testing import ha

ROOT = Path(__file__).resolve().parents[1]


def replicated_env() -> dict[str, str]:
    """The environment of a `python -m bench` run on the replicated topology."""
    hosts = {"DELAYQ_MYSQL_HOSTS": ha.MYSQL_HOSTS,
             "DELAYQ_AMQP_HOSTS": ",".join(f"127.0.0.1:{p}" for p in ha.AMQPS_PORTS)}
    extra = os.environ.get("DELAYQ_BENCH_NODE_ENV", "")
    return {"DELAYQ_TEST_MYSQL": ha.MYSQL_SERVER, "DELAYQ_TEST_AMQP": ha.AMQP_URL, "DELAYQ_TEST_ZK": ha.ZK_HOSTS,
            "DELAYQ_RABBITMQ_TLS_PORT": str(ha.AMQPS_PORTS[0]), TOPOLOGY_ENV: "ha",
            "DELAYQ_BENCH_NODE_ENV": " ".join([*(f"{k}={v}" for k, v in hosts.items()), extra]).strip()}


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return True
    except OSError:
        return False


def run_side(name: str, k: int, bench_args: list[str], env: dict[str, str], workdir: Path) -> Path:
    """One `python -m bench` run; its figures (JSON lines) in workdir/<name>.<k>.jsonl."""
    out = workdir / f"{name}.{k}.jsonl"
    print(f"== {name} (run {k})", file=sys.stderr, flush=True)
    with open(out, "w") as fh:
        rc = subprocess.run([sys.executable, "-m", "bench", *bench_args], stdout=fh, env={**os.environ, **env},
                            cwd=ROOT, timeout=3600).returncode
    if rc != 0:
        raise SystemExit(f"bench.topologies: the {name} run {k} failed (exit {rc}); its figures are in {out}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.topologies", description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", action="append", choices=["steady", "burst"],
                   help="a scenario to run (repeatable; default both)")
    p.add_argument("--runs", type=int, default=1, help="runs per side, alternating (default 1)")
    p.add_argument("--smoke", action="store_true", help="tiny sizes")
    p.add_argument("--out", type=Path, help="write the side-by-side table here (markdown)")
    p.add_argument("--worse", type=float, default=10.0, help="percent by which a figure may be worse (10)")
    args = p.parse_args(argv)
    topo = ha.Topology(ROOT)
    was_running = topo.running()
    if not topo.up():
        print(f"bench.topologies: scripts/services.sh --ha could not start the topology:\n{topo.log}", file=sys.stderr)
        return 2
    if not all(_listening(port) for port in ha.AMQPS_PORTS):
        print("bench.topologies: the RabbitMQ members have no TLS listener on 5691-5693: they were started "
              "before scripts/services-ha.sh added it, or without the local CA (scripts/services.sh makes it). "
              "Restart them: scripts/services.sh --ha stop && scripts/services.sh --ha", file=sys.stderr)
        return 2
    bench_args = [f"--scenario={s}" for s in (args.scenario or ["steady", "burst"])] + (["--smoke"] if args.smoke else [])
    workdir = ROOT / "var" / "bench-topologies"
    workdir.mkdir(parents=True, exist_ok=True)
    started, t0 = datetime.datetime.now(datetime.timezone.utc).astimezone(), time.monotonic()
    sides: dict[str, list[Path]] = {"single": [], "replicated": []}
    quorum = {QUEUE_TYPE_ENV: "quorum"}     # both sides, as production's consumers declare them
    try:
        for k in range(1, args.runs + 1):
            sides["single"].append(run_side("single", k, bench_args, quorum, workdir))
            sides["replicated"].append(run_side("replicated", k, bench_args, {**replicated_env(), **quorum}, workdir))
    finally:
        if not was_running:
            topo.stop()
    rows = compare([load(f) for f in sides["replicated"]], [load(f) for f in sides["single"]], args.worse)
    table = markdown(rows, args.worse).replace("| a |", "| replicated |").replace("| a's runs |", "| its runs |") \
        .replace("| b |", "| single |").replace("| b's runs |", "| its runs |")
    notes = [f"- {f['scenario']} {f['figure']}: {f['note']}" for f in load(sides["replicated"][-1])
             if f["figure"].endswith("_cpu") and f.get("note")]
    text = "\n".join([
        "# The replicated topology beside the single instances", "",
        f"{started:%Y-%m-%d %H:%M %Z}, {(time.monotonic() - t0) / 60:.0f} min; "
        f"`python -m bench.topologies {' '.join(shlex.quote(a) for a in (argv or sys.argv[1:]))}`", "",
        "Machine: " + ", ".join(f"{k} {v}" for k, v in describe_machine().items()) + "; every member of every "
        "service, the node, the producers and the consumer on it.", "",
        "Change: the replicated side against the single one, in the same sitting. A service's CPU is a "
        "share of one core, its members summed.", "", table, "",
        "Per member (replicated, last run):", "", *notes, ""])
    print(text)
    if args.out:
        args.out.write_text(text)
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
