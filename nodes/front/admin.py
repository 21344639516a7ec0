"""AdminCalls: the Thrift calls that change the cluster rather than tasks, each for a client holding
`admin`: the cluster as this node sees it (cluster), the layout (drain, undrain, pin, unpin, rebalance, intents, reshard), redrive, discard, and clients (add,
grant, revoke, rotate, list). They do what the operator's `delayq` commands do, through the same
code (delayq.master.intents, delayq.master.reshard, delayq.store.maintenance, delayq.store.clients),
so an admin needs a token, not MySQL and ZooKeeper credentials; each is recorded in the audit log
(delayq.nodes.front.audit).

A layout change returns once recorded in ZooKeeper; the master applies it within a moment
(cluster() shows it). A reshard runs on the node that received it (delayq.master.reshard.ReshardJob)
and the call returns at once: calling again with the same count reports its progress.

Runs on the CallPool's threads, like delayq.nodes.front.handler.Handler; front.service.Service is
the one object the generated Processor calls, and names which of the two serves each call.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator

from kazoo.exceptions import KazooException
from sqlalchemy import Engine

from delayq import errors
from delayq.access.grants import Permission, check_grant
from delayq.access.tokens import check_name
from delayq.client.gen.delayq_thrift import ttypes
from delayq.clock import Clock
from delayq.master import intents as layout
from delayq.master.reshard import Conflict, Progress, ReshardJob, claim
from delayq.nodes.front.access import Access
from delayq.nodes.front.caller import current
from delayq.nodes.front.errors import CallAnswers, declared
from delayq.nodes.validation import check_task_id
from delayq.store import maintenance
from delayq.store.clients import ClientStore, NoSuchClient
from delayq.zkpaths import Intents, ZkPaths, node_id_problem

MAX_REDRIVE_IDS, REDRIVE_BATCH, REDRIVE_BATCHES = 500, 500, 10


class AdminCalls:
    def __init__(self, access: Access, answers: CallAnswers, clock: Clock, engine: Engine, clients: ClientStore, *,
                 cluster_info: Callable[[], ttypes.ClusterInfo], zk: layout.Call | None = None,
                 paths: ZkPaths | None = None, reshards: ReshardJob | None = None):
        self._access, self.answers, self._clock = access, answers, clock
        self._engine, self._clients = engine, clients
        self._cluster_info, self._zk, self._paths = cluster_info, zk, paths
        self.reshards = reshards         # owned by the node, which stops it

    def _admin(self) -> None:
        self._access.require(current(), Permission.ADMIN)

    # ---- the cluster's layout -----------------------------------------------------------------

    @declared
    def cluster(self) -> ttypes.ClusterInfo:
        self._admin()
        return self._cluster_info()

    @declared
    def drain(self, nodeId: str, force: bool) -> ttypes.Intents:
        self._admin()
        return self._change(layout.drain(_node(nodeId), bool(force)))

    @declared
    def undrain(self, nodeId: str) -> ttypes.Intents:
        self._admin()
        return self._change(layout.undrain(_drained(nodeId)))

    @declared
    def pin(self, shard: int, nodeId: str, force: bool) -> ttypes.Intents:
        self._admin()
        return self._change(layout.pin(_shard(shard), _node(nodeId), bool(force)))

    @declared
    def unpin(self, shard: int) -> ttypes.Intents:
        self._admin()
        return self._change(layout.unpin(_shard(shard)))

    @declared
    def rebalance(self) -> ttypes.Intents:
        self._admin()
        return self._change(layout.rebalance())

    @declared
    def intents(self) -> ttypes.Intents:
        self._admin()
        with self._zookeeper() as (call, paths):
            return _as_thrift(layout.read_intents(call, paths))

    def _change(self, change: layout.Change) -> ttypes.Intents:
        with self._zookeeper() as (call, paths):
            problem = change.check(self._cluster_info(), layout.read_intents(call, paths))
            if problem is not None:
                raise errors.InvalidRequest(*problem)
            return _as_thrift(layout.update_intents(call, paths, change.apply)[0])

    @declared
    def reshard(self, shards: int) -> ttypes.ReshardStatus:
        self._admin()
        if shards is None or not 1 <= shards <= 4096:
            raise errors.InvalidRequest("shards", "must be 1 to 4096")
        with self._zookeeper() as (call, paths):
            assert self.reshards is not None      # a node with ZooKeeper has its reshard job
            last = self.reshards.progress
            if last is not None and last.running and last.target == shards:
                return _status(last, started=False)      # a look at the progress: nothing to write
            current = self._cluster_info().shardCount
            if layout.read_intents(call, paths).shards is None and current == shards:
                # Nothing to do, or this node's run to it has just finished.
                done = last if last is not None and last.target == shards else Progress(current, shards, False, 0)
                return _status(done, started=False)
            try:
                claim(call, paths, shards)        # recorded before the run starts: a second target is refused
            except Conflict as e:
                raise errors.InvalidRequest("shards", str(e)) from None
        return _status(*self.reshards.start(current, shards))

    @contextlib.contextmanager
    def _zookeeper(self) -> Iterator[tuple[layout.Call, ZkPaths]]:
        """ZooKeeper's call and the cluster's paths, which a node with ZooKeeper has both of."""
        if self._zk is None or self._paths is None:
            raise errors.InvalidRequest("cluster", "runs without ZooKeeper (DELAYQ_ZK_ENABLED=false): "
                                        "there is no master to drain, pin or reshard")
        try:
            yield self._zk, self._paths
        except KazooException as e:
            raise errors.Unavailable(f"ZooKeeper: {type(e).__name__}") from None

    # ---- redrive ------------------------------------------------------------------------------

    @declared
    def redrive(self, filter: ttypes.RedriveFilter) -> ttypes.RedriveResult:
        self._admin()
        f = _task_filter(filter)
        after = filter.afterTaskId or None
        if after is not None:
            _checked_id("afterTaskId", after)
        moved, last, more = 0, None, False
        held: dict[str, str] = {}
        for batches, b in enumerate(maintenance.redrive(self._engine, f, self._clock.now_ms(), batch=REDRIVE_BATCH,
                                                        after=after), 1):
            moved, last = moved + len(b.redriven), b.last
            held.update(b.held)
            if batches == REDRIVE_BATCHES:
                more = b.read == REDRIVE_BATCH
                break
        # A client that does not page (afterTaskId unset: one of an earlier version, which calls
        # again from the start while `more`) is told of more only when this call redrove some: the
        # tasks left FAILED, their keys held, would otherwise be read again on every call, for ever.
        if filter.afterTaskId is None and moved == 0:
            more = False
        return ttypes.RedriveResult(redriven=moved, more=more, keyHeld=held, lastTaskId=last)

    @declared
    def discard(self, taskIds: list[str] | None) -> int:
        self._admin()
        ids = tuple(taskIds or ())
        if not ids:
            raise errors.InvalidRequest("taskIds", "name the FAILED tasks to discard")
        _task_filter(ttypes.RedriveFilter(taskIds=list(ids)))       # the same checks of the ids as redrive
        return maintenance.discard(self._engine, ids)

    # ---- clients ------------------------------------------------------------------------------

    @declared
    def addClient(self, name: str, grants: list[ttypes.Grant] | None, certificateOnly: bool) -> str:
        self._admin()
        parsed = tuple(_grant(g) for g in grants or ())
        with _checked(name):
            return self._clients.add(name, token=not certificateOnly, grants=parsed) or ""

    @declared
    def grantClient(self, name: str, grant: ttypes.Grant) -> None:
        self._admin()
        parsed = _grant(grant)
        with _checked(name):
            self._clients.grant(name, *parsed)

    @declared
    def revokeClient(self, name: str, grant: ttypes.Grant | None) -> None:
        self._admin()
        parsed = None if grant is None else _grant(grant)
        with _checked(name):
            if parsed is None:
                self._clients.revoke(name)
                return
            held = self._clients.ungrant(name, *parsed)
        if not held:
            raise errors.InvalidRequest("grant", f"{name!r} does not hold {parsed[0]}:{parsed[1]}")

    @declared
    def rotateClient(self, name: str) -> str:
        self._admin()
        with _checked(name):
            return self._clients.rotate(name)

    @declared
    def listClients(self) -> list[ttypes.ClientInfo]:
        self._admin()
        return [ttypes.ClientInfo(name=c.name, hasToken=c.token, revoked=c.revoked, tenant=c.tenant,
                                  grants=[ttypes.Grant(permission=p, pattern=pat) for p, pat in c.grants],
                                  updatedAtMs=c.updated_ms)
                for c in self._clients.list()]


def _status(p: Progress, started: bool) -> ttypes.ReshardStatus:
    return ttypes.ReshardStatus(fromShards=p.current, toShards=p.target, running=p.running, moved=p.moved,
                                error=p.error, started=started)


def _as_thrift(i: Intents) -> ttypes.Intents:
    return ttypes.Intents(drained=sorted(i.drained), pinned=dict(sorted(i.pinned.items())), reshardTo=i.shards)


def _node(node_id: str | None) -> str:
    """A node to drain or pin: a name a node can have (delayq.zkpaths.node_id_problem)."""
    problem = node_id_problem(node_id)
    if problem is not None:
        raise errors.InvalidRequest("nodeId", problem)
    assert node_id is not None
    return node_id


def _drained(node_id: str | None) -> str:
    """A node to undrain: any name that is drained (one drained before names were checked too);
    layout.undrain refuses one that is not, naming what is wrong with it."""
    if node_id is None:
        raise errors.InvalidRequest("nodeId", "is required")
    return node_id


def _shard(shard: int | None) -> int:
    if shard is None:
        raise errors.InvalidRequest("shard", "is required")
    return shard


def _grant(g: ttypes.Grant | None) -> tuple[str, str]:
    if g is None:
        raise errors.InvalidRequest("grant", "is required")
    try:
        perm, pattern = check_grant(g.permission, g.pattern)
    except ValueError as e:
        raise errors.InvalidRequest("grant", str(e)) from None
    return perm.value, pattern


@contextlib.contextmanager
def _checked(name: str | None) -> Iterator[None]:
    """The name checked first; then the client store's refusals (a client that exists already, or
    none of that name) as InvalidRequest("name")."""
    try:
        check_name(name)
        yield
    except (NoSuchClient, ValueError) as e:
        raise errors.InvalidRequest("name", str(e)) from None


def _task_filter(f: ttypes.RedriveFilter | None) -> maintenance.TaskFilter:
    if f is None or not (f.topic or f.taskIds):
        raise errors.InvalidRequest("filter", "name the tasks: a topic, or task ids")
    ids = tuple(f.taskIds or ())
    if len(ids) > MAX_REDRIVE_IDS:
        raise errors.InvalidRequest("taskIds", f"holds {len(ids)} ids, at most {MAX_REDRIVE_IDS} allowed")
    for i, task_id in enumerate(ids):
        _checked_id(f"taskIds[{i}]", task_id)
    return maintenance.TaskFilter(ids, f.topic or None, f.sinceMs, f.untilMs)


def _checked_id(field: str, task_id: str) -> None:
    try:
        check_task_id(task_id)
    except errors.InvalidTask as e:
        raise errors.InvalidRequest(field, e.reason) from None
