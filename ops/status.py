"""`delayq status`: the cluster as a node reports it (Thrift `cluster()`), plus task counts from MySQL."""
from __future__ import annotations

from sqlalchemy import func, select
from thrift.Thrift import TException

from delayq import tables
from delayq.client import DelayqClient
from delayq.client.gen.delayq_thrift import ttypes
from delayq.clock import SYSTEM_CLOCK
from delayq.config import Settings
from delayq.db import make_engine, unavailable_on_failure
from delayq.errors import Unavailable
from delayq.lifecycle import Status
from delayq.ops.common import node_endpoints, shown


def collect(settings: Settings, endpoints: list[str]) -> dict:
    endpoints = node_endpoints(settings, endpoints)
    try:
        with DelayqClient(endpoints) as c:
            ci = c.cluster()
    except (ttypes.Unauthenticated, ttypes.Forbidden):
        raise           # every node would answer the same: the caller says so
    except (TException, OSError) as e:
        raise Unavailable(f"no node answered at {', '.join(endpoints)}: {e}") from None
    drained, pinned = _intents(settings)
    report = {
        "cluster": ci.cluster, "master": ci.master, "epoch": ci.epoch, "shards": ci.shardCount,
        "nodes": [{"node": n.nodeId, "endpoint": n.endpoint, "shards": n.shardCount, "queue": n.queueSize,
                   "master": n.master, "drained": n.nodeId in drained, "clockOffsetMs": n.clockOffsetMs,
                   "heldTopics": n.heldTopics or {}}
                  for n in sorted(ci.nodes, key=lambda n: n.nodeId)],
        "maxClockOffsetMs": settings.scheduling.max_clock_offset_ms,
        "drained": sorted(drained),
        "pinned": {str(s): n for s, n in sorted(pinned.items())},
        "assignment": {str(s): n for s, n in sorted(ci.assignment.items())},
    }
    report.update(_task_counts(settings))
    return report


def _task_counts(settings: Settings) -> dict:
    engine = make_engine(settings.mysql)
    T, B = tables.task, tables.backlog
    now = SYSTEM_CLOCK.now_ms()
    try:
        with unavailable_on_failure(), engine.connect() as conn:
            counts = {Status(r[0]).name: r[1] for r in conn.execute(select(T.c.status, func.count()).group_by(T.c.status))}
            counts.update({Status(r[0]).name: r[1] for r in conn.execute(select(B.c.status, func.count()).group_by(B.c.status))})
            oldest = conn.execute(select(func.min(T.c.due_ms)).where(T.c.status == int(Status.DELAY),
                                                                     T.c.due_ms < now)).scalar()
    finally:
        engine.dispose()
    return {"tasks": {s.name: counts.get(s.name, 0) for s in Status},
            "oldestOverdueMs": None if oldest is None else now - oldest}


def _intents(settings: Settings) -> tuple[set[str], dict[int, str]]:
    """Drained nodes and pinned shards, as operators asked for them (none without ZooKeeper)."""
    if not settings.zk.enabled:
        return set(), {}
    from delayq.master.intents import read_intents
    from delayq.ops.intents import zk_session
    from delayq.zkpaths import ZkPaths
    with zk_session(settings) as call:
        i = read_intents(call, ZkPaths(settings.node.cluster))
    return set(i.drained), dict(i.pinned)


def render(r: dict) -> str:
    lines = [f"cluster {r['cluster']}: master {r['master']}, epoch {r['epoch']}, {r['shards']} shards", "",
             f"{'NODE':<20} {'ENDPOINT':<24} {'SHARDS':>6} {'QUEUE':>8}"]
    for n in r["nodes"]:
        lines.append(f"{n['node'] + (' *' if n['master'] else ''):<20} {n['endpoint']:<24} {n['shards']:>6} {n['queue']:>8}"
                     + ("  drained" if n["drained"] else "")
                     + _clock_mark(n.get("clockOffsetMs"), r["maxClockOffsetMs"]))
        for topic, why in sorted(n.get("heldTopics", {}).items()):
            lines.append(f"    holding back {topic}: {why}")
    absent = [d for d in r["drained"] if d not in {n["node"] for n in r["nodes"]}]
    if absent:
        # Names as operators asked for them (with --force, or before names were checked): escaped.
        lines.append("drained, not a member now: " + ", ".join(map(shown, absent)))
    if r["pinned"]:
        lines.append("pinned shards: " + ", ".join(f"{s} -> {shown(n)}" for s, n in r["pinned"].items()))
    lines += ["", "tasks: " + ", ".join(f"{k} {v}" for k, v in r["tasks"].items())]
    overdue = r["oldestOverdueMs"]
    lines.append("oldest overdue task: " + ("none" if overdue is None else f"{overdue} ms late"))
    return "\n".join(lines)


def _clock_mark(offset_ms: int | None, bound_ms: int) -> str:
    if offset_ms is None or abs(offset_ms) <= bound_ms:
        return ""
    return f"  clock {abs(offset_ms) / 1000:.1f} s {'ahead of' if offset_ms > 0 else 'behind'} MySQL's (corrected)"
