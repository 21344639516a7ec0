"""`delayq drain|undrain|pin|unpin|rebalance|reshard`: change a running cluster through the master.

Each command records intent in ZooKeeper and waits (`--timeout`) until the cluster reports it
applied. Exit codes: 0 applied, 1 not applied in time (the intent stays recorded), 2 usage,
3 ZooKeeper or the nodes unreachable.
"""
from __future__ import annotations

import json
import sys
import time
from typing import Any

import click

from delayq.client.gen.delayq_thrift import ttypes
from delayq.errors import Unavailable
from delayq.ops.audit import Outcome, recorded
from delayq.ops.common import EXIT_USAGE, SECONDS, fail, load_settings, shown
from delayq.master import intents as intents_
from delayq.ops.intents import cluster_info, wait_applied, wait_for, zk_session
from delayq.zkpaths import ZkPaths, node_id_problem

EXIT_TIMEOUT, EXIT_UNAVAILABLE = 1, 3


class _NodeId(click.ParamType):
    """A node to drain or pin: a name a node can have (delayq.zkpaths.node_id_problem), checked
    before anything is asked of the cluster."""
    name = "node"

    def convert(self, value, param, ctx) -> str:
        problem = node_id_problem(value)
        if problem is not None:
            self.fail(f"nodeId {value!r} {problem}", param, ctx)
        return value


NODE_ID = _NodeId()


def cluster_options(f):
    for option in reversed([
            click.option("--endpoint", "endpoints", multiple=True, help="A node (default: found in ZooKeeper)."),
            click.option("--timeout", "timeout_s", type=SECONDS, default=60.0, show_default=True,
                         help="Seconds to wait for the cluster to apply it."),
            click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts."),
            click.option("--config", "config_file", type=click.Path(dir_okay=False))]):
        f = option(f)
    return f


def _change(config_file, endpoints, timeout_s, as_json, change: intents_.Change) -> None:
    """Check the request against the cluster (exit 2 naming what is wrong), record the intent, and
    wait, all within one --timeout, until the master applied it and the nodes report it."""
    settings = load_settings(config_file)
    action, _, target = change.what.partition(" ")
    with recorded(settings, action, target) as outcome:
        _apply(settings, endpoints, timeout_s, as_json, change, outcome)


def _apply(settings, endpoints, timeout_s, as_json, change: intents_.Change, outcome: Outcome) -> None:
    deadline = time.monotonic() + timeout_s
    what = change.what
    try:
        with zk_session(settings) as call:
            paths = ZkPaths(settings.node.cluster)
            before = cluster_info(settings, list(endpoints))
            problem = change.check(before, intents_.read_intents(call, paths))
            if problem is not None:
                fail(problem[1].replace("force it", "add --force"), EXIT_USAGE, as_json)
            intents, zxid = intents_.update_intents(call, paths, change.apply)
            applied = wait_applied(call, paths, zxid, max(0.0, deadline - time.monotonic()))
        info = None if applied is None else wait_for(settings, list(endpoints), lambda i: change.done(i, intents),
                                                     max(0.0, deadline - time.monotonic()))
    except Unavailable as e:
        fail(str(e), EXIT_UNAVAILABLE, as_json)
    report: dict[str, Any] = {"intent": what, "applied": info is not None, "drained": sorted(intents.drained),
              "pinned": {str(k): v for k, v in sorted(intents.pinned.items())}}
    if info is not None:
        report.update(epoch=info.epoch, shardsPerNode=_per_node(info))
    if as_json:
        click.echo(json.dumps(report, indent=2))
    elif info is not None:
        click.echo(f"{shown(what)}: applied at epoch {info.epoch}; shards per node: "
                   + ", ".join(f"{n} {c}" for n, c in report["shardsPerNode"].items()))
    else:
        waited = ("the master to write an assignment that includes it" if applied is None
                  else "the nodes to report the new assignment")
        master = f"the master is {before.master}" if before.master else "no master is running"
        click.echo(f"{shown(what)}: recorded, but not applied within --timeout {timeout_s:g} s (waited for {waited}; "
                   f"{master}); it stays recorded: see `delayq intents`", err=True)
    outcome.value = "applied" if info is not None else "recorded, not applied in time"
    if info is None:
        sys.exit(EXIT_TIMEOUT)


def _per_node(info: ttypes.ClusterInfo) -> dict[str, int]:
    counts = {n.nodeId: 0 for n in info.nodes}
    for node in info.assignment.values():
        counts[node] = counts.get(node, 0) + 1
    return dict(sorted(counts.items()))


@click.command()
@click.argument("node", type=NODE_ID)
@click.option("--force", is_flag=True, help="Record it for a node that is not a member (yet).")
@cluster_options
def drain(node: str, force: bool, endpoints, timeout_s, as_json, config_file) -> None:
    """Move every shard off NODE (it stays a member and keeps serving calls, but owns nothing)."""
    _change(config_file, endpoints, timeout_s, as_json, intents_.drain(node, force))


@click.command()
@click.argument("node")
@cluster_options
def undrain(node: str, endpoints, timeout_s, as_json, config_file) -> None:
    """Let NODE own shards again."""
    _change(config_file, endpoints, timeout_s, as_json, intents_.undrain(node))


@click.command()
@click.argument("shard", type=int)
@click.argument("node", type=NODE_ID)
@click.option("--force", is_flag=True, help="Record it for a node that is not a member (yet).")
@cluster_options
def pin(shard: int, node: str, force: bool, endpoints, timeout_s, as_json, config_file) -> None:
    """Keep SHARD on NODE (while NODE is a member), whatever the balance."""
    _change(config_file, endpoints, timeout_s, as_json, intents_.pin(shard, node, force))


@click.command()
@click.argument("shard", type=int)
@cluster_options
def unpin(shard: int, endpoints, timeout_s, as_json, config_file) -> None:
    """Let the master place SHARD again."""
    _change(config_file, endpoints, timeout_s, as_json, intents_.unpin(shard))


@click.command()
@cluster_options
def rebalance(endpoints, timeout_s, as_json, config_file) -> None:
    """Ask the master for a fresh balanced assignment (ignoring where shards are now)."""
    _change(config_file, endpoints, timeout_s, as_json, intents_.rebalance())


@click.command()
@cluster_options
def intents(endpoints, timeout_s, as_json, config_file) -> None:
    """Show what operators asked for: drained nodes, pinned shards, a reshard in progress."""
    settings = load_settings(config_file)
    try:
        with zk_session(settings) as call:
            i = intents_.read_intents(call, ZkPaths(settings.node.cluster))
    except Unavailable as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_UNAVAILABLE)
    out: dict[str, Any] = {"drained": sorted(i.drained), "pinned": {str(k): v for k, v in sorted(i.pinned.items())},
           "reshardTo": i.shards}
    click.echo(json.dumps(out, indent=2) if as_json else intents_text(out))


def intents_text(out: dict[str, Any]) -> str:
    """`delayq intents` without --json. A drained or pinned node's name is whatever was asked for
    (with --force, or before names were checked): printed with its control characters escaped."""
    return (f"drained: {', '.join(map(shown, out['drained'])) or 'none'}\n"
            f"pinned: {', '.join(f'{k}->{shown(v)}' for k, v in out['pinned'].items()) or 'none'}\n"
            f"reshard in progress: {out['reshardTo'] or 'no'}")


@click.command()
@click.option("--shards", "target", type=click.IntRange(1, 4096), required=True, help="The new shard count.")
@click.option("--dry-run", is_flag=True, help="Print the plan and change nothing.")
@click.option("--batch", type=click.IntRange(100, 100_000), default=5000, show_default=True)
@click.option("--margin-ms", type=click.IntRange(0, 3_600_000), default=60_000, show_default=True,
              help="Tasks due sooner than the window + 2 scans + this are left to fire where they are.")
@cluster_options
def reshard(target: int, dry_run: bool, batch: int, margin_ms: int, endpoints, timeout_s, as_json,
            config_file) -> None:
    """Change the cluster's shard count online; nodes keep firing, nothing is lost or fired twice.

    Give --timeout room for large tables and, when shrinking, for the look-ahead window (tasks due
    soon on the shards going away are left to fire first)."""
    settings = load_settings(config_file)
    if dry_run:
        _reshard(settings, target, dry_run, batch, margin_ms, endpoints, timeout_s, as_json, Outcome())
        return
    with recorded(settings, "reshard", str(target)) as outcome:
        _reshard(settings, target, dry_run, batch, margin_ms, endpoints, timeout_s, as_json, outcome)


def _reshard(settings, target: int, dry_run: bool, batch: int, margin_ms: int, endpoints, timeout_s, as_json,
             outcome: Outcome) -> None:
    from delayq.master.assignment import AssignmentInput, assign
    from delayq.clock import SYSTEM_CLOCK
    from delayq.db import make_engine
    from delayq.master.reshard import Conflict, Resharder, plan, refusal

    engine = make_engine(settings.mysql)
    try:
        p = plan(engine, target)
        info = cluster_info(settings, list(endpoints))
        with zk_session(settings) as call:
            paths = ZkPaths(settings.node.cluster)
            i = intents_.read_intents(call, paths)
            if refusal(i, target) is not None:
                raise click.UsageError(f"{refusal(i, target)} (--shards {i.shards})")
            if p.current == target and i.shards is None:
                # Audited as what it was: nothing changed (not a reshard that went "ok").
                outcome.value = "unchanged"
                click.echo(json.dumps({"from": target, "to": target, "changed": False}) if as_json else
                           f"nothing changed: the cluster has {target} shards already")
                return
            nodes = frozenset(n.nodeId for n in info.nodes)
            after = assign(AssignmentInput(target, nodes, dict(info.assignment),
                                           frozenset(i.drained) & nodes, {s: n for s, n in i.pinned.items() if s < target}))
            before_counts, after_counts = _per_node(info), dict[str, int]()
            for n in after.values():
                after_counts[n] = after_counts.get(n, 0) + 1
            report = {"from": p.current, "to": target, "rowsToMove": p.rows,
                      "rowsPerShard": {str(k): v for k, v in p.rows_per_shard.items()},
                      "shardsPerNodeBefore": before_counts, "shardsPerNodeAfter": dict(sorted(after_counts.items()))}
            if dry_run:
                click.echo(json.dumps(report, indent=2) if as_json else _plan_text(report))
                return
            resharder = Resharder(engine, call, paths, SYSTEM_CLOCK, window_ms=settings.scheduling.window_ms,
                                  scan_ms=settings.scheduling.scan_interval_ms, margin_ms=margin_ms, batch=batch)
            with click.progressbar(length=max(1, p.rows), label=f"resharding {p.current} -> {target}",
                                   file=sys.stderr, show_pos=True) as bar:
                moved = resharder.run(target, bar.update, timeout_s)
    except Unavailable as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_UNAVAILABLE)
    except TimeoutError as e:
        click.echo(f"error: {e}; run the same command again to resume", err=True)
        sys.exit(EXIT_TIMEOUT)
    except Conflict as e:
        raise click.UsageError(str(e)) from None
    finally:
        engine.dispose()
    report["moved"] = moved
    click.echo(json.dumps(report, indent=2) if as_json else f"resharded {p.current} -> {target}: moved {moved} tasks")


def _plan_text(r: dict) -> str:
    lines = [f"reshard {r['from']} -> {r['to']} shards: {r['rowsToMove']} live tasks to move"]
    lines += [f"  shard {s}: {n} rows out" for s, n in r["rowsPerShard"].items()]
    nodes = sorted(set(r["shardsPerNodeBefore"]) | set(r["shardsPerNodeAfter"]))
    lines.append(f"{'NODE':<20} {'BEFORE':>6} {'AFTER':>6}")
    lines += [f"{n:<20} {r['shardsPerNodeBefore'].get(n, 0):>6} {r['shardsPerNodeAfter'].get(n, 0):>6}"
              for n in nodes]
    return "\n".join(lines)
