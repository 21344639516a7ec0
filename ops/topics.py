"""`delayq topics list|pause|resume|limit`: each topic's flow controls, through a node (admin).

Changes go through setTopicControls, so the node checks the caller's admin permission, records
the change in the audit log, and every node applies it within a second.
"""
from __future__ import annotations

import json

import click

from delayq.client.gen.delayq_thrift import ttypes
from delayq.ops.common import EXIT_USAGE, call_nodes, fail


INT32 = click.IntRange(0, 2**31 - 1)      # what the IDL carries; the node checks the rest


def _common(f):
    for option in reversed([
            click.option("--endpoint", "endpoints", multiple=True, help="A node (default: found in ZooKeeper)."),
            click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts."),
            click.option("--config", "config_file", type=click.Path(dir_okay=False))]):
        f = option(f)
    return f


def _as_dict(t: ttypes.TopicControls) -> dict:
    return {k: v for k, v in vars(t).items()}


def _set(topic: str, endpoints, as_json: bool, config_file, **controls) -> None:
    change = ttypes.TopicControls(topic=topic, **controls)
    now = call_nodes(config_file, endpoints, lambda c: c.setTopicControls(change), as_json)
    click.echo(json.dumps(_as_dict(now), indent=2) if as_json else _line(now))


def _line(t: ttypes.TopicControls) -> str:
    rate = "-" if not t.maxFireRate else f"{t.maxFireRate:g}/s burst {t.fireBurst or max(1, int(t.maxFireRate / 20))}"
    return (f"{t.topic}: {'PAUSED' if t.paused else 'running'}, rate {rate}, "
            f"max in flight {t.maxInFlight or '-'}, weight {t.weight}")


@click.group()
def topics() -> None:
    """Pause, resume and limit how each topic's tasks fire (admin)."""


@topics.command("list")
@_common
def list_topics(endpoints, as_json, config_file) -> None:
    """Every topic's controls, and its attempts in flight now across the cluster."""
    rows: list[ttypes.TopicControls] = call_nodes(config_file, endpoints, lambda c: c.listTopicControls(), as_json)
    if as_json:
        click.echo(json.dumps([_as_dict(t) for t in rows], indent=2))
        return
    click.echo(f"{'TOPIC':<28} {'STATE':<7} {'MAX RATE/S':>10} {'BURST':>6} {'IN FLIGHT':>9} {'MAX':>6} "
               f"{'WEIGHT':>6}  TENANT")
    for t in rows:
        burst = t.fireBurst or (max(1, int(t.maxFireRate / 20)) if t.maxFireRate else None)
        click.echo(f"{t.topic:<28} {'paused' if t.paused else 'running':<7} "
                   f"{'-' if not t.maxFireRate else format(t.maxFireRate, 'g'):>10} {burst or '-':>6} "
                   f"{t.inFlight if t.inFlight is not None else '-':>9} {t.maxInFlight or '-':>6} {t.weight:>6}  "
                   f"{t.tenant or '-'}")


@topics.command("pause")
@click.argument("topic")
@_common
def pause(topic, endpoints, as_json, config_file) -> None:
    """Fire nothing of TOPIC until it resumes; its tasks stay DELAY and can be cancelled."""
    _set(topic, endpoints, as_json, config_file, paused=True)


@topics.command("resume")
@click.argument("topic")
@_common
def resume(topic, endpoints, as_json, config_file) -> None:
    """Fire TOPIC's tasks again: late ones at the catch-up rate, under the misfire policy."""
    _set(topic, endpoints, as_json, config_file, paused=False)


@topics.command("limit")
@click.argument("topic")
@click.option("--rate", type=float, help="Tasks/s fired across the cluster (0: no limit).")
@click.option("--burst", type=INT32, help="Tasks that may fire at once above the rate (0: rate/20, at least 1).")
@click.option("--max-in-flight", type=INT32, help="Attempts dispatched and not yet reported (0: no cap).")
@click.option("--weight", type=INT32, help="Share of a node's dispatch when several topics have tasks due (1-1000).")
@_common
def limit(topic, rate, burst, max_in_flight, weight, endpoints, as_json, config_file) -> None:
    """Set TOPIC's rate, burst, in-flight cap or weight; options not given keep their value."""
    if rate is None and burst is None and max_in_flight is None and weight is None:
        fail("give at least one of --rate, --burst, --max-in-flight, --weight", EXIT_USAGE, as_json)
    _set(topic, endpoints, as_json, config_file, maxFireRate=rate, fireBurst=burst, maxInFlight=max_in_flight,
         weight=weight)
