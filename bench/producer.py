"""The benchmark's submit load: a process of its own, one Thrift client.

    python -m bench.producer --endpoints 127.0.0.1:9090 --topic t --count 1000 --batch 1 --out ids.txt
    python -m bench.producer ... --rate 1000 --duration 60 --batch 10 --delay-min 1000 --delay-max 30000

--count N submits N tasks as fast as it can (`submit` when --batch is 1, else `submitBatch`);
--rate R --duration S paces the calls so that R tasks/s go out for S seconds. Each task is due after a
delay uniform in [--delay-min, --delay-max] ms, or at --due-at (epoch ms). It waits until --start-at
(epoch ms) so that several producers start together, gives each task a key and two tags with
--keyed, writes "<task id> <due ms>" per accepted task
to --out, and prints one JSON summary line. With --stop-file PATH a paced load ends early once that
file exists (a scenario whose faults take an unknown time ends the load a set time after them).
Calls go round-robin over the endpoints; a call that fails on one is tried on the next (with
client-chosen task ids, so a retry never submits twice). `run_producers` starts several and
collects their results.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from delayq.client import DelayqClient, TaskSpec


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.producer")
    p.add_argument("--endpoints", required=True, help="comma-separated host:port")
    p.add_argument("--topic", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--count", type=int, default=0)
    p.add_argument("--rate", type=float, default=0.0)
    p.add_argument("--duration", type=float, default=0.0)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--delay-min", type=int, default=3_600_000)
    p.add_argument("--delay-max", type=int, default=3_600_000)
    p.add_argument("--due-at", type=int, default=0)
    p.add_argument("--start-at", type=int, default=0)
    p.add_argument("--payload", type=int, default=16, help="payload bytes")
    p.add_argument("--id-prefix", default="")
    p.add_argument("--server-ids", action="store_true", help="let the node choose task ids")
    p.add_argument("--stop-file", help="end the load once this file exists")
    p.add_argument("--keyed", action="store_true", help="each task with a key of its own and two tags")
    a = p.parse_args(argv)
    logging.getLogger("thrift").setLevel(logging.CRITICAL)   # a dead node is expected in failover

    rng = random.Random(os.getpid())
    endpoints = a.endpoints.split(",")
    clients = [DelayqClient([e], timeout_s=10) for e in endpoints]
    dead_until = [0.0] * len(clients)
    total = a.count or int(a.rate * a.duration)
    payload = b"x" * a.payload
    prefix = a.id_prefix or f"b{os.getpid()}"
    out = open(a.out, "w", buffering=1 << 20)
    latencies: list[float] = []
    errors: list[str] = []
    submitted = calls = 0
    max_behind = 0.0
    if a.start_at:
        time.sleep(max(0.0, a.start_at / 1000.0 - time.time()))
    t0 = time.monotonic()
    start_ms = time.time_ns() // 1_000_000
    cpu0 = time.process_time()
    i = 0
    while i < total:
        if a.stop_file and os.path.exists(a.stop_file):
            break
        n = min(a.batch, total - i)
        if a.rate:
            at = t0 + i / a.rate
            wait = at - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            else:
                max_behind = max(max_behind, -wait)
        specs = []
        for k in range(i, i + n):
            spec = TaskSpec(topic=a.topic, payload=payload, taskId=None if a.server_ids else f"{prefix}-{k}")
            if a.keyed:
                spec.key, spec.tags = f"{prefix}-{k}", [f"tenant-{k % 8}", "bench"]
            if a.due_at:
                spec.dueAtMs = a.due_at
            else:
                spec.delayMs = rng.randint(a.delay_min, a.delay_max)
            specs.append(spec)
        refs = None
        for attempt in range(2 * len(clients) + 1):
            k = _pick(dead_until, calls + attempt)
            c = clients[k]
            started = time.perf_counter()
            try:
                refs = [c.submit(specs[0])] if a.batch == 1 else c.submitBatch(specs)
                latencies.append(time.perf_counter() - started)
                break
            except Exception as e:  # noqa: BLE001 - a node down (failover): try the next one
                errors.append(f"{type(e).__name__}: {e}"[:200])
                c.close()
                dead_until[k] = time.monotonic() + 1.0      # leave it alone for a second
                if a.server_ids:
                    break          # not safe to retry without a task id
                if len(clients) == 1:
                    time.sleep(0.05)
        calls += 1
        if refs is not None:
            acked = time.time_ns() // 1_000_000
            out.write("".join(f"{r.taskId} {r.dueAtMs} {acked}\n" for r in refs))
            submitted += len(refs)
        i += n
    end_ms = time.time_ns() // 1_000_000
    cpu_s = time.process_time() - cpu0
    out.close()
    for c in clients:
        c.close()
    latencies.sort()
    pick = lambda q: round(latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000, 3) \
        if latencies else None  # noqa: E731
    print(json.dumps({"submitted": submitted, "calls": calls, "errors": len(errors), "first_errors": errors[:3],
                      "start_ms": start_ms, "end_ms": end_ms, "max_behind_ms": round(max_behind * 1000, 1),
                      "call_p50_ms": pick(0.5), "call_p99_ms": pick(0.99), "cpu_s": round(cpu_s, 3)}), flush=True)


def _pick(dead_until: list[float], n: int) -> int:
    """Round-robin over the endpoints, skipping those that failed within the last second."""
    now = time.monotonic()
    for i in range(len(dead_until)):
        k = (n + i) % len(dead_until)
        if dead_until[k] <= now:
            return k
    return n % len(dead_until)


def run_producers(n: int, args: dict, workdir: Path, start_delay_s: float = 1.0, timeout: float = 3600,
                  acked: dict[str, int] | None = None):
    """Run n producers with the same arguments (each its own id prefix and output) starting together;
    returns (summaries, {task id: due ms}), after all ended. `acked`, when given, gets each task's
    acknowledgement time (epoch ms: when its submit was answered)."""
    start_at = time.time_ns() // 1_000_000 + int(start_delay_s * 1000)
    procs = []
    for k in range(n):
        out = workdir / f"producer-{os.getpid()}-{time.monotonic_ns()}-{k}.txt"
        cmd = [sys.executable, "-m", "bench.producer", "--out", str(out), "--start-at", str(start_at)]
        for key, value in args.items():
            flag = "--" + key.replace("_", "-")
            if value is True:
                cmd.append(flag)
            elif value not in (None, False):
                cmd += [flag, str(value)]
        if "id_prefix" not in args:
            cmd += ["--id-prefix", f"p{start_at:x}-{k}"]
        procs.append((subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True,
                                       cwd=Path(__file__).resolve().parent.parent), out))
    summaries, tasks = [], {}
    deadline = time.monotonic() + timeout
    for proc, out in procs:
        try:
            stdout, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, _ = proc.communicate()
        lines = [line for line in stdout.splitlines() if line.startswith("{")]
        if proc.returncode != 0 or not lines:
            raise RuntimeError(f"producer exited with {proc.returncode}")
        summaries.append(json.loads(lines[-1]))
        with open(out) as fh:
            for line in fh:
                tid, due, at = line.split()
                tasks[tid] = int(due)
                if acked is not None:
                    acked[tid] = int(at)
        out.unlink()
    return summaries, tasks


def start_producers(n: int, args: dict, workdir: Path, start_delay_s: float = 1.0,
                    acked: dict[str, int] | None = None):
    """Like run_producers, in the background: returns a function that waits and returns its result."""
    import threading
    result: dict = {}

    def run():
        try:
            result["value"] = run_producers(n, args, workdir, start_delay_s, acked=acked)
        except BaseException as e:  # noqa: BLE001 - re-raised by the waiter
            result["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()

    def wait():
        t.join()
        if "error" in result:
            raise result["error"]
        return result["value"]
    return wait


if __name__ == "__main__":
    main()
