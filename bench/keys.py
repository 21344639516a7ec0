"""The keys scenario: what business keys cost and what their dedup guarantees, on one node.

    submit     the same submit load with a key and two tags per task and without, in rounds that
               alternate (so the machine's drift falls on both): tasks/s of each, and their ratio
    lookups    with `pending` DELAY tasks of one topic, each with a key (made by INSERT ... SELECT,
               bench.fill), findByKey and then cancelByKey of random keys, one call at a time:
               latency p50/p99 of each (the client's round trip, over TLS as in production); and
               listTasks of the topic from a random due time, a page of 50 (live and ended merged)
    replace    `racers` REPLACE submits of one key at once, from `threads` threads each with its own
               connection: how many live tasks the key has after (exactly one)
"""
from __future__ import annotations

import random
import threading
import time
import uuid

from bench import fill
from bench.cpu import cpu_note, cpu_window, service_pids
from bench.machine import bench_cluster
from bench.measure import Run, pct
from bench.producer import run_producers
from delayq.client import DelayqClient, KeyConflict, SubmitOutcome, TaskFilter, TaskSpec
from delayq.testing.cluster import now_ms

DAY_MS = 86_400_000
LIST_PAGE = 50


def keys(run: Run, p: dict) -> list[dict]:
    out = []
    with bench_cluster(run.logs) as cl:
        node = cl.add_node(start=False)
        topic = f"bench.keys.{uuid.uuid4().hex[:8]}"
        # Due from a day on: none comes into a node's window during the scenario.
        with fill.filling(cl) as engine:
            n, secs = fill.pending(engine, topic, p["pending"], cl.shards, now_ms() + DAY_MS, 7 * DAY_MS,
                                   now_ms=now_ms())
        out.append(run.fig("keys", "pending", n, "tasks",
                           note=f"each with a key, made in {secs:.0f} s by INSERT ... SELECT ({n / max(secs, 0.001):,.0f} rows/s)"))
        node.start()
        cl.register(topic)
        out += _submits(run, p, node, topic)
        out += _lookups(run, p, node, topic, n)
        out += _replace(run, p, cl, node, topic)
    return out


def _submits(run: Run, p: dict, node, topic: str) -> list[dict]:
    """Rounds alternating without, with, with, without, ... keys: tasks/s of each side, and the CPU
    each side cost per task (node, client, MariaDB) from the instant the client started calling."""
    done = {False: [0, 0.0], True: [0, 0.0]}        # keyed -> [tasks, seconds]
    cpu: dict[bool, dict[str, float]] = {False: {}, True: {}}
    machine = {False: (0.0, 0.0, 0.0), True: (0.0, 0.0, 0.0)}
    per = max(1, p["submit_tasks"] // (2 * p["rounds"]))
    for r in range(2 * p["rounds"]):
        keyed = (r % 4) in (1, 2)
        with cpu_window({"node": node.pid, **service_pids("MariaDB")}, 0.5) as window:
            summaries, tasks = run_producers(1, {"endpoints": node.endpoint, "topic": topic, "count": per,
                                                 "batch": p["batch"], "keyed": keyed, "delay_min": DAY_MS,
                                                 "delay_max": 2 * DAY_MS}, run.workdir, start_delay_s=0.5)
        _, used, machine[keyed] = window.read()
        used["client"] = sum(x.get("cpu_s", 0.0) for x in summaries)
        for name, seconds in used.items():
            cpu[keyed][name] = cpu[keyed].get(name, 0.0) + seconds
        s = summaries[0]
        done[keyed][0] += len(tasks)
        done[keyed][1] += (s["end_ms"] - s["start_ms"]) / 1000
    plain = done[False][0] / max(done[False][1], 0.001)
    keyed_rate = done[True][0] / max(done[True][1], 0.001)
    how = f"submitBatch of {p['batch']}, one client, {p['rounds'] * 2} rounds alternating, {per:,} tasks a round"
    mysql = run.limits.get("mysql")
    out = [run.fig("keys", "submit_without_key", plain, "tasks/s", limit=mysql, note=how),
           run.fig("keys", "submit_with_key_and_tags", keyed_rate, "tasks/s", limit=mysql,
                   note="a key of its own and two tags per task; " + how),
           run.fig("keys", "submit_with_key_vs_without", keyed_rate / plain if plain else None, "ratio", ">= 0.9")]
    for keyed, label in ((False, "without_key"), (True, "with_key_and_tags")):
        n = max(1, done[keyed][0])
        out.append(run.fig("keys", f"submit_{label}_node_cpu", 1e6 * cpu[keyed].get("node", 0.0) / n, "us/task",
                           note=cpu_note(cpu[keyed], machine[keyed], per=n) + " (machine: the last round's)"))
    return out


def _lookups(run: Run, p: dict, node, topic: str, n: int) -> list[dict]:
    rng = random.Random(7)
    picks = rng.sample(range(n), min(n, 2 * p["lookups"]))
    find_ms: list[float] = []
    cancel_ms: list[float] = []
    list_ms: list[float] = []
    cancelled = 0
    with DelayqClient([node.endpoint], timeout_s=10) as c:
        c.findByKey(topic, fill.key_of("k", picks[0]), None)            # the connection made, untimed
        for k in picks[:p["lookups"]]:
            t = time.perf_counter()
            page = c.findByKey(topic, fill.key_of("k", k), None)
            find_ms.append((time.perf_counter() - t) * 1000)
            assert len(page.tasks) == 1, f"findByKey found {len(page.tasks)} tasks of key {k}"
        # listTasks from a random due time (its first page: a page token is the server's own), live
        # tasks of every state and ended ones merged: each read a range from that position.
        start = now_ms() + DAY_MS
        for _ in range(p["lookups"]):
            since = start + int(rng.random() * 6 * DAY_MS)
            t = time.perf_counter()
            listed = c.listTasks(TaskFilter(topic=topic, dueFromMs=since), None, LIST_PAGE)
            list_ms.append((time.perf_counter() - t) * 1000)
            assert len(listed.tasks) == LIST_PAGE, f"listTasks from {since} found {len(listed.tasks)} tasks"
        for k in picks[p["lookups"]:]:
            t = time.perf_counter()
            res = c.cancelByKey(topic, fill.key_of("k", k))
            cancel_ms.append((time.perf_counter() - t) * 1000)
            cancelled += len(res.tasks)
    find_ms.sort()
    cancel_ms.sort()
    list_ms.sort()
    note = f"{n:,} pending tasks of the topic, random keys, one call at a time (client round trip)"
    return [run.fig("keys", "find_by_key_p99", pct(find_ms, 0.99), "ms", "<= 5",
                    note=f"{len(find_ms):,} calls, p50 {pct(find_ms, 0.5):.2f} ms; {note}; target is for 10M pending"),
            run.fig("keys", "cancel_by_key_p99", pct(cancel_ms, 0.99), "ms", "<= 10",
                    note=f"{len(cancel_ms):,} calls ({cancelled:,} tasks cancelled), p50 {pct(cancel_ms, 0.5):.2f} ms; "
                         f"{note}; target is for 10M pending"),
            run.fig("keys", "list_tasks_p99", pct(list_ms, 0.99), "ms",
                    note=f"{len(list_ms):,} calls of listTasks(topic, dueFromMs) for {LIST_PAGE} tasks, p50 "
                         f"{pct(list_ms, 0.5):.2f} ms; {note}")]


def _replace(run: Run, p: dict, cl, node, topic: str) -> list[dict]:
    """`racers` REPLACE submits of one key, started together on `threads` connections."""
    key = f"race-{uuid.uuid4().hex[:8]}"
    threads = min(p["threads"], p["racers"])
    outcomes: dict[str, int] = {}
    errors: list[str] = []
    lock = threading.Lock()
    go = threading.Barrier(threads, timeout=60)

    def race(count: int) -> None:
        try:
            with DelayqClient([node.endpoint], timeout_s=30) as c:
                c.findByKey(topic, key, None)          # connected before the start
                go.wait()
                for _ in range(count):
                    ref = c.submit(TaskSpec(topic=topic, key=key, delayMs=DAY_MS, payload=b"r",
                                            onKeyConflict=KeyConflict.REPLACE))
                    with lock:
                        name = SubmitOutcome._VALUES_TO_NAMES.get(ref.outcome, str(ref.outcome))
                        outcomes[name] = outcomes.get(name, 0) + 1
        except Exception as e:  # noqa: BLE001 - counted and reported
            with lock:
                errors.append(f"{type(e).__name__}: {e}"[:200])

    shares = [p["racers"] // threads + (1 if i < p["racers"] % threads else 0) for i in range(threads)]
    workers = [threading.Thread(target=race, args=(k,), daemon=True) for k in shares]
    started = time.monotonic()
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=300)
    secs = time.monotonic() - started
    engine = cl.engine()
    try:
        with engine.connect() as conn:
            live = conn.exec_driver_sql("SELECT COUNT(*) FROM job_delay_task WHERE topic = %s AND task_key = %s",
                                        (topic, key.encode())).scalar()
            ended = conn.exec_driver_sql("SELECT COUNT(*) FROM job_delay_task_backlog WHERE topic = %s AND task_key = %s",
                                         (topic, key.encode())).scalar()
    finally:
        engine.dispose()
    answered = sum(outcomes.values())
    note = (f"{p['racers']:,} submits on {threads} connections in {secs:.1f} s: "
            + ", ".join(f"{v:,} {k}" for k, v in sorted(outcomes.items())) + f"; {ended:,} replaced tasks ended")
    if errors:
        note += f"; {len(errors)} failed calls: {errors[0]}"
    return [run.fig("keys", "replace_race_live_tasks", live, "tasks", "== 1", note=note),
            run.fig("keys", "replace_race_answered", answered, "calls", f"== {p['racers']}")]
