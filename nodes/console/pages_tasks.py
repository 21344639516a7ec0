"""The Tasks pages: search (by id; by topic, state and a time range, a page at a time by keyset),
a task's page (its state, payload shown safely, every attempt), its actions (cancel, reschedule,
redrive), and the Dead letters page (FAILED tasks grouped by topic and error fingerprint, a group
redriven or discarded with its count shown first).

A task's page is the `get` call, actions are `cancel`, `reschedule` and `redrive`: the Thrift
calls, made as the session's client. A search reads MySQL (delayq.nodes.console.reads) for a topic
the client may read, as `get` would let it read each task.
"""
from __future__ import annotations

import urllib.parse
from typing import Any

from delayq.access.grants import Permission
from delayq.client.gen.delayq_thrift import ttypes
from delayq.lifecycle import LIVE, Status
from delayq.nodes.console import view
from delayq.nodes.console.app import DECLARED, ActionRefused, Console, Ctx, Response, describe
from delayq.nodes.console.fields import instant, needed, one_of, page_mark, whole
from delayq.nodes.console.pages_overview import visible
from delayq.nodes.console.reads import DEAD_CAP, Search
from delayq.nodes.validation import check_task_id
from delayq import errors

DEAD_DAYS = 1
REDRIVE_CHUNK = 500          # the redrive and discard calls' limit of ids


def tasks(c: Console, ctx: Ctx) -> Response:
    q = ctx.req.query
    task_id = (q.get("id") or "").strip()
    if task_id:
        return c.redirect("/ui/task?" + _qs(id=task_id))
    if q.get("key"):
        return by_key(c, ctx)
    topic = (q.get("topic") or "").strip()
    state = q.get("state") or "DELAY"
    values: dict[str, Any] = dict(topic=topic, state=state, since=q.get("since") or "", until=q.get("until") or "",
                                  states=[s.name for s in Status], page=None, problem=None, next_url=None,
                                  key="", found=None, bulk=None, archived=False)
    if not topic:
        return c.page(ctx, "tasks.html", **values)
    try:
        status = Status[one_of(state, "state", (s.name for s in Status))]
        since, until = instant(q.get("since"), "from"), instant(q.get("until"), "before")
        after = page_mark(q.get("after"))
    except ActionRefused as e:
        return c.page(ctx, "tasks.html", **{**values, "problem": f"bad search: {e}"}, status=400)
    if not ctx.may(Permission.READ, topic):
        return c.page(ctx, "tasks.html", **{**values, "problem": f"this client may not read tasks of {topic}"},
                      status=403)
    try:
        page = c.reads.search(Search(topic, status, since, until), after)
    except errors.DelayqError as e:
        return c.page(ctx, "tasks.html", **{**values, "problem": describe(e)}, status=503)
    next_url = None
    if page.next_key:
        next_url = "/ui/tasks?" + _qs(topic=topic, state=state, since=q.get("since"), until=q.get("until"),
                                      after=page.next_key)
    bulk = None       # act on every match: a cancel or reschedule of waiting tasks, a redrive of failed ones
    if status is Status.DELAY or (status is Status.FAILED and since is None and until is None):
        bulk = {a: "/ui/bulk/new?" + _qs(action=a, topic=topic, since=q.get("since"), until=q.get("until"))
                for a in (("cancel", "reschedule") if status is Status.DELAY else ("redrive",))}
    return c.page(ctx, "tasks.html", **{**values, "page": page, "next_url": next_url, "archived": status not in LIVE,
                                        "bulk": bulk if page.rows else None})


def by_key(c: Console, ctx: Ctx) -> Response:
    """The `findByKey` call: a topic's tasks of one business key, live and ended, newest first."""
    q = ctx.req.query
    topic, key = (q.get("topic") or "").strip(), q.get("key") or ""
    values: dict[str, Any] = dict(topic=topic, key=key, state="", since="", until="", states=[s.name for s in Status],
                                  page=None, problem=None, next_url=None, found=None, bulk=None, archived=False)
    try:
        found = c.service.findByKey(topic, key, q.get("token") or None)
    except DECLARED as e:
        return c.page(ctx, "tasks.html", **{**values, "problem": describe(e)}, status=400)
    next_url = "/ui/tasks?" + _qs(topic=topic, key=key, token=found.nextPageToken) if found.nextPageToken else None
    return c.page(ctx, "tasks.html", **{**values, "found": found, "next_url": next_url,
                                        "status_name": lambda n: Status(n).name})


def task(c: Console, ctx: Ctx) -> Response:
    task_id = (ctx.req.query.get("id") or "").strip()
    try:
        check_task_id(task_id)
        info = c.service.get(task_id)
    except errors.InvalidTask as e:
        return c.page(ctx, "task.html", info=None, problem=f"not a task id: {e.reason}", task_id=task_id, status=400)
    except (ttypes.NotFound, ttypes.InvalidTask, ttypes.Forbidden, ttypes.Unavailable) as e:
        return c.page(ctx, "task.html", info=None, problem=describe(e), task_id=task_id,
                      status=404 if isinstance(e, ttypes.NotFound) else 403)
    status = Status(info.status)
    return c.page(ctx, "task.html", info=info, task_id=task_id, state=status.name, problem=None,
                  payload=view.payload(bytes(info.payload or b"")),
                  can_cancel=status is Status.DELAY and ctx.may(Permission.CANCEL, info.topic),
                  can_reschedule=status is Status.DELAY and ctx.may(Permission.CANCEL, info.topic),
                  can_redrive=status is Status.FAILED and ctx.admin)


def cancel(c: Console, ctx: Ctx) -> Response:
    task_id = ctx.req.form.get("id") or ""
    return c.act(ctx, lambda: c.service.cancel(task_id),
                 lambda r: f"cancel {task_id}: {ttypes.CancelResult._VALUES_TO_NAMES.get(r, r)}",
                 "/ui/task?" + _qs(id=task_id))


def reschedule(c: Console, ctx: Ctx) -> Response:
    task_id = ctx.req.form.get("id") or ""

    def call():
        return c.service.reschedule(task_id, due_of(ctx.req.form, ctx.now_ms))
    return c.act(ctx, call, lambda r: f"{task_id} now due at {view.utc(r.dueAtMs)}", "/ui/task?" + _qs(id=task_id))


def due_of(form, now_ms: int) -> int:
    """The due time a task's reschedule form asks for: a time, or in N minutes (0 or more: a task is
    not moved into the past by a minus sign, as `delayq` takes no negative duration)."""
    due = instant(form.get("due_ms"), "reschedule to")
    minutes = whole(form.get("in_minutes"), "in minutes", 0)
    if due is not None and minutes is not None:
        raise ActionRefused("say when once: a time, or in how many minutes, not both")
    if minutes is not None:
        return now_ms + minutes * 60_000
    if due is None:
        raise ActionRefused("say when: a time, or in how many minutes")
    return due


def redrive(c: Console, ctx: Ctx) -> Response:
    task_id = ctx.req.form.get("id") or ""
    return c.act(ctx, lambda: c.service.redrive(ttypes.RedriveFilter(taskIds=[task_id])),
                 lambda r: f"redriven: {r.redriven}" + "".join(f"; not redriven: its key is held by live task {holder}"
                                                               for holder in (r.keyHeld or {}).values()),
                 "/ui/task?" + _qs(id=task_id))


# ---- dead letters ----------------------------------------------------------------------------


def _groups(c: Console, ctx: Ctx):
    rows, more = c.reads.dead(ctx.now_ms - DEAD_DAYS * 86_400_000)
    see = visible(ctx)
    groups: dict[tuple[str, str], list] = {}
    for r in rows:
        if see(r.topic):
            groups.setdefault((r.topic, view.fingerprint(r.message)), []).append(r)
    ordered = sorted(groups.items(), key=lambda kv: -len(kv[1]))
    return ordered, more


GONE = "that group has no dead letters any more (redriven, discarded or purged meanwhile)"


def dead(c: Console, ctx: Ctx) -> Response:
    groups, more = _groups(c, ctx)
    want = (ctx.req.query.get("topic"), ctx.req.query.get("fp"))
    confirm = next(((k, v) for k, v in groups if k == want), None) if any(want) else None
    problem = GONE if any(want) and confirm is None else None
    return c.page(ctx, "dead.html", groups=groups, more=more, cap=DEAD_CAP, days=DEAD_DAYS, confirm=confirm,
                  problem=problem)


def chosen(ids: list[str], count: int | None) -> list[str]:
    """The group's ids to act on, `count` being the group's size the person was shown: a positive
    whole number, never more than the group holds now (a group that grew meanwhile is acted on only
    as far as what was shown; one that shrank is shown again rather than guessed at)."""
    asked = needed(count, "count", "the group's count, as shown, is required")
    if asked < 1:
        raise ActionRefused(f"count: must be 1 or more, not {asked:,}")
    if asked > len(ids):
        raise ActionRefused(f"count: the group holds {len(ids):,} dead letters now, fewer than the {asked:,} asked "
                            "for: look at it again")
    return ids[:asked]


def _group_ids(c: Console, ctx: Ctx) -> tuple[str, list[str]]:
    """The ids of the group the form names, read again now, never more than the count confirmed."""
    topic, fp = ctx.req.form.get("topic") or "", ctx.req.form.get("fp") or ""
    count = whole(ctx.req.form.get("count"), "count", 1)      # refused before any read
    groups, _ = _groups(c, ctx)
    ids = [r.task_id for k, rows in groups if k == (topic, fp) for r in rows]
    if not ids:
        raise ActionRefused(GONE)
    return topic, chosen(ids, count)


def dead_redrive(c: Console, ctx: Ctx) -> Response:
    def call():
        topic, ids = _group_ids(c, ctx)
        moved = held = 0
        for i in range(0, len(ids), REDRIVE_CHUNK):
            done = c.service.redrive(ttypes.RedriveFilter(taskIds=ids[i:i + REDRIVE_CHUNK]))
            moved, held = moved + done.redriven, held + len(done.keyHeld or {})
        return topic, moved, held
    return c.act(ctx, call, lambda r: f"redriven {r[1]:,} tasks of {r[0]}" + (
        f"; {r[2]:,} left failed: their key is held by another live task" if r[2] else ""), "/ui/dead")


def dead_discard(c: Console, ctx: Ctx) -> Response:
    def call():
        topic, ids = _group_ids(c, ctx)
        gone = 0
        for i in range(0, len(ids), REDRIVE_CHUNK):
            gone += c.service.discard(ids[i:i + REDRIVE_CHUNK])
        return topic, gone
    return c.act(ctx, call, lambda r: f"discarded {r[1]:,} failed tasks of {r[0]}", "/ui/dead")


def _qs(**values) -> str:
    return urllib.parse.urlencode({k: v for k, v in values.items() if v not in (None, "")})


ROUTES = {("GET", "/ui/tasks"): tasks, ("GET", "/ui/task"): task, ("POST", "/ui/task/cancel"): cancel,
          ("POST", "/ui/task/reschedule"): reschedule, ("POST", "/ui/task/redrive"): redrive,
          ("GET", "/ui/dead"): dead, ("POST", "/ui/dead/redrive"): dead_redrive, ("POST", "/ui/dead/discard"): dead_discard}
