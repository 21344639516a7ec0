"""The Overview page: the cluster (name, master, epoch, shards), each node (shards, DelayQueue size,
readiness from its /readyz, drained and pinned marks), and the cluster's fire rate and lateness
p50/p99 over the last hour, charted live from the nodes' histories (delayq.nodes.console.history).

The layout is what the `cluster()` call answers and `intents()` adds, both admin calls: a client
without admin sees the charts of the topics it may read, not the layout.
"""
from __future__ import annotations

from dataclasses import dataclass

from delayq import errors
from delayq.access.grants import Permission
from delayq.client.gen.delayq_thrift import ttypes
from delayq.nodes.console import history
from delayq.nodes.console.app import Console, Ctx, Response, describe


@dataclass(frozen=True)
class NodeRow:
    node_id: str
    endpoint: str
    http: str | None
    shards: int
    queue: int
    master: bool
    drained: bool
    pinned: list[int]
    clock_ms: int | None            # its clock minus MySQL's at its last check
    ready: bool | None              # None: its HTTP port did not answer
    problem: str | None             # what /readyz says is failing, or why there is no answer


def merged_history(c: Console) -> tuple[history.Merged, int, int]:
    """The cluster's history: this node's ring and every other node's; and how many nodes answered
    out of how many were asked."""
    snaps = [c.history.snapshot()]
    try:
        endpoints = c.http_endpoints()
    except errors.Unavailable:        # ZooKeeper away: this node's own history only
        endpoints = {}
    others = [ep for node, ep in endpoints.items() if node != c.node_id]
    answers = c.peers.ask(others, "/history")
    snaps += [a.doc for a in answers.values() if a.doc is not None]
    return history.merge(snaps), len(snaps), len(others) + 1


def visible(ctx: Ctx):
    """The topics whose figures this client may see: all for admin (as listServices), else those it
    may read."""
    return (lambda topic: True) if ctx.admin else (lambda topic: ctx.client.allows(Permission.READ, topic))


def nodes(c: Console, ctx: Ctx) -> tuple[ttypes.ClusterInfo | None, list[NodeRow], str | None]:
    if not ctx.admin:
        return None, [], None
    try:
        info = c.service.cluster()
    except (ttypes.Unavailable, ttypes.Forbidden, ttypes.Unauthenticated) as e:
        return None, [], describe(e)
    try:
        intents = c.service.intents()
        drained, pinned = set(intents.drained or ()), dict(intents.pinned or {})
    except (ttypes.InvalidRequest, ttypes.Unavailable):   # a standalone node (nothing to drain), or ZooKeeper away
        drained, pinned = set(), {}
    try:
        endpoints = c.http_endpoints()
    except errors.Unavailable:
        endpoints = {}
    health = c.peers.ask([ep for ep in endpoints.values() if ep], "/readyz")
    rows = []
    for n in sorted(info.nodes or (), key=lambda n: n.nodeId):
        ep = endpoints.get(n.nodeId)
        answer = health.get(ep) if ep else None
        failing = (answer.doc or {}).get("failing") if answer is not None and answer.doc else None
        problem = ("; ".join(f"{k}: {v}" for k, v in failing.items()) if failing
                   else answer.error if answer is not None else "no HTTP address published")
        rows.append(NodeRow(n.nodeId, n.endpoint, ep, n.shardCount or 0, n.queueSize or 0, bool(n.master),
                            n.nodeId in drained, sorted(s for s, owner in pinned.items() if owner == n.nodeId),
                            n.clockOffsetMs,
                            None if answer is None or answer.status is None else answer.status == 200, problem))
    return info, rows, None


def overview(c: Console, ctx: Ctx) -> Response:
    info, rows, problem = nodes(c, ctx)
    return c.page(ctx, "overview.html", info=info, nodes=rows, problem=problem)


def nodes_fragment(c: Console, ctx: Ctx) -> Response:
    info, rows, problem = nodes(c, ctx)
    return c.page(ctx, "nodes_fragment.html", shows_flash=False, info=info, nodes=rows, problem=problem)


def series(c: Console, ctx: Ctx) -> Response:
    """The charts' data: the cluster's (or one topic's) fires per second and lateness p50/p99."""
    merged, answered, asked = merged_history(c)
    topic = ctx.req.query.get("topic") or None
    see = visible(ctx)
    if topic is not None and not see(topic):
        return c.json({"t": [], "rate": [], "p50": [], "p99": [], "answered": answered, "asked": asked})
    s = history.series(merged, topic, see)
    return c.json({**s.as_dict(), "answered": answered, "asked": asked})


ROUTES = {("GET", "/ui/overview"): overview, ("GET", "/ui/fragments/nodes"): nodes_fragment,
          ("GET", "/ui/api/series"): series}
