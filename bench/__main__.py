"""delayq benchmark harness.

Full run (on 2 cores, 8-12 minutes with --big, less without; --runs N takes N times as long;
needs ZooKeeper, MariaDB and RabbitMQ on their default local ports, as for the tests; run from the
repository root with nothing else loading the machine):

    python -m bench --out bench/RESULTS.md

Security is on as in production: TLS and a token on every node's Thrift port, and nodes publishing
to RabbitMQ over TLS (the local listener scripts/services.sh sets up); `--insecure` turns both off
(bench.compare sets the two side by side). Both ways the nodes use their own MySQL account and
ZooKeeper identity, which cost nothing per task.

It first measures this machine's raw limits (MariaDB batched INSERT rows/s, RabbitMQ confirmed
publishes/s with a pipelined window, the consumer's drain rate), then runs the scenarios, each
against its own fresh database (dropped after) with real `delayq node` processes, producers and a
RabbitMQ consumer in separate processes:

    submit    single `submit` calls from 1 and 8 client processes; `submitBatch` of 1,000
    security  a secured node and an insecure one at once: what TLS and client identity cost a single
              submit and a batch of 100 (one client alternating between them), and a submit from 8
              clients on each node at the same time
    steady    1,000 tasks/s for 60 s, delays uniform in 1-30 s: lateness p50/p99/max, lost, duplicates
    burst     100,000 tasks due at one instant: time until the last arrives, tasks/s during the drain
    scale     1,000,000 pending tasks over 7 days (--big: 10,000,000): node RSS, window load time,
              steady lateness vs an almost empty table
    restart   SIGKILL and restart the only node with 1,000,000 pending: time until it fires again
    failover  3 nodes (ZooKeeper) under the steady load, SIGKILL one: max lateness of its tasks
    faults    only with --scenario faults (it stops the shared MariaDB, RabbitMQ and ZooKeeper): a node
              killed, a node paused, each service down for 10 s, rolling restarts by SIGTERM and by
              SIGKILL, under 200 tasks/s on 3 nodes: the lateness of tasks due during or after each
              fault from its recovery point, how soon tasks are on time again, lost, repeats
              (--set faults.faults=rolling_term,rolling_kill: some of them)
    keys      only with --scenario keys (it fills 10M rows first): submits with a key and tags against
              without, findByKey and cancelByKey p99 with 10M pending, 1,000 REPLACE submits of one key
    bulk      only with --scenario bulk: a bulk cancel by tag of 1M tasks under the steady load
    console   only with --scenario console (10M pending + 10M archived): the console's list, search and
              task page times, and the steady load's p99 with 5 consoles open against none
    retention only with --scenario retention (a day partition of 10M archived tasks): how long its DROP
              PARTITION takes under the steady load, and the load's p99 with it against without

It prints one JSON line per figure as it is measured ({"scenario", "figure", "value", "unit",
"target", "met", "ratio_to_limit"?, "note"?}), a table at the end, and writes --out (RESULTS.md:
date, machine, command, figures; by default bench/RESULTS.md, and only for a whole secured run).
Throughputs carry their ratio to the raw limit, and the CPU they cost: per task for submits (node,
clients, MariaDB), as shares of a core for the loads (node, consumer, MariaDB, RabbitMQ), with the
whole machine's busy, iowait and steal shares. Each scenario
also reports `machine_speed`: a fixed piece of Python work timed on one core just before and just
after it. The host can slow down by half within minutes, with no steal to show for it; this says
when a figure moved because the machine did.

    python -m bench --scenario burst --scenario steady     # some scenarios (limits always run first)
    python -m bench --smoke --out /tmp/RESULTS.md           # tiny sizes, a few seconds each (the test)
    python -m bench --scale 0.1                             # every task count times 0.1
    python -m bench --set steady.rate=500 --set steady.duration=30
    python -m bench --big --runs 3 --out bench/RESULTS.md  # every figure the median of 3 runs
    python -m bench --scenario burst --profile /tmp/prof  # py-spy on every node; summary printed

--profile DIR records each node process with py-spy (sampling, so the figures move a little) into
DIR/<scenario>-<node>.raw and prints, per scenario, each thread's busy share and its heaviest frames
(`python -m bench.profile DIR/*.raw` prints it again).

Services: DELAYQ_TEST_MYSQL (mysql+pymysql://root@127.0.0.1:3306), DELAYQ_TEST_AMQP,
DELAYQ_TEST_ZK override where they are (delayq.testing.services). DELAYQ_BENCH_NODE_ENV="DELAYQ_CLAIM_LEAD_MS=40 ..." gives
every node those settings (to measure what one changes; the written command shows them). Exit
status 1 when a scenario failed to run (a missed target is reported, not an error).
"""
from __future__ import annotations

import argparse
import copy
import datetime
import json
import logging
import os
import shlex
import shutil
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

from bench import profile as profiler, report
from bench.cpu import machine_speed
from bench.machine import MODE_ENV, NODE_ENV, describe_machine, publish_over_tls, sweep_stale
from bench.measure import Run
from bench.scenarios import BIG, COUNTS, OPTIONAL, ORDER, PARAMS, SCENARIOS, SMOKE
from delayq.testing import security
from delayq.testing.services import wait_for_services


def sizes(args) -> dict[str, dict]:
    params = copy.deepcopy(PARAMS)
    for overlay in ([SMOKE] if args.smoke else []) + ([BIG] if args.big else []):
        for name, values in overlay.items():
            params[name].update(values)
    if args.scale != 1.0:
        for values in params.values():
            for key in COUNTS & set(values):
                values[key] = max(1, int(values[key] * args.scale))
    for item in args.set:
        key, _, value = item.partition("=")
        name, _, field = key.partition(".")
        if name not in params or field not in params[name]:
            raise SystemExit(f"--set {item}: no size {key!r} (see bench/scenarios.py PARAMS)")
        old = params[name][field]
        params[name][field] = type(old)(float(value)) if isinstance(old, (int, float)) else value
    return params


RESULTS = Path("bench/RESULTS.md")      # what a whole run writes unless --out says otherwise


def results_path(out: str | None, partial: bool) -> Path | None:
    """Where the run's RESULTS.md goes: --out, else bench/RESULTS.md unless the run is partial
    (some scenarios, other sizes, or security off), whose figures would replace a whole run's."""
    if out:
        return Path(out)
    return None if partial else RESULTS


def _interrupt(*_):
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description="delayq benchmark (see the module docstring)")
    p.add_argument("--scenario", action="append", choices=ORDER + OPTIONAL,
                   help="run this scenario (repeatable; default all but faults)")
    p.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds per scenario")
    p.add_argument("--big", action="store_true", help="10,000,000 pending tasks in scale and restart")
    p.add_argument("--scale", type=float, default=1.0, help="multiply every task count")
    p.add_argument("--set", action="append", default=[], metavar="SCENARIO.SIZE=VALUE", help="one size")
    p.add_argument("--out", help="RESULTS.md to write (default: bench/RESULTS.md for a whole run as in "
                                 "production; a run of some scenarios, or with --smoke, --scale, --set or "
                                 "--insecure, writes only where --out says)")
    p.add_argument("--runs", type=int, default=1, help="run everything this many times; report medians")
    p.add_argument("--profile", metavar="DIR", help="record every node with py-spy into DIR and summarise")
    p.add_argument("--insecure", action="store_true",
                   help="nodes and clients without TLS and client identity, nodes publishing over plaintext "
                        "AMQP (DELAYQ_INSECURE): what security costs")
    p.add_argument("--keep-logs", action="store_true", help="keep node logs and records (else kept on failure only)")
    args = p.parse_args(argv)
    if args.runs < 1:
        p.error("--runs must be 1 or more")
    # Secured like production: TLS and a token, for this process's clients and the producers it starts.
    security.install()
    if args.insecure:
        os.environ["DELAYQ_INSECURE"] = MODE_ENV["DELAYQ_INSECURE"] = "true"
        os.environ["DELAYQ_CONSOLE_INSECURE"] = MODE_ENV["DELAYQ_CONSOLE_INSECURE"] = "true"   # the console scenario
    else:
        MODE_ENV.update(publish_over_tls())
        if not MODE_ENV:
            print("RabbitMQ has no TLS listener (scripts/services.sh sets one up): nodes publish over "
                  "plaintext AMQP", file=sys.stderr)
    # SIGTERM (a test's timeout) unwinds like Ctrl-C: nodes stopped, databases dropped, queues deleted.
    signal.signal(signal.SIGTERM, _interrupt)

    logging.basicConfig(level=logging.ERROR)     # the publisher's connection notices are not figures
    logging.getLogger("thrift").setLevel(logging.CRITICAL)   # "could not connect" while a node starts
    logging.getLogger("pika").setLevel(logging.CRITICAL)     # connection failures surface as exceptions
    params = sizes(args)
    wanted = ["limits"] + [s for s in ORDER[1:] if not args.scenario or s in args.scenario] \
        + [s for s in OPTIONAL if args.scenario and s in args.scenario]
    workdir = Path(tempfile.mkdtemp(prefix="delayq-bench-"))
    (workdir / "logs").mkdir()
    rounds: list[list[dict]] = []

    def emit(f: dict) -> None:
        rounds[-1].append(f)
        report.emit({**f, "run": len(rounds)} if args.runs > 1 else f)

    run = Run(workdir, workdir / "logs", emit)
    if args.profile:
        profiler.enable(Path(args.profile))
    try:
        for name in sweep_stale():
            print(f"dropped {name}, left behind by an earlier run", file=sys.stderr)
    except Exception as e:  # noqa: BLE001 - the scenarios will say what is wrong with MySQL
        print(f"could not look for stale benchmark databases: {e}", file=sys.stderr)
    started = datetime.datetime.now(datetime.timezone.utc).astimezone()
    t0 = time.monotonic()
    errors: dict[str, str] = {}
    for name, k in [(name, k) for k in range(args.runs) for name in wanted]:
        if name == "limits":
            rounds.append([])
        label = f"{name} (run {k + 1} of {args.runs})" if args.runs > 1 else name
        print(f"== {label}: {json.dumps(params[name])}", file=sys.stderr, flush=True)
        s0 = time.monotonic()
        try:
            waited = wait_for_services()
            if waited > 1:
                print(f"waited {waited:.0f} s for MariaDB and RabbitMQ", file=sys.stderr, flush=True)
            before = machine_speed()
            SCENARIOS[name](run, params[name])
            after = machine_speed()
            run.fig(name, "machine_speed", (before[0] + after[0]) / 2, "M ops/s",
                    note=f"a fixed piece of Python work on one core: {before[0]:.2f} before the scenario "
                         f"(other load {before[1]:.2f} cores), {after[0]:.2f} after ({after[1]:.2f} cores)")
        except KeyboardInterrupt:
            errors[label] = "interrupted"
            break
        except Exception as e:  # noqa: BLE001 - report it, run the others
            errors[label] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            traceback.print_exc(file=sys.stderr)
            print(json.dumps({"scenario": name, "error": errors[label]}), flush=True)
        print(f"== {label}: {time.monotonic() - s0:.1f} s", file=sys.stderr, flush=True)
        if args.profile:
            for path in profiler.finish(name):
                print(f"\n-- profile {path}\n{profiler.summary(path)}", flush=True)

    figures = report.combine(rounds)
    print()
    print(report.table(figures))
    command = "python -m bench " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    if NODE_ENV:
        command = f"DELAYQ_BENCH_NODE_ENV={shlex.quote(' '.join(f'{k}={v}' for k, v in NODE_ENV.items()))} {command}"
    out = results_path(args.out, partial=bool(args.scenario or args.smoke or args.insecure or args.set
                                              or args.scale != 1.0))
    if out is None:
        print(f"\n{RESULTS} not written: this run has only some scenarios, other sizes or no security "
              "(--out PATH writes them)", file=sys.stderr)
    else:
        report.write_results(out, figures, command=command.strip(), started=started.strftime("%Y-%m-%d %H:%M %Z"),
                             seconds=time.monotonic() - t0, machine=describe_machine(),
                             params={k: params[k] for k in wanted}, errors=errors, runs=args.runs)
        print(f"\nwrote {out}", file=sys.stderr)
    lost = any(f["figure"] == "lost" and f["value"] for f in figures)
    if errors or lost or args.keep_logs:
        print(f"logs and records kept in {workdir}", file=sys.stderr)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
