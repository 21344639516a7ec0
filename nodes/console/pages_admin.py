"""The Access page (clients and their grants, tenants and their quotas, the audit log filtered by
actor, action and time) and the Cluster actions (drain, undrain, pin, unpin, rebalance), for admin clients.

Clients are the `listClients` call; the actions are `drain`, `undrain`, `pin`, `unpin` and `rebalance`, the
admin calls the `delayq` command's checks are shared with (delayq.master.intents through
delayq.nodes.front.admin), so the console refuses what the command refuses, in the same words.
"""
from __future__ import annotations

import urllib.parse

from delayq import errors
from delayq.client.gen.delayq_thrift import ttypes
from delayq.nodes.console.app import ActionRefused, Console, Ctx, Response, describe
from delayq.nodes.console.fields import instant, needed, one_of, whole
from delayq.nodes.console.pages_overview import nodes

AUDIT_PAGE = 100
LAYOUT_ACTIONS = ("drain", "undrain", "pin", "unpin", "rebalance")


def _admin_only(c: Console, ctx: Ctx, template: str) -> Response | None:
    if ctx.admin:
        return None
    return c.page(ctx, template, denied=True, status=403)


def access(c: Console, ctx: Ctx) -> Response:
    denied = _admin_only(c, ctx, "access.html")
    if denied is not None:
        return denied
    q = ctx.req.query
    problems: list[str] = []
    clients, tenants, entries = [], [], []
    try:
        clients = c.service.listClients()
    except (ttypes.Forbidden, ttypes.Unavailable, ttypes.Unauthenticated) as e:
        problems.append(describe(e))
    try:
        tenants = c.tenants.list()
    except errors.DelayqError as e:
        problems.append(f"tenants: {describe(e)}")
    try:
        since, until = instant(q.get("since"), "audit log from"), instant(q.get("until"), "audit log before")
        before = whole(q.get("before"), "older than entry", 1)
    except ActionRefused as e:
        since = until = before = None
        problems.append(f"{e}: the newest entries are shown")
    try:
        entries = c.audit.list(actor=q.get("actor") or None, action=q.get("action") or None, since_ms=since,
                               until_ms=until, limit=AUDIT_PAGE, before_id=before)
    except errors.DelayqError as e:
        problems.append(f"audit log: {describe(e)}")
    older = None
    if len(entries) == AUDIT_PAGE:
        older = "/ui/access?" + urllib.parse.urlencode(
            {k: v for k, v in {"actor": q.get("actor"), "action": q.get("action"), "since": q.get("since"),
                               "until": q.get("until"), "before": entries[-1].id}.items() if v})
    return c.page(ctx, "access.html", denied=False, clients=clients, tenants=tenants, entries=entries, older=older,
                  problems=problems, actor=q.get("actor") or "", action=q.get("action") or "")


def cluster(c: Console, ctx: Ctx) -> Response:
    denied = _admin_only(c, ctx, "cluster.html")
    if denied is not None:
        return denied
    info, rows, problem = nodes(c, ctx)
    return c.page(ctx, "cluster.html", denied=False, info=info, nodes=rows, problem=problem)


def layout(c: Console, ctx: Ctx) -> Response:
    f = ctx.req.form
    action, node = f.get("action") or "", (f.get("node") or "").strip()
    force = f.get("force") == "yes"

    def shard() -> int:
        return needed(whole(f.get("shard"), "shard", 0, 2**31 - 1), "shard", "say which shard")

    def call():
        one_of(action, "action", LAYOUT_ACTIONS)
        if action == "drain":
            return c.service.drain(node, force)
        if action == "undrain":
            return c.service.undrain(node)
        if action == "pin":
            return c.service.pin(shard(), node, force)
        if action == "unpin":
            return c.service.unpin(shard())
        return c.service.rebalance()

    def done(i) -> str:
        pinned = ", ".join(f"{s}→{n}" for s, n in sorted((i.pinned or {}).items())) or "none"
        return (f"{action} recorded; the master applies it in a moment. Drained: {', '.join(i.drained or ()) or 'none'}; "
                f"pinned: {pinned}")
    return c.act(ctx, call, done, "/ui/cluster")


ROUTES = {("GET", "/ui/access"): access, ("GET", "/ui/cluster"): cluster, ("POST", "/ui/cluster/layout"): layout}
