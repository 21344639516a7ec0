"""The Topics pages: every topic the client may see with its pending tasks, what is due in the
next minute/hour/day, fire rate, lateness, in-flight against its cap, retries and failures in the
last hour, paused and limits (pause, resume and limits changed here through `setTopicControls`); a
topic's own page with its last hour charted; and Upcoming load, the pending tasks of each topic by
due time over the next hour, day or week.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from delayq import errors
from delayq.client.gen.delayq_thrift import ttypes
from delayq.nodes.console import history, view
from delayq.nodes.console.app import COUNTED_TTL_S, ActionRefused, Console, Ctx, Response, describe
from delayq.nodes.console.fields import decimal, one_of, whole
from delayq.nodes.console.fields import shown as quoted
from delayq.nodes.console.sessions import local_path
from delayq.nodes.console.pages_overview import merged_history, visible
from delayq.nodes.console.reads import COUNT_CAP, LOAD_CAP, TopicCounts, capped

RECENT_SLOTS = 30           # lateness over the last 5 minutes
RATE_SLOTS = 6              # fire rate over the last minute
PAGE_TOPICS = 50            # topics counted per page: each costs up to two capped index ranges
HORIZONS = {"hour": (3_600_000, 300_000, "5 min"), "day": (86_400_000, 3_600_000, "hour"),
            "week": (7 * 86_400_000, 6 * 3_600_000, "6 h")}


@dataclass(frozen=True)
class TopicRow:
    topic: str
    counts: TopicCounts | None
    problem: str | None
    controls: ttypes.TopicControls
    rate: float
    p50_s: float | None
    p99_s: float | None
    retried: int
    failed: int
    counted_s_ago: float = 0.0

    def count(self, n: int) -> str:
        return capped(n, COUNT_CAP)


def _controls(c: Console) -> dict[str, ttypes.TopicControls]:
    shown = {s.topic: ttypes.TopicControls(topic=s.topic) for s in c.service.listServices()}
    shown.update({t.topic: t for t in c.service.listTopicControls()})
    return dict(sorted(shown.items()))


def _figures(merged: history.Merged, topic: str) -> tuple[float, float | None, float | None, int, int]:
    slots = list(merged.values())
    recent, last_minute, hour = history.TopicSlot(), history.TopicSlot(), history.TopicSlot()
    for i, slot in enumerate(slots):
        values = slot.get(topic)
        if values is None:
            continue
        hour.add(values)
        if i >= len(slots) - RECENT_SLOTS:
            recent.add(values)
        if i >= len(slots) - RATE_SLOTS:
            last_minute.add(values)
    return (last_minute.fired / (RATE_SLOTS * history.SLOT_MS / 1000), history.quantile(0.5, recent.buckets),
            history.quantile(0.99, recent.buckets), hour.retried, hour.failed)


def _row(c: Console, ctx: Ctx, topic: str, controls: ttypes.TopicControls, merged: history.Merged) -> TopicRow:
    counts, problem, age = None, None, 0.0
    try:
        counts, age = c.counted.get(("counts", topic), lambda: c.reads.topic_counts(topic, ctx.now_ms))
    except errors.DelayqError as e:       # MySQL away, or the statement timeout: said in the row
        problem = f"could not count: {describe(e)}"
    return TopicRow(topic, counts, problem, controls, *_figures(merged, topic), counted_s_ago=age)


def page_of(names: list[str], after: str | None, size: int = PAGE_TOPICS) -> tuple[list[str], str | None]:
    """The `size` names after `after` (names sorted), and the last of them when more follow."""
    rest = [n for n in names if after is None or n > after]
    shown = rest[:size]
    return shown, (shown[-1] if len(rest) > size else None)


def topics(c: Console, ctx: Ctx) -> Response:
    merged, answered, asked = merged_history(c)
    controls = _controls(c)
    shown, more = page_of(list(controls), ctx.req.query.get("after"))
    rows = [_row(c, ctx, t, controls[t], merged) for t in shown]
    return c.page(ctx, "topics.html", rows=rows, answered=answered, asked=asked, more=more, total=len(controls),
                  first=ctx.req.query.get("after") is None, ttl=COUNTED_TTL_S)


def topic(c: Console, ctx: Ctx) -> Response:
    name = ctx.req.query.get("name") or ""
    controls = _controls(c).get(name)
    if controls is None or not visible(ctx)(name):
        return c.page(ctx, "topic.html", row=None, name=name, status=404)
    merged, answered, asked = merged_history(c)
    return c.page(ctx, "topic.html", row=_row(c, ctx, name, controls, merged), name=name,
                  answered=answered, asked=asked)


ACTIONS = ("pause", "resume", "limits")
# The limits form's fields: the form's name -> (its label, the IDL's field the call names in a refusal).
LIMITS = {"max_fire_rate": ("max fire rate", "maxFireRate"), "fire_burst": ("burst", "fireBurst"),
          "max_in_flight": ("max in flight", "maxInFlight"), "weight": ("weight", "weight")}
LABEL_OF = {idl: label for label, idl in LIMITS.values()}


def change_of(form, name: str, action: str) -> ttypes.TopicControls:
    """The controls change a topic form asks for (ActionRefused naming the field otherwise)."""
    if not name:
        raise ActionRefused("topic: missing: say which topic")
    if one_of(action, "action", ACTIONS) != "limits":
        return ttypes.TopicControls(topic=name, paused=action == "pause")
    rate = decimal(form.get("max_fire_rate"), LIMITS["max_fire_rate"][0])
    counts = {k: whole(form.get(k), LIMITS[k][0]) for k in ("fire_burst", "max_in_flight", "weight")}
    return ttypes.TopicControls(topic=name, maxFireRate=rate, fireBurst=counts["fire_burst"],
                                maxInFlight=counts["max_in_flight"], weight=counts["weight"])


def controls(c: Console, ctx: Ctx) -> Response:
    f = ctx.req.form
    name, action = f.get("topic") or "", f.get("action") or ""
    back = local_path(f.get("back")) or "/ui/topics"

    def call():
        change = change_of(f, name, action)
        try:
            return c.service.setTopicControls(change)
        except ttypes.InvalidService as e:       # the call's range check, said with the form's label
            raise ActionRefused(f"{LABEL_OF.get(e.field, e.field)}: {e.reason}") from None
    return c.act(ctx, call, lambda r: f"{name}: {'paused' if r.paused else 'running'}, "
                 f"max fire rate {r.maxFireRate or 'none'}, max in flight {r.maxInFlight or 'none'}", back)


def load(c: Console, ctx: Ctx) -> Response:
    horizon = ctx.req.query.get("horizon") or "hour"
    problems: list[str] = []
    if horizon not in HORIZONS:
        problems.append(f"horizon: {quoted(horizon)} is not one of {', '.join(HORIZONS)}: the next hour is shown")
        horizon = "hour"
    span, bucket, label = HORIZONS[horizon]
    n = span // bucket
    see = visible(ctx)
    rows: list[dict[str, Any]] = []
    names = [t for t in _controls(c) if see(t)]
    shown, more = page_of(names, ctx.req.query.get("after"))
    oldest = 0.0
    for t in shown:
        try:
            (counts, cut), age = c.counted.get(("load", t, horizon), lambda: c.reads.load(t, ctx.now_ms, span, bucket))
            oldest = max(oldest, age)
        except errors.DelayqError as e:   # said on the page, the other topics still shown
            problems.append(f"{t}: could not count ({describe(e)})")
            continue
        series = [counts.get(i, 0) for i in range(n)]
        if sum(series):
            peak = max(range(n), key=lambda i: series[i])
            rows.append({"topic": t, "series": series, "total": sum(series), "cut": cut,
                         "peak_ms": ctx.now_ms + peak * bucket, "peak": series[peak]})
    rows.sort(key=lambda r: -r["total"])
    chart = {"t": [(ctx.now_ms + i * bucket) // 1000 for i in range(n)],
             "series": [{"topic": r["topic"], "values": r["series"]} for r in rows[:8]]}
    return c.page(ctx, "load.html", rows=rows, horizon=horizon, horizons=list(HORIZONS), bucket=label,
                  chart=_script_safe(json.dumps(chart)), problems=problems, cap=LOAD_CAP, view=view,
                  more=more, total=len(names), first=ctx.req.query.get("after") is None, ttl=COUNTED_TTL_S,
                  page_size=PAGE_TOPICS, oldest_s=oldest)


def _script_safe(doc: str) -> str:
    """JSON inside a <script type="application/json"> element: no '<', '>' or '&' that could end it."""
    return doc.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


ROUTES = {("GET", "/ui/topics"): topics, ("GET", "/ui/topic"): topic, ("POST", "/ui/topics/controls"): controls,
          ("GET", "/ui/load"): load}
