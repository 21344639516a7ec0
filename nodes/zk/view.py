"""read_view: the cluster as ZooKeeper shows it — members and what each last published, the master,
the assignment — for the Thrift `cluster()` call (which `delayq status` makes). Read-only; one call per znode."""
from __future__ import annotations

import dataclasses
import json

from kazoo.exceptions import KazooException, NoNodeError

from delayq.coordination import ZkSession
from delayq.errors import Unavailable
from delayq.zkpaths import AssignmentDoc, ZkPaths, candidate_member, candidate_order


@dataclasses.dataclass(frozen=True)
class ClusterView:
    epoch: int
    master: str | None                  # member name of the elected master
    assignment: dict[int, str]          # shard -> member
    members: dict[str, dict]            # member -> the data it published (endpoint, queue, ...)


def read_view(zk: ZkSession, paths: ZkPaths) -> ClusterView:
    call = zk.call
    try:
        names = sorted(call("get_children", paths.nodes))
        candidates = sorted(call("get_children", paths.election), key=candidate_order)
        try:
            doc = AssignmentDoc.decode(call("get", paths.assignment)[0])
        except NoNodeError:
            doc = AssignmentDoc(0)
        members = {}
        for m in names:
            try:
                members[m] = json.loads(call("get", paths.member(m))[0] or b"{}")
            except NoNodeError:
                continue        # left between the listing and the read
    except KazooException as e:
        raise Unavailable(f"ZooKeeper: {e!r}") from None
    return ClusterView(epoch=doc.epoch, master=candidate_member(candidates[0]) if candidates else None,
                       assignment={s: g.member for s, g in doc.shards.items()}, members=members)
