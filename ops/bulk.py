"""`delayq tasks bulk cancel|reschedule|redrive|list|show|stop`: bulk jobs through a node (the
bulkCount, bulkStart, bulkGet, bulkList and bulkStop calls; the client's grants apply).

A job is counted first and shown; without --yes the command asks before it starts one (and
refuses when it cannot ask: --json, or no terminal). The job is started with that count as its
ceiling, then followed with a progress bar until it ends (Ctrl-C leaves it running; --no-wait
does not follow it)."""
from __future__ import annotations

import json
import sys
import time
from typing import Callable

import click

from delayq.client.gen.delayq_thrift import ttypes
from delayq.ops.common import (DURATION, EXIT_FAILURE, EXIT_USAGE, INSTANT, client, fail, load_settings, run,
                               utc_time)
from delayq.ops.tasks import tasks, with_common

POLL_S = 0.5
endpoint = click.option("--endpoint", "endpoints", multiple=True, help="A node (default: found in ZooKeeper).")
_ACTION = ttypes.BulkAction._VALUES_TO_NAMES
_STATE = ttypes.BulkState._VALUES_TO_NAMES
_DONE = {"cancel": "cancelled", "reschedule": "rescheduled", "redrive": "redriven"}


@tasks.group("bulk")
def bulk() -> None:
    """Cancel, reschedule or redrive many tasks of a topic as a tracked job (counted first, paced,
    audited, stoppable; any node runs it, another one if that node dies)."""


def _job_options(f):
    for option in reversed([
            click.argument("topic"),
            click.option("--key-prefix", help="Business keys starting with this."),
            click.option("--tag", help="Tasks with this tag."),
            click.option("--due-from", type=INSTANT, help="Due at or after (epoch ms or ISO 8601)."),
            click.option("--due-before", type=INSTANT, help="Due before (epoch ms or ISO 8601)."),
            click.option("--reason", required=True, help="Why (1-255 characters): kept with the job and audited."),
            click.option("--rate", type=click.IntRange(1, 100_000), help="Tasks a second (default: DELAYQ_BULK_RATE)."),
            click.option("--dry-run", is_flag=True, help="Only count the tasks it would change."),
            click.option("--yes", is_flag=True, help="Start without asking."),
            click.option("--no-wait", is_flag=True, help="Start the job and return (follow it with `bulk show`)."),
            endpoint]):
        f = option(f)
    return with_common(f)


@bulk.command("cancel")
@_job_options
def cancel_cmd(**kw) -> None:
    """Cancel TOPIC's tasks that have not fired (DELAY) and match the options."""
    _launch(ttypes.BulkAction.CANCEL, kw)


@bulk.command("reschedule")
@click.option("--later", type=DURATION, help="Move each task this much later: 30s, 5m, 2h, 1d (a task it would take "
              "past the horizon, DELAYQ_MAX_HORIZON_MS from when its batch runs, is left as it is and counted as "
              "skipped).")
@click.option("--earlier", type=DURATION, help="Move each task this much earlier.")
@click.option("--at", "at", type=INSTANT,
              help="Move every task to this time: ISO 8601 (UTC unless it says otherwise) or epoch ms; at most the "
                   "horizon (DELAYQ_MAX_HORIZON_MS) from now.")
@_job_options
def reschedule_cmd(later, earlier, at, **kw) -> None:
    """Move TOPIC's tasks that have not fired (DELAY) and match the options."""
    if sum(x is not None for x in (later, earlier, at)) != 1:
        raise click.UsageError("give exactly one of --later, --earlier and --at")
    shift = later if later is not None else -earlier if earlier is not None else None
    _launch(ttypes.BulkAction.RESCHEDULE, kw, shift_ms=shift, due_at_ms=at)


@bulk.command("redrive")
@_job_options
def redrive_cmd(**kw) -> None:
    """Send TOPIC's FAILED tasks that match the options again (due now, a fresh set of retries)."""
    _launch(ttypes.BulkAction.REDRIVE, kw)


def _launch(action: int, kw: dict, shift_ms: int | None = None, due_at_ms: int | None = None) -> None:
    as_json, verb = kw["as_json"], _ACTION[action].lower()
    request = ttypes.BulkRequest(
        action=action, reason=kw["reason"], shiftMs=shift_ms, dueAtMs=due_at_ms, opsPerSecond=kw["rate"],
        filter=ttypes.TaskFilter(topic=kw["topic"], keyPrefix=kw["key_prefix"], tag=kw["tag"],
                                 dueFromMs=kw["due_from"], dueBeforeMs=kw["due_before"]))
    settings = load_settings(kw["config_file"])

    def count():
        with client(settings, kw["endpoints"]) as c:
            return c.bulkCount(request)
    n = run(count, as_json)
    if kw["dry_run"] or n == 0:
        click.echo(json.dumps({"count": n}) if as_json else f"{n} tasks of {kw['topic']} would be {_DONE[verb]}" +
                   ("" if kw["dry_run"] else ": nothing to do"))
        return
    if not kw["yes"]:
        if as_json or not sys.stdin.isatty():
            fail(f"{n} tasks match: add --yes to {verb} them (or --dry-run to count only)", EXIT_USAGE, as_json)
        click.confirm(f"{n} tasks of {kw['topic']} match. {verb.capitalize()} them?", abort=True)
    request.maxTasks = n            # never more than the operator was shown

    def start():
        with client(settings, kw["endpoints"]) as c:
            return c.bulkStart(request)
    job = run(start, as_json)
    if not as_json:
        click.echo(f"job {job.jobId}: {verb} {job.total} tasks at {job.opsPerSecond}/s" +
                   ("; a task the shift would take past the horizon is left as it is (skipped)"
                    if job.shiftMs is not None else ""))
    if not kw["no_wait"]:
        job = follow(lambda: _get(settings, kw["endpoints"], job.jobId, as_json), job, as_json)
    _show(job, as_json)
    if job.state in (ttypes.BulkState.STOPPED, ttypes.BulkState.FAILED):
        sys.exit(EXIT_FAILURE)


def _get(settings, endpoints, job_id: str, as_json: bool) -> ttypes.BulkJob:
    def go():
        with client(settings, endpoints) as c:
            return c.bulkGet(job_id)
    return run(go, as_json)


def follow(look: Callable[[], ttypes.BulkJob], job: ttypes.BulkJob, as_json: bool,
           sleep: Callable[[float], None] = time.sleep) -> ttypes.BulkJob:
    """Poll the job (look) until it ends, with a progress bar on stderr (none under --json): the
    tasks done of its total, and at its end, unless it is DONE, where it ended and its state."""
    try:
        with click.progressbar(length=max(job.total, 1), label=job.jobId, file=sys.stderr, show_pos=True,
                               show_percent=True, hidden=as_json) as bar:
            shown = 0
            while job.state == ttypes.BulkState.RUNNING:
                sleep(POLL_S)
                job = look()
                bar.update(job.changed + job.skipped - shown)
                shown = job.changed + job.skipped
            position, bar.label = bar_end(job)
            bar.update(position - shown)
            bar.render_progress()       # the label, when the position has not moved
    except KeyboardInterrupt:
        click.echo(f"\nstill running: delayq tasks bulk show {job.jobId} (or stop {job.jobId})", err=True)
        sys.exit(EXIT_FAILURE)
    return job


def bar_end(job: ttypes.BulkJob) -> tuple[int, str]:
    """Where the progress bar of an ended job stops, and its label: a DONE job fills it (a job with
    nothing left to do may have changed fewer than its total); a stopped or failed one stays where
    the job ended, labelled with its state."""
    if job.state == ttypes.BulkState.DONE:
        return max(job.total, 1), job.jobId
    return job.changed + job.skipped, f"{job.jobId} {_STATE[job.state]}"


def as_dict(j: ttypes.BulkJob) -> dict:
    f = j.filter
    return {"jobId": j.jobId, "action": _ACTION[j.action], "topic": f.topic, "keyPrefix": f.keyPrefix, "tag": f.tag,
            "dueFromMs": f.dueFromMs, "dueBeforeMs": f.dueBeforeMs, "shiftMs": j.shiftMs, "dueAtMs": j.dueAtMs,
            "reason": j.reason, "state": _STATE[j.state], "total": j.total, "changed": j.changed,
            "skipped": j.skipped, "opsPerSecond": j.opsPerSecond, "createdBy": j.createdBy,
            "createdAtMs": j.createdAtMs, "finishedAtMs": j.finishedAtMs, "runningOn": j.runningOn, "error": j.error}


def _why_skipped(d: dict) -> str:
    """Why a job's skipped tasks were left: a shift also leaves those it would take past the horizon,
    a redrive those whose key another live task holds."""
    if d["action"] == "REDRIVE":
        return "stayed FAILED (their key held by another live task, or redriven or discarded meanwhile)"
    if d["shiftMs"] is not None:
        return "left as they were: fired or changed meanwhile, or the shift would take them past the horizon"
    return "had fired or changed meanwhile"


def _show(j: ttypes.BulkJob, as_json: bool) -> None:
    d = as_dict(j)
    if as_json:
        click.echo(json.dumps(d, indent=2))
        return
    narrowed = " ".join(f"{k}={d[k]}" for k in ("keyPrefix", "tag", "shiftMs") if d[k] is not None)
    narrowed += "".join(f" {k}={utc_time(d[k])}" for k in ("dueFromMs", "dueBeforeMs", "dueAtMs") if d[k] is not None)
    click.echo(f"job {d['jobId']}  {d['state']}  {d['action'].lower()} {d['topic']} {narrowed}".rstrip())
    click.echo(f"  changed {d['changed']} of {d['total']}" + (f", {d['skipped']} {_why_skipped(d)}" if d["skipped"]
                                                             else "") + f"  at {d['opsPerSecond']}/s")
    click.echo(f"  by {d['createdBy']} at {utc_time(d['createdAtMs'])}: {d['reason']}")
    if d["runningOn"]:
        click.echo(f"  running on {d['runningOn']}")
    if d["finishedAtMs"]:
        click.echo(f"  ended {utc_time(d['finishedAtMs'])}" + (f": {d['error']}" if d["error"] else ""))


@bulk.command("list")
@click.option("--limit", type=click.IntRange(1, 100), default=20, show_default=True)
@endpoint
@with_common
def list_cmd(limit, endpoints, config_file, as_json) -> None:
    """Bulk jobs, newest first (of the topics the client may read)."""
    settings = load_settings(config_file)

    def go():
        with client(settings, endpoints) as c:
            return c.bulkList(limit)
    jobs = run(go, as_json)
    if as_json:
        click.echo(json.dumps([as_dict(j) for j in jobs], indent=2))
        return
    click.echo(f"{'JOB':<24} {'STATE':<8} {'ACTION':<10} {'TOPIC':<24} {'CHANGED':>9} {'TOTAL':>9}  REASON")
    for j in jobs:
        click.echo(f"{j.jobId:<24} {_STATE[j.state]:<8} {_ACTION[j.action].lower():<10} {j.filter.topic:<24} "
                   f"{j.changed:>9} {j.total:>9}  {j.reason}")


@bulk.command("show")
@click.argument("job_id")
@endpoint
@with_common
def show_cmd(job_id, endpoints, config_file, as_json) -> None:
    """A bulk job: its request, its progress, who started it and why."""
    _show(_get(load_settings(config_file), endpoints, job_id, as_json), as_json)


@bulk.command("stop")
@click.argument("job_id")
@endpoint
@with_common
def stop_cmd(job_id, endpoints, config_file, as_json) -> None:
    """Stop a running job (a batch under way rolls back); prints its final count. Exit 1 when the
    job had ended DONE or FAILED before the stop (a job stopped already stays stopped: exit 0)."""
    settings = load_settings(config_file)
    before = _get(settings, endpoints, job_id, as_json)

    def go():
        with client(settings, endpoints) as c:
            return c.bulkStop(job_id)
    job = before if before.state != ttypes.BulkState.RUNNING else run(go, as_json)
    note = stop_note(before, job)
    if as_json:
        click.echo(json.dumps({**as_dict(job), "alreadyEnded": note is not None}, indent=2))
    else:
        _show(job, as_json)
        if note is not None:
            click.echo(note, err=job.state != ttypes.BulkState.STOPPED)
    if job.state != ttypes.BulkState.STOPPED:
        sys.exit(EXIT_FAILURE)


def stop_note(before: ttypes.BulkJob, after: ttypes.BulkJob) -> str | None:
    """What `bulk stop` says of a job that had ended before it: None when the stop ended it. (A job
    seen RUNNING and answered STOPPED was ended by this stop, or by another one at the same time.)"""
    if before.state == ttypes.BulkState.RUNNING and after.state == ttypes.BulkState.STOPPED:
        return None
    if after.state == ttypes.BulkState.STOPPED:
        return f"job {after.jobId} had been stopped already"
    return f"job {after.jobId} had already ended ({_STATE[after.state]}): nothing to stop"
