"""`delayq tasks find|cancel-key|reschedule-key|query`: a topic's tasks by business key, and
listTasks, through a node (the client's grants apply, as for `delayq tasks get` and `cancel`)."""
from __future__ import annotations

import json
import sys

import click

from delayq.client.gen.delayq_thrift import ttypes
from delayq.clock import SYSTEM_CLOCK
from delayq.ops.common import DURATION, EXIT_FAILURE, INSTANT, client, load_settings, run, utc_time
from delayq.ops.taskview import summary_dict, table
from delayq.ops.tasks import tasks, with_common

endpoint = click.option("--endpoint", "endpoints", multiple=True, help="A node (default: found in ZooKeeper).")


def _print_page(page: ttypes.TaskPage, as_json: bool) -> None:
    rows = [summary_dict(t) for t in page.tasks]
    if as_json:
        click.echo(json.dumps({"tasks": rows, "nextPageToken": page.nextPageToken}, indent=2))
        return
    click.echo("\n".join(table(rows, topic=False)))
    if page.nextPageToken:
        click.echo(f"(more: --page-token {page.nextPageToken})")


def _print_outcomes(out: ttypes.KeyedOutcomes, as_json: bool, wanted: int) -> None:
    rows = [{"taskId": o.taskId, "result": ttypes.KeyedResult._VALUES_TO_NAMES[o.result], "dueAtMs": o.dueAtMs}
            for o in out.tasks]
    if as_json:
        click.echo(json.dumps({"tasks": rows, "more": out.more}, indent=2))
    else:
        for r in rows:
            click.echo(f"{r['taskId']}  {r['result']}  due {utc_time(r['dueAtMs'])}")
        if not rows:
            click.echo("no live task has this key")
        if out.more:
            click.echo("(the key has more tasks to change than one call handles: run again to go on)")
    if not rows or any(o.result != wanted for o in out.tasks):
        sys.exit(EXIT_FAILURE)


@tasks.command("find")
@click.argument("topic")
@click.argument("key")
@click.option("--page-token", help="Page on from a previous page.")
@endpoint
@with_common
def find_cmd(topic, key, page_token, endpoints, config_file, as_json) -> None:
    """TOPIC's tasks with business key KEY, live and ended, newest first."""
    settings = load_settings(config_file)

    def go():
        with client(settings, endpoints) as c:
            return c.findByKey(topic, key, page_token)
    _print_page(run(go, as_json), as_json)


@tasks.command("cancel-key")
@click.argument("topic")
@click.argument("key")
@endpoint
@with_common
def cancel_key_cmd(topic, key, endpoints, config_file, as_json) -> None:
    """Cancel TOPIC's live tasks of KEY that have not fired; prints each one's outcome. Exit 1
    unless every one (and at least one) is CANCELLED."""
    settings = load_settings(config_file)

    def go():
        with client(settings, endpoints) as c:
            return c.cancelByKey(topic, key)
    _print_outcomes(run(go, as_json), as_json, ttypes.KeyedResult.CANCELLED)


@tasks.command("reschedule-key")
@click.argument("topic")
@click.argument("key")
@click.option("--delay", type=DURATION, help="Due this long from now: 30s, 5m, 2h.")
@click.option("--at", "at", type=INSTANT, help="Due at this time: ISO 8601 (UTC unless it says otherwise) or epoch ms.")
@endpoint
@with_common
def reschedule_key_cmd(topic, key, delay, at, endpoints, config_file, as_json) -> None:
    """Move TOPIC's live tasks of KEY that have not fired; prints each one's outcome. Exit 1
    unless every one (and at least one) is RESCHEDULED."""
    if (delay is None) == (at is None):
        raise click.UsageError("give exactly one of --delay and --at")
    due = SYSTEM_CLOCK.now_ms() + delay if delay is not None else at
    settings = load_settings(config_file)

    def go():
        with client(settings, endpoints) as c:
            return c.rescheduleByKey(topic, key, due)
    _print_outcomes(run(go, as_json), as_json, ttypes.KeyedResult.RESCHEDULED)


@tasks.command("query")
@click.argument("topic")
@click.option("--status", type=click.Choice(list(ttypes.TaskStatus._NAMES_TO_VALUES), case_sensitive=False))
@click.option("--key-prefix", help="Business keys starting with this.")
@click.option("--tag", help="Tasks with this tag.")
@click.option("--due-from", type=INSTANT, help="Due at or after (epoch ms or ISO 8601).")
@click.option("--due-before", type=INSTANT, help="Due before (epoch ms or ISO 8601).")
@click.option("--limit", type=click.IntRange(1, 500), default=100, show_default=True)
@click.option("--page-token", help="Page on from a previous page.")
@endpoint
@with_common
def query_cmd(topic, status, key_prefix, tag, due_from, due_before, limit, page_token, endpoints, config_file,
              as_json) -> None:
    """TOPIC's tasks by state, key prefix, tag and due range, by due time (the listTasks call)."""
    f = ttypes.TaskFilter(topic=topic, status=ttypes.TaskStatus._NAMES_TO_VALUES[status.upper()] if status else None,
                          keyPrefix=key_prefix, tag=tag, dueFromMs=due_from, dueBeforeMs=due_before)
    settings = load_settings(config_file)

    def go():
        with client(settings, endpoints) as c:
            return c.listTasks(f, page_token, limit)
    _print_page(run(go, as_json), as_json)
