"""cluster_info: the IDL's ClusterInfo for a ClusterView, this node's own figures taken live."""
from __future__ import annotations

from delayq.client.gen.delayq_thrift import ttypes
from delayq.nodes.zk.view import ClusterView
from delayq.zkpaths import node_of


def cluster_info(cluster: str, view: ClusterView, me: str | None, local: dict, shard_count: int) -> ttypes.ClusterInfo:
    """`local`: this node's figures as Membership publishes them (queue, clock_offset_ms,
    held_topics), fresher than what ZooKeeper holds for it."""
    nodes = []
    for member, published in view.members.items():
        info = {**published, **local} if member == me else published
        nodes.append(ttypes.NodeInfo(
            nodeId=node_of(member), endpoint=info.get("endpoint", ""),
            shardCount=sum(1 for m in view.assignment.values() if m == member),
            queueSize=int(info.get("queue", 0)), master=member == view.master,
            clockOffsetMs=_ms(info.get("clock_offset_ms")), heldTopics=info.get("held_topics") or {}))
    return ttypes.ClusterInfo(
        cluster=cluster, shardCount=len(view.assignment) or shard_count, epoch=view.epoch,
        master=node_of(view.master) if view.master else None, nodes=nodes,
        assignment={s: node_of(m) for s, m in view.assignment.items()})


def _ms(value: float | None) -> int | None:
    return None if value is None else int(round(value))
