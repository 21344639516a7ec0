"""`delayq services add|update|list|disable`: the callback services (topic -> exchange, retries)."""
from __future__ import annotations

import json
import sys

import click

from delayq.client import DelayqClient
from delayq.client.gen.delayq_thrift import ttypes
from delayq.ops.common import EXIT_FAILURE, call_nodes


FIELDS = [  # option, CallbackService field, type, help
    ("--exchange", "exchange", str, "Exchange to publish to (default: the node's DELAYQ_EXCHANGE)."),
    ("--routing-key", "routingKey", str, "Routing key (default: the topic)."),
    ("--max-retries", "maxRetries", int, "Dispatches after the first before FAILED (default 3)."),
    ("--backoff", "backoff", click.Choice(["fixed", "exponential"]), "Retry backoff (default exponential)."),
    ("--retry-backoff-ms", "retryBackoffMs", int, "First retry delay (default 1000)."),
    ("--retry-backoff-max-ms", "retryBackoffMaxMs", int, "Retry delay cap (default 300000)."),
    ("--ttr-ms", "ttrMs", int, "Time-to-run; 0: no result expected (default 60000)."),
    ("--dead-letter-exchange", "deadLetterExchange", str, "Where FAILED tasks are published."),
    ("--misfire-threshold-ms", "misfireThresholdMs", int, "A dispatch later than this is a misfire."),
    ("--misfire-policy", "misfirePolicy", click.Choice(["fire", "fail"]), "What a misfire does (default fire)."),
]


def _options(f):
    for opt, _, kind, text in reversed(FIELDS):
        f = click.option(opt, type=kind, default=None, help=text)(f)
    for option in reversed([
            click.option("--endpoint", "endpoints", multiple=True, help="A node (default: found in ZooKeeper)."),
            click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts."),
            click.option("--config", "config_file", type=click.Path(dir_okay=False))]):
        f = option(f)
    return f


def _given(options: dict) -> dict:
    """The CallbackService fields the command line set (click names --max-retries max_retries)."""
    values = {field: options[opt.lstrip("-").replace("-", "_")] for opt, field, _, _ in FIELDS}
    return {field: value for field, value in values.items() if value is not None}


def _as_dict(s: ttypes.CallbackService) -> dict:
    return {k: v for k, v in vars(s).items()}


def _find(c: DelayqClient, topic: str) -> ttypes.CallbackService | None:
    return next((s for s in c.listServices() if s.topic == topic), None)


@click.group()
def services() -> None:
    """Register and change the callback services that say where each topic's tasks go."""


@services.command("add")
@click.argument("topic")
@_options
def add(topic, endpoints, as_json, config_file, **fields) -> None:
    """Register TOPIC (exit 1 if it exists: use update)."""
    def go(c: DelayqClient):
        if _find(c, topic) is not None:
            click.echo(f"error: service {topic!r} exists; use `delayq services update`", err=True)
            sys.exit(EXIT_FAILURE)
        svc = ttypes.CallbackService(topic=topic, **_given(fields))
        c.registerService(svc)
        return _find(c, topic)
    svc = call_nodes(config_file, endpoints, go)
    click.echo(json.dumps(_as_dict(svc), indent=2) if as_json else f"added {topic}")


@services.command("update")
@click.argument("topic")
@_options
def update(topic, endpoints, as_json, config_file, **fields) -> None:
    """Change some settings of TOPIC, keeping the others."""
    def go(c: DelayqClient):
        svc = _find(c, topic)
        if svc is None:
            click.echo(f"error: no service {topic!r}; use `delayq services add`", err=True)
            sys.exit(EXIT_FAILURE)
        for field, value in _given(fields).items():
            setattr(svc, field, value)
        c.registerService(svc)
        return _find(c, topic)
    svc = call_nodes(config_file, endpoints, go)
    click.echo(json.dumps(_as_dict(svc), indent=2) if as_json else f"updated {topic}")


@services.command("disable")
@click.argument("topic")
@click.option("--enable", is_flag=True, help="Enable it again instead.")
@click.option("--endpoint", "endpoints", multiple=True, help="A node (default: found in ZooKeeper).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False))
def disable(topic, enable, endpoints, config_file) -> None:
    """Refuse new submits for TOPIC (tasks already submitted still fire)."""
    def go(c: DelayqClient):
        svc = _find(c, topic)
        if svc is None:
            click.echo(f"error: no service {topic!r}", err=True)
            sys.exit(EXIT_FAILURE)
        svc.enabled = enable
        c.registerService(svc)
    call_nodes(config_file, endpoints, go)
    click.echo(f"{'enabled' if enable else 'disabled'} {topic}")


@services.command("list")
@click.option("--endpoint", "endpoints", multiple=True, help="A node (default: found in ZooKeeper).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False))
def list_services(endpoints, as_json, config_file) -> None:
    """List the callback services."""
    rows = call_nodes(config_file, endpoints, lambda c: c.listServices())
    if as_json:
        click.echo(json.dumps([_as_dict(s) for s in rows], indent=2))
        return
    click.echo(f"{'TOPIC':<28} {'EXCHANGE':<16} {'ROUTING KEY':<28} {'RETRIES':>7} {'TTR MS':>8} {'ENABLED':>7}")
    for s in rows:
        click.echo(f"{s.topic:<28} {s.exchange:<16} {s.routingKey:<28} {s.maxRetries:>7} {s.ttrMs:>8} "
                   f"{'yes' if s.enabled else 'no':>7}")
