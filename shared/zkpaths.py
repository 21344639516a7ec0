"""Every ZooKeeper path delayq uses, member names, and the assignment document.

    /delayq/<cluster>/nodes/<node_id>@<session>   ephemeral; data: endpoint, shard count, queue size
    /delayq/<cluster>/election/<member>__0000000007  ephemeral sequential; smallest sequence = master
    /delayq/<cluster>/assignment                  written by the master only: epoch, shard -> (member, epoch)
    /delayq/<cluster>/intents                     written by ops: drained nodes, pinned shards

A member name carries the ZooKeeper session id, so a restarted node (or one that lost its session)
is a new member: nothing it owned before is valid for it any more.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field


class ZkPaths:
    def __init__(self, cluster: str):
        self.root = f"/delayq/{cluster}"
        self.nodes = f"{self.root}/nodes"
        self.election = f"{self.root}/election"
        self.assignment = f"{self.root}/assignment"
        self.intents = f"{self.root}/intents"

    def member(self, name: str) -> str:
        return f"{self.nodes}/{name}"

    def candidate_prefix(self, member: str) -> str:
        return f"{self.election}/{member}__"


def candidate_order(name: str) -> int:
    """The sequence number ZooKeeper appended to an election candidate's name."""
    return int(name.rsplit("__", 1)[1])


def candidate_member(name: str) -> str:
    return name.rsplit("__", 1)[0]


MAX_NODE_ID = 128
# What ZooKeeper refuses in a znode's name besides "/" (its PathUtils.validatePath): control
# characters, and the UTF-16 ranges U+D800-U+F8FF and U+FFF0-U+FFFF, which in Java include every
# character beyond U+FFFF (a surrogate pair). Line separators are refused too (delayq.textrules).
_ZK_REFUSED = re.compile("[/\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\uf8ff\ufff0-\U0010ffff]")


def node_id_problem(node_id: str | None) -> str | None:
    """Why node_id cannot be a node's id, or None. A node's id names its member znode
    (`<node_id>@<session>` under nodes/), so it is what ZooKeeper takes as one name: 1 to 128
    characters, not "." or "..", none of them "/", a control character, a line separator, or in
    U+D800-U+F8FF or U+FFF0 and above. DELAYQ_NODE_ID is held to it (a node with another id could
    never join), and so is a node named to drain or pin."""
    if not node_id:
        return "is required"
    if len(node_id) > MAX_NODE_ID:
        return f"is {len(node_id)} characters long, at most {MAX_NODE_ID}"
    if node_id in (".", ".."):
        return f"must not be {node_id!r}"
    m = _ZK_REFUSED.search(node_id)
    if m is not None:
        return f"must not hold {m.group()!r} (U+{ord(m.group()):04X}): a node id is a ZooKeeper node's name"
    return None


def member_name(node_id: str, session_id: int) -> str:
    return f"{node_id}@{session_id:x}"


def node_of(member: str) -> str:
    return member.rpartition("@")[0] or member


@dataclass(frozen=True)
class Grant:
    member: str
    epoch: int          # the assignment epoch at which this member got the shard


@dataclass(frozen=True)
class AssignmentDoc:
    epoch: int
    shards: dict[int, Grant] = field(default_factory=dict)
    master: str = ""
    updated_ms: int = 0
    active: int = 0          # shards new tasks go to (0..active-1); the rest drain during a reshard
    rebalance: int = 0       # the last rebalance request applied
    intents_zxid: int = 0    # the version (mzxid) of the intents this assignment took into account

    def encode(self) -> bytes:
        return json.dumps({"epoch": self.epoch, "master": self.master, "updated_ms": self.updated_ms,
                           "active": self.active, "rebalance": self.rebalance, "intents_zxid": self.intents_zxid,
                           "shards": {str(s): [g.member, g.epoch] for s, g in sorted(self.shards.items())}},
                          separators=(",", ":")).encode()

    @staticmethod
    def decode(data: bytes | None) -> "AssignmentDoc":
        if not data:
            return AssignmentDoc(0)
        raw = json.loads(data)
        shards = {int(s): Grant(m, int(e)) for s, (m, e) in raw["shards"].items()}
        return AssignmentDoc(int(raw["epoch"]), shards, raw.get("master", ""), int(raw.get("updated_ms", 0)),
                             int(raw.get("active") or len(shards)), int(raw.get("rebalance", 0)),
                             int(raw.get("intents_zxid", 0)))

    def owned_by(self, member: str) -> dict[int, int]:
        """shard -> grant epoch of the shards this member holds."""
        return {s: g.epoch for s, g in self.shards.items() if g.member == member}

    def active_shards(self) -> list[int]:
        return list(range(self.active or len(self.shards)))


@dataclass(frozen=True)
class Intents:
    """What operators asked for; only the master acts on it (it writes the assignment)."""
    drained: frozenset[str] = frozenset()                  # node ids that must own nothing
    pinned: dict[int, str] = field(default_factory=dict)   # shard -> node id
    rebalance: int = 0                                     # bumped to ask for a fresh balanced assignment
    shards: int | None = None                              # a reshard in progress: the target count

    def encode(self) -> bytes:
        return json.dumps({"drained": sorted(self.drained), "rebalance": self.rebalance, "shards": self.shards,
                           "pinned": {str(s): n for s, n in sorted(self.pinned.items())}}).encode()

    @staticmethod
    def decode(data: bytes | None) -> "Intents":
        if not data:
            return Intents()
        raw = json.loads(data)
        return Intents(frozenset(raw.get("drained", [])), {int(s): n for s, n in raw.get("pinned", {}).items()},
                       int(raw.get("rebalance", 0)), raw.get("shards"))
