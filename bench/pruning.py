"""The retention scenario: what dropping a day of history does to the steady load.

In the cluster's own database, tomorrow's day partition of the backlog is filled with `rows`
archived tasks (bench.retention.fill: INSERT ... SELECT, no load running). Then the steady load
runs twice on one node, first alone, then with the statement the retention pass runs on a day
past its retention, `ALTER TABLE job_delay_task_backlog DROP PARTITION`, issued `drop_after_s`
into it. Tomorrow's partition is used so that the node's own archived tasks (today's) stay apart;
the statement, its table lock and its file deletion are the same as for a day eight days old.

    drop_ms                                 the DROP PARTITION's own time (target <= 1 s)
    lateness_p99_drop_minus_quiet           the load's p99 with the drop against without
    lateness_max_due_during_drop            the latest task due from 0.5 s before the drop to
                                            1 s after it ended
"""
from __future__ import annotations

import time

from bench.fill import long_engine
from bench.machine import bench_cluster
from bench.measure import Run, Topic, load_figures, pct
from bench.retention import BACKLOG, fill
from delayq.retention import DAY_MS, day_name, day_of
from delayq.store.retention import RetentionStore
from delayq.testing.cluster import now_ms


def retention(run: Run, p: dict) -> list[dict]:
    out: list[dict] = []
    with bench_cluster(run.logs) as cl:
        engine = long_engine(cl.url)
        try:
            now = now_ms()
            RetentionStore(engine).prune(7, now, 2, 1000)       # today's partition and the next two days'
            day = day_of(now) + 1
            started = time.monotonic()
            rows = fill(engine, BACKLOG, p["rows"], day * DAY_MS + 3_600_000, started + p["max_generate_s"])
            with engine.connect() as conn:
                size = int(conn.exec_driver_sql(
                    "SELECT DATA_LENGTH + INDEX_LENGTH FROM information_schema.PARTITIONS WHERE TABLE_SCHEMA = "
                    "DATABASE() AND TABLE_NAME = %s AND PARTITION_NAME = %s", (BACKLOG, day_name(day))).scalar() or 0)
            out.append(run.fig("retention", "partition_rows", rows, "rows",
                               note=f"{size / 2**30:.2f} GB of data and indexes, made in "
                                    f"{time.monotonic() - started:.0f} s"))
            node = cl.add_node()
            with Topic(run, cl, "quiet") as topic:
                _, quiet = load_figures(run, "retention_quiet", p, cl, topic, [node.endpoint], targets=False)
            dropped: dict[str, int] = {}

            def drop(load_started_ms: int) -> dict:
                time.sleep(max(0.0, (load_started_ms + p["drop_after_s"] * 1000 - now_ms()) / 1000))
                with engine.connect() as conn:
                    dropped["from"] = now_ms()
                    conn.exec_driver_sql(f"ALTER TABLE {BACKLOG} DROP PARTITION {day_name(day)}")
                    dropped["to"] = now_ms()
                return {}

            with Topic(run, cl, "drop") as topic:
                _, loaded = load_figures(run, "retention_drop", p, cl, topic, [node.endpoint], during=drop,
                                         targets=False)
        finally:
            engine.dispose()
    took = dropped["to"] - dropped["from"]
    tasks, first = loaded["tasks"], loaded["delivery"].first
    during = sorted(r.recv_us / 1000 - tasks[t] for t, r in first.items()
                    if dropped["from"] - 500 <= tasks[t] <= dropped["to"] + 1000)
    out += [run.fig("retention", "drop_ms", took, "ms", "<= 1000",
                    note=f"ALTER TABLE ... DROP PARTITION of {rows:,} rows under the steady load"),
            run.fig("retention", "lateness_p99_drop_minus_quiet",
                    None if quiet["p99"] is None or loaded["p99"] is None else loaded["p99"] - quiet["p99"], "ms",
                    "<= 1", note=f"{loaded['p99']:.2f} ms with the drop against {quiet['p99']:.2f} ms without, "
                                 "one load after the other"),
            run.fig("retention", "lateness_max_due_during_drop", during[-1] if during else None, "ms",
                    note=f"{len(during):,} tasks due from 0.5 s before the drop to 1 s after it; p50 "
                         f"{pct(during, 0.5) or 0:.2f} ms")]
    return out
