"""The operator's side of the audit log: `recorded(...)` wraps an admin command so its action is
logged as `operator:<login>` from this host, however it ends; `delayq audit` lists the log.

Recording never changes a command's result: when MySQL cannot take the row, the command says so on
stderr and ends as it would have.
"""
from __future__ import annotations

import contextlib
import getpass
import json
import socket
from typing import Iterator

import click

from delayq.clock import SYSTEM_CLOCK
from delayq.config import Settings
from delayq.db import make_engine
from delayq.errors import DelayqError
from delayq.ops.common import INSTANT, load_settings, run, shown, utc_time
from delayq.store.audit import AuditLog, Entry

# How a command that ended with sys.exit(code) ended (delayq's exit codes).
_EXIT_OUTCOMES = {0: "ok", 1: "failed", 2: "refused", 3: "unavailable"}


def operator() -> str:
    try:
        return f"operator:{getpass.getuser()}"
    except (KeyError, OSError):
        return "operator:unknown"


class Outcome:
    """What the command sets when it knows better than its exit code (e.g. "applied")."""
    value: str | None = None


@contextlib.contextmanager
def recorded(settings: Settings, action: str, target: str) -> Iterator[Outcome]:
    outcome = Outcome()
    result = "ok"
    try:
        yield outcome
    except SystemExit as e:
        result = _EXIT_OUTCOMES.get(e.code if isinstance(e.code, int) else 1, "failed")
        raise
    except click.ClickException:
        result = "refused"
        raise
    except BaseException as e:
        result = f"error: {type(e).__name__}"
        raise
    finally:
        engine = make_engine(settings.mysql)
        try:
            AuditLog(engine).record(Entry(SYSTEM_CLOCK.now_ms(), operator(), socket.gethostname(), action, target,
                                          outcome.value or result))
        except DelayqError as e:
            click.echo(f"warning: {action} {target} not recorded in the audit log: {e}", err=True)
        finally:
            engine.dispose()


@click.command("audit")
@click.option("--actor", help="Only this client's (or operator:<login>'s) actions.")
@click.option("--action", help="Only this action (registerService, cancel, reschedule, drain, clients.grant, ...).")
@click.option("--since", type=INSTANT, help="From this time (epoch ms or ISO 8601, UTC unless it says otherwise).")
@click.option("--until", type=INSTANT, help="Before this time.")
@click.option("--limit", type=click.IntRange(1, 100_000), default=100, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False))
def audit(actor, action, since, until, limit, as_json, config_file) -> None:
    """List the audit log, newest first: admin actions, cancels, reschedules and redrives."""
    settings = load_settings(config_file)
    engine = make_engine(settings.mysql)
    try:
        entries = run(lambda: AuditLog(engine).list(actor=actor, action=action, since_ms=since,
                                                   until_ms=until, limit=limit), as_json)
    finally:
        engine.dispose()
    if as_json:
        click.echo(json.dumps([{"atMs": e.at_ms, "actor": e.actor, "address": e.address, "action": e.action,
                                "target": e.target, "outcome": e.outcome} for e in entries], indent=2))
        return
    for e in entries:
        click.echo(line(e))


def line(e: Entry) -> str:
    """An entry as `delayq audit` prints it. Its actor, action and target may come from any client
    (a read-only one's refused cancel of an id it made up is recorded too): each text column is
    printed with its control characters escaped, as the task commands print keys."""
    return (f"{utc_time(e.at_ms)}  {shown(e.actor):24} {shown(e.address):16} {shown(e.action):16} "
            f"{shown(e.target):32} {shown(e.outcome)}")
