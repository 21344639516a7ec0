"""`delayq tasks ...` and `delayq db purge`: look up, list, cancel and redrive tasks; retention."""
from __future__ import annotations

import json
import sys

import click
from thrift.TSerialization import serialize

from delayq.client.gen.delayq_thrift import ttypes
from delayq.clock import SYSTEM_CLOCK
from delayq.db import make_engine
from delayq.lifecycle import Status
from delayq.ops.audit import recorded
from delayq.ops.common import (DURATION, EXIT_FAILURE, EXIT_USAGE, INSTANT, client, fail, load_settings, run,
                               utc_time)
from delayq.ops.taskview import info_dict, info_lines, listed_dict, table
from delayq.store.maintenance import TaskFilter, list_tasks, purge, redrive


common = [click.option("--config", "config_file", type=click.Path(dir_okay=False)),
          click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")]


def with_common(f):
    for option in reversed(common):
        f = option(f)
    return f


@click.group()
def tasks() -> None:
    """Look up, list, cancel and redrive tasks."""


@tasks.command("get")
@click.argument("task_id")
@click.option("--endpoint", "endpoints", multiple=True, help="A node (default: found in ZooKeeper).")
@with_common
def get_task(task_id: str, endpoints: tuple[str, ...], config_file: str | None, as_json: bool) -> None:
    """Show a task (live or archived): its key, tags and trace context, how it ended, and its
    attempts. Exit 1 when there is no such task."""
    settings = load_settings(config_file)

    def go():
        with client(settings, endpoints) as c:
            try:
                return c.get(task_id)
            except ttypes.NotFound:
                fail(f"no task {task_id!r}", EXIT_FAILURE, as_json)
    out = info_dict(run(go, as_json))
    click.echo(json.dumps(out, indent=2) if as_json else "\n".join(info_lines(out)))


@tasks.command("submit")
@click.argument("topic")
@click.option("--delay", type=DURATION, help="Due this long from now: 30s, 1500ms, 5m, 2h, 1d.")
@click.option("--at", "at", type=INSTANT, help="Due at this time: ISO 8601 (UTC unless it says otherwise) or epoch ms.")
@click.option("--id", "task_id", help="Your own task id (idempotent: the same id and content is accepted again).")
@click.option("--payload", help="The payload, as UTF-8 text.")
@click.option("--payload-file", type=click.File("rb"), help="The payload, read from a file ('-': stdin).")
@click.option("--key", help="A business key (up to 255 bytes): find, cancel and reschedule by it.")
@click.option("--tag", "tags", multiple=True, help="A tag (repeatable, up to 8).")
@click.option("--on-key-conflict", type=click.Choice(list(ttypes.KeyConflict._NAMES_TO_VALUES), case_sensitive=False),
              help="What to do when a live task holds the key (default ALLOW).")
@click.option("--max-debounce", type=DURATION,
              help="With REPLACE: due at most this long after the key's first submit (30s, 5m).")
@click.option("--traceparent", help="A W3C trace context, passed on as a message header.")
@click.option("--endpoint", "endpoints", multiple=True, help="A node (default: found in ZooKeeper).")
@with_common
def submit_task(topic, delay, at, task_id, payload, payload_file, key, tags, on_key_conflict, max_debounce,
                traceparent, endpoints, config_file, as_json) -> None:
    """Submit one task to TOPIC (its service must be registered). Prints the task id, its due time
    and what the submit did (CREATED, REPLACED or DEDUPLICATED, with a key's dedup mode)."""
    if (delay is None) == (at is None):
        raise click.UsageError("give exactly one of --delay and --at")
    if payload is not None and payload_file is not None:
        raise click.UsageError("give at most one of --payload and --payload-file")
    if max_debounce is not None and (on_key_conflict or "").upper() != "REPLACE":
        raise click.UsageError("--max-debounce applies to --on-key-conflict replace only (with --key)")
    body = payload.encode() if payload is not None else payload_file.read() if payload_file else b""
    spec = ttypes.TaskSpec(topic=topic, taskId=task_id, payload=body,
                           delayMs=delay, dueAtMs=at, key=key, tags=list(tags) or None,
                           traceparent=traceparent,
                           onKeyConflict=ttypes.KeyConflict._NAMES_TO_VALUES[on_key_conflict.upper()]
                           if on_key_conflict else None,
                           maxDebounceMs=max_debounce)
    settings = load_settings(config_file)
    too_large = over_frame_cap(spec, settings.limits.max_frame_bytes)
    if too_large:
        fail(too_large, EXIT_USAGE, as_json)

    def go():
        with client(settings, endpoints) as c:
            return c.submit(spec)
    ref = run(go, as_json)
    outcome = ttypes.SubmitOutcome._VALUES_TO_NAMES.get(ref.outcome) if ref.outcome else None
    if as_json:
        click.echo(json.dumps({"taskId": ref.taskId, "dueAtMs": ref.dueAtMs, "created": ref.created,
                               "outcome": outcome}))
    elif key is None:
        click.echo(f"{ref.taskId}  due {utc_time(ref.dueAtMs)}" + ("" if ref.created else "  (existed already)"))
    else:
        click.echo(f"{ref.taskId}  due {utc_time(ref.dueAtMs)}  {outcome}")


# What a submit's frame holds beside its TaskSpec: the call's header (method name, sequence id) and
# the argument struct's field header and stop byte. Generous, so that a frame this check lets
# through is never one the node closes.
_CALL_OVERHEAD = 64


def over_frame_cap(spec: ttypes.TaskSpec, max_frame_bytes: int) -> str | None:
    """Why the node would close the connection on this submit without an answer (its frame is
    over DELAYQ_MAX_FRAME_BYTES), or None. Smaller payloads over DELAYQ_MAX_PAYLOAD_BYTES are the
    node's to refuse: it answers InvalidTask(payload), naming its own limit."""
    frame = len(serialize(spec)) + _CALL_OVERHEAD
    if frame <= max_frame_bytes:
        return None
    return (f"payload: {len(spec.payload or b'')} bytes is larger than a node accepts: a call is at most "
            f"DELAYQ_MAX_FRAME_BYTES ({max_frame_bytes} bytes) and a payload at most DELAYQ_MAX_PAYLOAD_BYTES "
            f"(64 KiB unless the nodes set it)")


@tasks.command("cancel")
@click.argument("task_id")
@click.option("--endpoint", "endpoints", multiple=True, help="A node (default: found in ZooKeeper).")
@with_common
def cancel_task(task_id: str, endpoints: tuple[str, ...], config_file: str | None, as_json: bool) -> None:
    """Cancel a task that has not fired. Exit 1 unless it is (now) cancelled."""
    settings = load_settings(config_file)

    def go():
        with client(settings, endpoints) as c:
            return ttypes.CancelResult._VALUES_TO_NAMES[c.cancel(task_id)]
    outcome = run(go, as_json)
    click.echo(json.dumps({"taskId": task_id, "result": outcome}) if as_json else outcome)
    if outcome != "CANCELLED":
        sys.exit(EXIT_FAILURE)


def _filter_options(f):
    for option in reversed([
            click.option("--id", "ids", multiple=True, help="A task id (repeatable)."),
            click.option("--topic"),
            click.option("--since", type=INSTANT, help="Due at or after (epoch ms or ISO 8601)."),
            click.option("--until", type=INSTANT, help="Due before (epoch ms or ISO 8601).")]):
        f = option(f)
    return f


@tasks.command("list")
@_filter_options
@click.option("--status", type=click.Choice([s.name for s in Status], case_sensitive=False))
@click.option("--key-prefix", help="Business keys starting with this.")
@click.option("--tag", help="Tasks with this tag.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@click.option("--after", help="Page on: list task ids after this one.")
@with_common
def list_cmd(ids, topic, since, until, status, key_prefix, tag, limit, after, config_file, as_json) -> None:
    """List live and archived tasks by id, topic, due range, state, key prefix and tag, a page at a
    time, read from MySQL (`delayq tasks find` and the listTasks call go through a node)."""
    settings = load_settings(config_file)
    f = TaskFilter(tuple(ids), topic, since, until, Status[status.upper()] if status else None,
                   key_prefix=key_prefix.encode() if key_prefix else None, tag=tag)
    rows = run(lambda: list_tasks(make_engine(settings.mysql), f, limit, after), as_json)
    out = [listed_dict(r) for r in rows]
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    click.echo("\n".join(table(out, topic=True)))
    if len(rows) == limit:
        click.echo(f"(more: --after {rows[-1]['task_id']})")


@tasks.command("redrive")
@_filter_options
@click.option("--yes", is_flag=True, help="Do it (without --yes only count what would move).")
@with_common
def redrive_cmd(ids, topic, since, until, yes, config_file, as_json) -> None:
    """Send FAILED tasks again: back to DELAY, due now, with a fresh set of retries. A task that
    held its key (onKeyConflict other than ALLOW) holds it again: while another live task holds
    that key, the task stays FAILED, and the command names the holder."""
    if not (ids or topic or since is not None or until is not None):
        raise click.UsageError("name the tasks: --id, --topic, --since or --until")
    settings = load_settings(config_file)
    engine = make_engine(settings.mysql)
    f = TaskFilter(tuple(ids), topic, since, until, Status.FAILED)
    if not yes:
        count = len(run(lambda: list_tasks(engine, f, 10_000), as_json))
        click.echo(json.dumps({"wouldRedrive": count}) if as_json else
                   f"{count}{'+' if count == 10_000 else ''} FAILED tasks match; add --yes to redrive them")
        return
    target = " ".join([*(f"id={i}" for i in ids), *(f"{k}={v}" for k, v in (
        ("topic", topic), ("since", since if since is None else utc_time(since)),
        ("until", until if until is None else utc_time(until))) if v is not None)])
    with recorded(settings, "redrive", target) as outcome:
        held: dict[str, str] = {}

        def go() -> int:
            moved = 0
            for b in redrive(engine, f, SYSTEM_CLOCK.now_ms()):
                moved += len(b.redriven)
                held.update(b.held)
            return moved
        moved = run(go, as_json)
        outcome.value = f"redriven {moved}" + (f", key held {len(held)}" if held else "")
    # Written straight to MySQL: the nodes find them when they re-read their shards' windows.
    within_s = settings.scheduling.full_scan_ms / 1000
    if as_json:
        click.echo(json.dumps({"redriven": moved, "dispatchedWithinS": within_s, "keyHeld": held}))
        return
    click.echo(f"redriven: {moved} tasks (dispatched within {within_s:g} s, DELAYQ_FULL_SCAN_MS)")
    for task_id, holder in held.items():
        click.echo(f"not redriven: {task_id} stays FAILED: its key is held by live task {holder}")


@click.command("purge")
@click.option("--days", type=click.IntRange(1, 36500), required=True,
              help="Delete archived tasks finished, and attempts dispatched, more than this many days ago.")
@click.option("--batch", type=click.IntRange(1, 100_000), default=1000, show_default=True)
@with_common
def purge_cmd(days: int, batch: int, config_file: str | None, as_json: bool) -> None:
    """Retention: delete old backlog and execlog rows in batches (live tasks are never touched)."""
    settings = load_settings(config_file)
    before = SYSTEM_CLOCK.now_ms() - days * 86_400_000
    engine = make_engine(settings.mysql)

    def go():
        backlog = execlog = 0
        for b, x in purge(engine, before, batch):
            backlog, execlog = backlog + b, execlog + x
        return backlog, execlog
    with recorded(settings, "purge", f"older than {days} days") as outcome:
        backlog, execlog = run(go, as_json)
        outcome.value = f"purged {backlog} tasks, {execlog} attempts"
    click.echo(json.dumps({"backlog": backlog, "execlog": execlog}) if as_json else
               f"purged {backlog} archived tasks and {execlog} attempts older than {days} days")

