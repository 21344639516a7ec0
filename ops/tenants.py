"""`delayq tenants ...`: tenants, their quotas, and the topics and clients that belong to each.

Written straight to MySQL with the operator's database account (delayq.store.tenants), like
`delayq clients`; every node applies a change within a second, without a restart. A submit counts
against the quotas of its topic's tenant; a topic with no tenant has no quota but the node's own.
Every change is recorded in the audit log (`delayq audit --action tenants.update`).
"""
from __future__ import annotations

import contextlib
import json
from typing import Any, Callable, Iterator

import click

from delayq.db import make_engine
from delayq.errors import UnknownTopic
from delayq.ops.audit import recorded
from delayq.ops.common import EXIT_USAGE, duration_ms, fail, load_settings, run
from delayq.store.tenants import QUOTAS, NoSuchTenant, Shown, TenantStore

CLEAR = "none"


def _count(text: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise click.BadParameter(f"{text!r}: expected a whole number (or {CLEAR})")
    return int(text)


def _rate(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise click.BadParameter(f"{text!r}: expected tasks per second, e.g. 200 or 0.5 (or {CLEAR})") from None


# Option -> (quota column, parser, help). Each takes `none` to clear the quota.
OPTIONS: dict[str, tuple[str, Callable[[str], Any], str]] = {
    "--max-pending": ("max_pending", _count, "Live tasks of the tenant's topics (DELAY, READY, RUNNING)."),
    "--max-submit-rate": ("max_submit_rate", _rate, "Tasks/s submitted to its topics, across the cluster."),
    "--max-horizon": ("max_horizon_ms", duration_ms, "How far ahead a task may be due: 30s, 5m, 2h, 30d "
                                                     "(bare: milliseconds)."),
    "--max-payload-bytes": ("max_payload_bytes", _count, "Largest payload."),
}
_LABEL = {"max_pending": "max pending", "max_submit_rate": "max submit rate", "max_horizon_ms": "max horizon",
          "max_payload_bytes": "max payload"}
_UNIT = {"max_pending": "tasks", "max_submit_rate": "tasks/s", "max_payload_bytes": "bytes"}
_SIZE = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1000}


def _quota_options(f):
    for opt, (_, _, text) in reversed(OPTIONS.items()):
        f = click.option(opt, metavar="VALUE", help=f"{text} '{CLEAR}' clears it.")(f)
    return f


def _quotas(given: dict[str, str | None]) -> dict[str, Any]:
    """The quotas the command line set (click names --max-pending max_pending): None clears one."""
    out = {}
    for opt, (column, parse, _) in OPTIONS.items():
        text = given[opt.lstrip("-").replace("-", "_")]
        if text is not None:
            try:
                out[column] = None if text.lower() == CLEAR else parse(text)
            except click.BadParameter as e:
                e.param_hint = opt
                raise
    return out


@contextlib.contextmanager
def _store(config_file: str | None, action: str, target: str) -> Iterator[TenantStore]:
    """The store, inside the audit record of this action (`delayq audit`)."""
    settings = load_settings(config_file)
    with recorded(settings, f"tenants.{action}", target):
        yield TenantStore(make_engine(settings.mysql))


def _checked(fn, as_json: bool = False):
    """Run fn: a bad name or quota, an unknown tenant, topic or client is a usage error (exit 2)."""
    try:
        return run(fn, as_json)
    except (ValueError, NoSuchTenant) as e:
        fail(str(e).strip('"'), EXIT_USAGE, as_json)
    except UnknownTopic as e:
        fail(f"unknown topic {e.topic!r}: register its service first (delayq services add)", EXIT_USAGE, as_json)


def _target(name: str, quotas: dict[str, Any]) -> str:
    return " ".join([name, *(f"{c}={'none' if v is None else v}" for c, v in quotas.items())])


def _members(name: str, topics: tuple[str, ...], clients: tuple[str, ...]) -> str:
    return " ".join([name, *(f"topic={t}" for t in topics), *(f"client={c}" for c in clients)])


config_option = click.option("--config", "config_file", type=click.Path(dir_okay=False))
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
topic_option = click.option("--topic", "topics", multiple=True, help="A topic (repeat for several).")
client_option = click.option("--client", "clients", multiple=True, help="A client (repeat for several).")


@click.group()
def tenants() -> None:
    """Tenants: quotas on submits to their topics (pending tasks, submit rate, horizon, payload size)."""


@tenants.command("create")
@click.argument("name")
@_quota_options
@config_option
def create(name: str, config_file: str | None, **given: str | None) -> None:
    """Create tenant NAME with the quotas given (none: no limit beyond the node's own)."""
    quotas = _quotas(given)
    with _store(config_file, "create", _target(name, quotas)) as store:
        _checked(lambda: store.create(name, quotas))


@tenants.command("update")
@click.argument("name")
@_quota_options
@config_option
def update(name: str, config_file: str | None, **given: str | None) -> None:
    """Change the quotas given of tenant NAME ('none' clears one); the others stay."""
    quotas = _quotas(given)
    with _store(config_file, "update", _target(name, quotas)) as store:
        _checked(lambda: store.update(name, quotas))


@tenants.command("delete")
@click.argument("name")
@config_option
def delete(name: str, config_file: str | None) -> None:
    """Delete tenant NAME; it must have no topic and no client left."""
    with _store(config_file, "delete", name) as store:
        _checked(lambda: store.delete(name))


@tenants.command("assign")
@click.argument("name")
@topic_option
@client_option
@config_option
def assign(name: str, topics: tuple[str, ...], clients: tuple[str, ...], config_file: str | None) -> None:
    """Put topics (their submits then count against NAME's quotas) and clients in tenant NAME.
    A topic or client in another tenant moves."""
    with _store(config_file, "assign", _members(name, topics, clients)) as store:
        before = _checked(lambda: store.assign(name, topics, clients))
    for item, was in before.items():
        if was is not None and was != name:
            click.echo(f"{item}: moved from tenant {was}", err=True)


@tenants.command("unassign")
@click.argument("name")
@topic_option
@client_option
@config_option
def unassign(name: str, topics: tuple[str, ...], clients: tuple[str, ...], config_file: str | None) -> None:
    """Take topics and clients out of tenant NAME."""
    with _store(config_file, "unassign", _members(name, topics, clients)) as store:
        _checked(lambda: store.unassign(name, topics, clients))


@tenants.command("list")
@json_option
@config_option
def list_tenants(as_json: bool, config_file: str | None) -> None:
    """List the tenants: quotas, topics, clients, pending tasks."""
    listed = _checked(TenantStore(make_engine(load_settings(config_file).mysql)).list, as_json)
    if as_json:
        click.echo(json.dumps([_as_dict(s) for s in listed], indent=2))
        return
    click.echo(f"{'TENANT':24} {'PENDING':>10}  {'TOPICS':>6}  {'CLIENTS':>7}  QUOTAS")
    for s in listed:
        quotas = ", ".join(f"{_LABEL[c]} {_shown(c, getattr(s.tenant, c))}" for c in _LABEL
                           if getattr(s.tenant, c) is not None)
        click.echo(f"{s.tenant.name:24} {s.pending:>10}  {len(s.topics):>6}  {len(s.clients):>7}  {quotas or '-'}")


@tenants.command("show")
@click.argument("name")
@json_option
@config_option
def show(name: str, as_json: bool, config_file: str | None) -> None:
    """Show tenant NAME: its quotas, topics, clients and pending tasks now."""
    shown = _checked(lambda: TenantStore(make_engine(load_settings(config_file).mysql)).get(name), as_json)
    if as_json:
        click.echo(json.dumps(_as_dict(shown), indent=2))
        return
    t = shown.tenant
    click.echo(f"tenant {t.name}")
    for column, label in _LABEL.items():
        value = getattr(t, column)
        click.echo(f"  {label + ':':17} {'-' if value is None else _shown(column, value)}")
    limit = f" of {t.max_pending}" if t.max_pending is not None else ""
    click.echo(f"  {'pending:':17} {shown.pending}{limit}")
    click.echo(f"  {'topics:':17} {' '.join(shown.topics) or '-'}")
    click.echo(f"  {'clients:':17} {' '.join(shown.clients) or '-'}")


def _shown(column: str, value: int | float) -> str:
    """A quota as an operator reads it: 500 tasks/s, 30d, 16384 bytes."""
    if column == "max_horizon_ms":
        unit = next((u for u, size in _SIZE.items() if value % size == 0), None)
        return f"{value // _SIZE[unit]}{unit}" if unit else f"{value}ms"
    return f"{value:.10g} {_UNIT[column]}" if isinstance(value, float) else f"{value} {_UNIT[column]}"


def _as_dict(s: Shown) -> dict:
    """camelCase, like every --json output; quotas by their names in QuotaExceeded."""
    return {"name": s.tenant.name, "quotas": {QUOTAS[c]: getattr(s.tenant, c) for c in QUOTAS},
            "topics": list(s.topics), "clients": list(s.clients), "pending": s.pending}
