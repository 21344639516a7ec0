"""`delayq retention ...`: how long each topic's history is kept, the day partitions, a pass now.

The default is DELAYQ_RETENTION_DAYS; `set` gives a topic its own number of days (0: for ever),
written straight to MySQL (job_topic_retention) and read by the node that runs the next pass. The
nodes prune on their own (delayq.nodes.cluster.pruner); `prune` runs one pass now, under the same
lock, e.g. after a long retention was shortened. Changes are recorded in the audit log.
"""
from __future__ import annotations

import json

import click

from delayq.clock import SYSTEM_CLOCK
from delayq.db import make_engine
from delayq.errors import InvalidTask, UnknownTopic
from delayq.nodes.validation import check_topic
from delayq.ops.audit import recorded
from delayq.ops.common import EXIT_USAGE, fail, load_settings, run
from delayq.retention import Partition, Retention, named_day
from delayq.store.retention import DAY_PARTITIONED, RetentionStore

config_option = click.option("--config", "config_file", type=click.Path(dir_okay=False))
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")


def _topic(topic: str, as_json: bool) -> str:
    try:
        return check_topic(topic)
    except InvalidTask as e:
        fail(str(e), EXIT_USAGE, as_json)


@click.group()
def retention() -> None:
    """Retention of finished tasks and attempts: per-topic days, day partitions, a pass now."""


@retention.command("show")
@config_option
@json_option
def show(config_file: str | None, as_json: bool) -> None:
    """The default, each topic's own retention, and the day partitions of the history tables."""
    settings = load_settings(config_file)
    store = RetentionStore(make_engine(settings.mysql))
    kept: Retention = run(lambda: store.retention(settings.retention.days), as_json)
    parts: dict[str, list[Partition]] = run(lambda: {t: store.partitions(t) for t in DAY_PARTITIONED}, as_json)
    if as_json:
        click.echo(json.dumps({"defaultDays": kept.default_days, "topics": dict(kept.overrides),
                               "longestDays": kept.longest, "auditDays": settings.retention.audit_days,
                               "partitions": {t: [{"name": p.name, "belowMs": p.below_ms, "rows": p.rows} for p in ps]
                                              for t, ps in parts.items()}}))
        return
    forever = "for ever"
    click.echo(f"default: {kept.default_days or forever} days (DELAYQ_RETENTION_DAYS)" if kept.default_days
               else f"default: kept {forever} (DELAYQ_RETENTION_DAYS=0)")
    for topic, days in sorted(kept.overrides.items()):
        click.echo(f"  {topic}: {days} days" if days else f"  {topic}: kept {forever}")
    click.echo(f"whole days dropped after: {kept.longest} days" if kept.longest else "no partition is dropped")
    audit_days = settings.retention.audit_days
    click.echo(f"audit log: kept {audit_days} days (DELAYQ_AUDIT_RETENTION_DAYS)" if audit_days
               else f"audit log: kept {forever} (DELAYQ_AUDIT_RETENTION_DAYS=0)")
    for table, ps in parts.items():
        named = [p for p in ps if named_day(p.name) is not None]
        span = f"{named[0].name[1:]}..{named[-1].name[1:]}" if named else "none"
        click.echo(f"{table}: {len(named)} day partitions ({span}), ~{sum(p.rows for p in ps)} rows")


@retention.command("set")
@click.argument("topic")
@click.argument("days", type=click.IntRange(0, 36500))
@config_option
def set_days(topic: str, days: int, config_file: str | None) -> None:
    """Keep TOPIC's finished tasks and attempts DAYS days (0: for ever), instead of the default."""
    _topic(topic, False)
    settings = load_settings(config_file)
    with recorded(settings, "retention.set", f"{topic} days={days}"):
        try:
            run(lambda: RetentionStore(make_engine(settings.mysql)).set_override(topic, days, SYSTEM_CLOCK.now_ms()))
        except UnknownTopic:
            fail(f"unknown topic {topic!r}: no service was ever registered for it (delayq services list)",
                 EXIT_USAGE)
    click.echo(f"{topic}: kept {days} days" if days else f"{topic}: kept for ever")


@retention.command("clear")
@click.argument("topic")
@config_option
def clear(topic: str, config_file: str | None) -> None:
    """TOPIC goes back to the default retention."""
    _topic(topic, False)
    settings = load_settings(config_file)
    with recorded(settings, "retention.clear", topic):
        had = run(lambda: RetentionStore(make_engine(settings.mysql)).clear_override(topic))
    click.echo(f"{topic}: default retention" + ("" if had else " (it had no retention of its own)"))


@retention.command("prune")
@config_option
@json_option
def prune(config_file: str | None, as_json: bool) -> None:
    """Run a retention pass now, as the nodes do (skipped if a node is running one)."""
    settings = load_settings(config_file)
    r = settings.retention
    store = RetentionStore(make_engine(settings.mysql))
    with recorded(settings, "retention.prune", f"default={r.days} days") as outcome:
        report = run(lambda: store.prune(r.days, SYSTEM_CLOCK.now_ms(), r.ahead_days, r.batch,
                                         audit_days=r.audit_days), as_json)
        outcome.value = "skipped" if report.skipped else \
            f"dropped {sum(map(len, report.dropped.values()))} partitions, deleted {report.deleted_tasks} tasks"
    if as_json:
        click.echo(json.dumps({"skipped": report.skipped, "added": report.added, "dropped": report.dropped,
                               "keptForDeadLetters": report.kept_for_dead_letters,
                               "deletedTasks": report.deleted_tasks, "deletedAttempts": report.deleted_attempts,
                               "dropMs": report.drop_ms, "auditDenied": report.audit_denied}))
    elif report.skipped:
        click.echo("skipped: a node is running a retention pass")
    else:
        for table in DAY_PARTITIONED:
            added, dropped = report.added.get(table, []), report.dropped.get(table, [])
            click.echo(f"{table}: added {', '.join(added) or 'no partition'}; dropped "
                       + (f"{', '.join(dropped)} in {report.drop_ms[table]:.0f} ms" if dropped else "no partition"))
        if report.audit_denied:
            click.echo("job_audit: left as it is: this account may not call delayq_prune_audit "
                       "(run `delayq db init --node-account`)")
        if report.kept_for_dead_letters:
            click.echo(f"kept past retention, owing dead letters: {', '.join(report.kept_for_dead_letters)}")
        click.echo(f"deleted {report.deleted_tasks} archived tasks and {report.deleted_attempts} attempts of topics "
                   "kept for less than the longest retention")
