"""Bulk jobs from the console: act on every task matching a search, the count shown first, with a
reason; then the job's progress, and a stop. These are the bulk calls (bulkCount, bulkStart,
bulkGet, bulkList, bulkStop) made as the session's client, so who may start what, and the audit
rows, are theirs; the job starts with maxTasks set to the count shown, so it never changes more
tasks than the person confirmed.
"""
from __future__ import annotations

import urllib.parse

from delayq.client.gen.delayq_thrift import ttypes
from delayq.lifecycle import Status
from delayq.nodes.console.app import DECLARED, ActionRefused, Console, Ctx, Response, describe
from delayq.nodes.console.fields import instant, needed, one_of, whole

ACTIONS = {"cancel": ttypes.BulkAction.CANCEL, "reschedule": ttypes.BulkAction.RESCHEDULE,
           "redrive": ttypes.BulkAction.REDRIVE}
STATUS_OF = {"cancel": Status.DELAY, "reschedule": Status.DELAY, "redrive": Status.FAILED}


def _request(fields, reason: str = "-") -> tuple[str, ttypes.BulkRequest]:
    """The bulk request a search's fields describe (the form's, or the confirmation's)."""
    action = one_of(fields.get("action") or "", "action", ACTIONS)
    f = ttypes.TaskFilter(topic=fields.get("topic") or "", status=int(STATUS_OF[action]),
                          dueFromMs=instant(fields.get("since"), "from"),
                          dueBeforeMs=instant(fields.get("until"), "before"),
                          keyPrefix=fields.get("key") or None, tag=fields.get("tag") or None)
    # Minutes either way (negative: earlier); the call checks the horizon.
    shift = whole(fields.get("shift_minutes"), "move each by minutes")
    return action, ttypes.BulkRequest(action=ACTIONS[action], filter=f, reason=reason,
                                      shiftMs=None if shift is None else shift * 60_000,
                                      maxTasks=whole(fields.get("count"), "count", 1))


def new(c: Console, ctx: Ctx) -> Response:
    """The count first: how many tasks the action would change now."""
    q = ctx.req.query
    try:
        action, request = _request(q)
        count = c.service.bulkCount(request)
        problem = None
    except DECLARED + (ActionRefused,) as e:
        action, request, count = q.get("action") or "", None, None
        problem = str(e) if isinstance(e, ActionRefused) else describe(e)
    return c.page(ctx, "bulk_new.html", status=200 if problem is None else 400, action=action, request=request,
                  count=count, problem=problem,
                  fields={k: q.get(k) or "" for k in ("topic", "since", "until", "key", "tag")})


def start(c: Console, ctx: Ctx) -> Response:
    f = ctx.req.form

    def call():
        reason = (f.get("reason") or "").strip()
        if not reason:
            raise ActionRefused("say why: the reason is kept with the job and in the audit log")
        _, request = _request(f, reason)
        # The job changes at most the count shown: a start without it would have no bound.
        needed(request.maxTasks, "count", "the count shown, which bounds the job, is required")
        if request.action == ttypes.BulkAction.RESCHEDULE and request.shiftMs is None:
            raise ActionRefused("say by how many minutes to move the tasks")
        return c.service.bulkStart(request)
    result: dict = {}

    def done(job) -> str:
        result["id"] = job.jobId
        return f"bulk job {job.jobId} started: {job.total:,} tasks to change"
    r = c.act(ctx, call, done, "/ui/bulk")
    if "id" in result:
        return c.redirect("/ui/bulk/job?" + urllib.parse.urlencode({"id": result["id"]}))
    return r


def jobs(c: Console, ctx: Ctx) -> Response:
    try:
        listed, problem = c.service.bulkList(50), None
    except DECLARED as e:
        listed, problem = [], describe(e)
    return c.page(ctx, "bulk.html", jobs=listed, problem=problem, names=ttypes.BulkAction._VALUES_TO_NAMES,
                  states=ttypes.BulkState._VALUES_TO_NAMES)


def job(c: Console, ctx: Ctx) -> Response:
    job_id = ctx.req.query.get("id") or ""
    try:
        found, problem = c.service.bulkGet(job_id), None
    except DECLARED as e:
        found, problem = None, describe(e)
    return c.page(ctx, "bulk_job.html", shows_flash=not ctx.req.query.get("poll"), job=found, problem=problem, names=ttypes.BulkAction._VALUES_TO_NAMES,
                  states=ttypes.BulkState._VALUES_TO_NAMES, running=found is not None
                  and found.state == ttypes.BulkState.RUNNING)


def stop(c: Console, ctx: Ctx) -> Response:
    job_id = ctx.req.form.get("id") or ""
    return c.act(ctx, lambda: c.service.bulkStop(job_id),
                 lambda j: f"bulk job {j.jobId} stopped: {j.changed:,} of {j.total:,} changed",
                 "/ui/bulk/job?" + urllib.parse.urlencode({"id": job_id}))


ROUTES = {("GET", "/ui/bulk"): jobs, ("GET", "/ui/bulk/new"): new, ("POST", "/ui/bulk/start"): start,
          ("GET", "/ui/bulk/job"): job, ("POST", "/ui/bulk/stop"): stop}
