"""Intents: what operators and admin clients ask of the cluster's layout (drain, undrain, pin, unpin,
rebalance, a reshard's target), kept in ZooKeeper at /delayq/<cluster>/intents. Only the master acts
on them (delayq.master.rebalancer writes the assignment); everyone else records them here.

Used by the `delayq` command (delayq.ops.cluster) and by a node serving an admin call
(delayq.nodes.front.admin): each change is checked against the cluster as it is, refused with a
reason that names what exists, and written with a version check.

`call(method, *args, **kwargs)` is a kazoo call with a deadline (ZkSession.call, or `kazoo_call`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from delayq.client.gen.delayq_thrift import ttypes
from delayq.errors import Unavailable
from delayq.zkpaths import Intents, ZkPaths, node_id_problem

Call = Callable[..., Any]


def kazoo_call(zk: KazooClient, timeout_s: float) -> Call:
    def call(method: str, *args, **kwargs):
        try:
            return getattr(zk, f"{method}_async")(*args, **kwargs).get(timeout=timeout_s)
        except KazooTimeoutError:
            raise Unavailable(f"ZooKeeper did not answer {method} within {timeout_s:g} s") from None
    return call


def read_intents(call: Call, paths: ZkPaths) -> Intents:
    try:
        return Intents.decode(call("get", paths.intents)[0])
    except NoNodeError:
        return Intents()


def update_intents(call: Call, paths: ZkPaths, change: Callable[[Intents], Intents]) -> tuple[Intents, int]:
    """Apply `change` to the intents with a version check, retrying when someone else wrote first.
    Returns the new intents and their zxid, which the master echoes once it has applied them."""
    while True:
        try:
            data, stat = call("get", paths.intents)
            version = stat.version
        except NoNodeError:
            data, version = None, None
        new = change(Intents.decode(data))
        try:
            if version is None:
                call("create", paths.intents, new.encode(), makepath=True)
                return new, call("exists", paths.intents).mzxid
            return new, call("set", paths.intents, new.encode(), version=version).mzxid
        except (BadVersionError, NodeExistsError):
            continue


@dataclass(frozen=True)
class Change:
    what: str                                                       # e.g. "drain n2"
    apply: Callable[[Intents], Intents]
    check: Callable[[ttypes.ClusterInfo, Intents], tuple[str, str] | None]   # (argument, why) it is refused
    done: Callable[[ttypes.ClusterInfo, Intents], bool]             # the cluster shows it applied


def members(info: ttypes.ClusterInfo) -> set[str]:
    return {n.nodeId for n in info.nodes}


MAX_DRAINED = 1000      # nodes drained at once: the intents znode stays far below ZooKeeper's 1 MB


def _unknown_node(node: str, info: ttypes.ClusterInfo, force: bool) -> tuple[str, str] | None:
    # A name no node can have is refused even with force: no node could ever join as it.
    problem = node_id_problem(node)
    if problem is not None:
        return "nodeId", problem
    if force or node in members(info):
        return None
    return "nodeId", (f"{node!r} is not a member of cluster {info.cluster!r} "
                      f"(members: {', '.join(sorted(members(info)))}); force it for a node that will join later")


def _problem_or(node: str, reason: str) -> str:
    problem = node_id_problem(node)
    return reason if problem is None else problem


def _shard_out_of_range(shard: int, info: ttypes.ClusterInfo) -> tuple[str, str] | None:
    if 0 <= shard < info.shardCount:
        return None
    return "shard", f"shard {shard} does not exist: cluster {info.cluster!r} has shards 0-{info.shardCount - 1}"


def drain(node: str, force: bool = False) -> Change:
    """Move every shard off the node (it stays a member and keeps serving calls)."""
    return Change(f"drain {node}", lambda i: dataclasses.replace(i, drained=i.drained | {node}),
                  lambda info, i: _unknown_node(node, info, force) or (
                      ("nodeId", f"{len(i.drained)} nodes are drained already, at most {MAX_DRAINED}")
                      if node not in i.drained and len(i.drained) >= MAX_DRAINED else None),
                  # Pins win over a drain: a shard pinned to the node stays.
                  lambda info, i: all(i.pinned.get(s) == node for s, n in info.assignment.items() if n == node))


def undrain(node: str) -> Change:
    return Change(f"undrain {node}", lambda i: dataclasses.replace(i, drained=i.drained - {node}),
                  # A drained name is taken whatever it is: one recorded before names were checked
                  # can still be undrained.
                  lambda info, i: None if node in i.drained else
                  ("nodeId", _problem_or(node, f"{node!r} is not drained "
                                               f"(drained: {', '.join(sorted(i.drained)) or 'none'})")),
                  lambda info, i: node in info.assignment.values() or node not in members(info))


def pin(shard: int, node: str, force: bool = False) -> Change:
    return Change(f"pin {shard} {node}", lambda i: dataclasses.replace(i, pinned={**i.pinned, shard: node}),
                  lambda info, i: _shard_out_of_range(shard, info) or _unknown_node(node, info, force),
                  # For a node not (yet) a member, recorded is all there is to wait for.
                  lambda info, i: info.assignment.get(shard) == node or node not in members(info))


def unpin(shard: int) -> Change:
    return Change(f"unpin {shard}",
                  lambda i: dataclasses.replace(i, pinned={k: v for k, v in i.pinned.items() if k != shard}),
                  lambda info, i: None if shard in i.pinned else
                  ("shard", f"shard {shard} is not pinned (pinned: {', '.join(str(k) for k in sorted(i.pinned)) or 'none'})"),
                  lambda info, i: True)


def rebalance() -> Change:
    return Change("rebalance", lambda i: dataclasses.replace(i, rebalance=i.rebalance + 1),
                  lambda info, i: None, lambda info, i: True)
