"""Rebalancer: the master's job. While this node is master it keeps the assignment right.

    members change / intents change / became master
        -> debounce (membership blips settle: wait `debounce_s` of quiet, at most `max_delay_s`)
        -> assign() over the live members (balanced +-1, sticky, pins, drains)
        -> new epoch = max(ZooKeeper epoch, MySQL epoch) + 1 for the shards that move (the
           assignment's epoch also rises when a shrinking reshard removed shards)
        -> end the MySQL connections of the nodes that left (delayq.store.connections): a node
           frozen inside a transaction would hold its locks on their shard and task rows
        -> write /assignment with a version check (a stale master's write fails)
        -> write the moved shards' (owner, epoch) to MySQL job_shard: from that commit on the old
           owner's claims fail, the new owner's succeed
A master that crashed between the two writes is repaired by the next master's first pass, which
also writes every grant of the current assignment that MySQL lacks.

Thread: one, "rebalancer", owned here; idle unless master. `stop()` ends it.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Collection

from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError

from delayq import zkauth
from delayq.clock import Clock
from delayq.coordination import ZkSession
from delayq.errors import Unavailable
from delayq.master.assignment import AssignmentInput, assign, moves
from delayq.store.epochs import ShardEpochs
from delayq.zkpaths import AssignmentDoc, Grant, Intents, ZkPaths, node_of

log = logging.getLogger(__name__)


class Rebalancer:
    def __init__(self, session: ZkSession, paths: ZkPaths, shards: ShardEpochs, clock: Clock,
                 me: Callable[[], str | None], *, debounce_s: float = 0.5, max_delay_s: float = 2.0,
                 end_connections: Callable[[Collection[str]], object] | None = None):
        """end_connections(node ids) ends the MySQL connections of nodes that left the cluster."""
        self._session, self._paths, self._shards, self._clock = session, paths, shards, clock
        self._me = me
        self._end_connections = end_connections
        self._debounce_s, self._max_delay_s = debounce_s, max_delay_s
        self._cond = threading.Condition()
        self._leader = False
        self._dirty_since: float | None = None
        self._last_change = 0.0
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="rebalancer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        self._thread.join(5)

    def set_leader(self, leader: bool) -> None:
        """Election callback (on the session thread): never blocks."""
        with self._cond:
            self._leader = leader
        if leader:
            self._session.post(self._watch_members)
            self._session.post(self._watch_intents)
            self.poke(now=True)

    def poke(self, now: bool = False) -> None:
        with self._cond:
            t = time.monotonic()
            if self._dirty_since is None:
                self._dirty_since = t
            self._last_change = t - (self._debounce_s if now else 0.0)
            self._cond.notify_all()

    def _watch_members(self) -> None:
        if self._leader:
            self._watch(lambda w: self._session.call("get_children", self._paths.nodes, watch=w), self._watch_members)

    def _watch_intents(self) -> None:
        if self._leader:
            self._watch(lambda w: self._session.call("exists", self._paths.intents, watch=w), self._watch_intents)

    def _watch(self, arm: Callable, again: Callable[[], None]) -> None:
        try:
            self._session.call("ensure_path", self._paths.nodes)
            def fired() -> None:
                self.poke()
                again()
            arm(self._session.watcher(fired))
            # A pass that read the members before the watch was armed has not seen what changed in
            # between (nodes joining while this one became master), and no watch will tell: pass again.
            self.poke()
        except KazooException as e:
            log.warning("master watch failed: %s; retrying", zkauth.describe(e))
            self._session.post(again, 1.0)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stop and not (self._leader and self._dirty_since is not None and self._settled()):
                    self._cond.wait(self._wait_time())
                if self._stop:
                    return
                self._dirty_since = None
            try:
                self.rebalance()
            except Exception as e:  # noqa: BLE001 - the master must keep trying, whatever failed
                if isinstance(e, (KazooException, Unavailable)):
                    log.warning("rebalance failed: %s; retrying in 1 s", zkauth.describe(e))
                else:
                    log.exception("rebalance failed; retrying in 1 s")
                with self._cond:
                    if self._dirty_since is None:
                        self._dirty_since = time.monotonic()
                    self._last_change = time.monotonic() + 1.0 - self._debounce_s

    def _settled(self) -> bool:
        t = time.monotonic()
        since = self._dirty_since
        return t - self._last_change >= self._debounce_s or (since is not None and t - since >= self._max_delay_s)

    def _wait_time(self) -> float | None:
        if not self._leader or self._dirty_since is None:
            return None
        t = time.monotonic()
        return max(0.01, min(self._last_change + self._debounce_s, self._dirty_since + self._max_delay_s) - t)

    def rebalance(self) -> AssignmentDoc | None:
        """One pass; returns the assignment written, or None when nothing had to move."""
        call = self._session.call
        me = self._me()
        if not self._leader or me is None:
            return None
        members = frozenset(call("get_children", self._paths.nodes))
        try:
            data, stat = call("get", self._paths.assignment)
            version = stat.version
        except NoNodeError:
            data, version = None, None
        current = AssignmentDoc.decode(data)
        intents_zxid = 0
        try:
            raw_intents, istat = call("get", self._paths.intents)
            intents_zxid = istat.mzxid
            intents = Intents.decode(raw_intents)
        except (NoNodeError, ValueError) as e:
            if isinstance(e, ValueError):
                log.warning("ignoring unreadable intents: %s", e)
            intents = Intents()
        stored = self._shards.read()
        shard_ids = sorted(stored)       # every shard row, including those a reshard is draining
        active = min(intents.shards, len(shard_ids)) if intents.shards else len(shard_ids)
        by_node = {node_of(m): m for m in sorted(members)}     # a restarted node: its newest session
        fresh = intents.rebalance > current.rebalance           # `delayq rebalance`: forget stickiness
        target = assign(AssignmentInput(
            shard_count=len(shard_ids), members=members,
            current={} if fresh else {s: g.member for s, g in current.shards.items()},
            drained=frozenset(by_node[n] for n in intents.drained if n in by_node),
            pinned={s: by_node[n] for s, n in intents.pinned.items() if n in by_node}))
        moved = moves({s: g.member for s, g in current.shards.items() if s < len(shard_ids)}, target)
        # A shard whose MySQL epoch ran ahead of its grant (e.g. a standalone node took it) is granted
        # again at the new epoch, or its owner's claims would keep failing.
        moved.update({s: (g.member, g.member) for s, g in current.shards.items()
                      if s in target and stored.get(s, (None, 0))[1] > g.epoch})
        # Shards a shrinking reshard removed (their job_shard rows are gone, so nothing can claim
        # under them): the owners change, so the assignment does too, and takes a new epoch.
        removed = sorted(s for s in current.shards if s >= len(shard_ids))
        if not moved and len(current.shards) == len(shard_ids) and active == current.active and not fresh \
                and intents_zxid == current.intents_zxid:
            self._repair(current, stored, set())
            return None
        # A new epoch whenever a shard changes hands, appears or goes; an intent that changes no
        # owner (an acknowledgement: intents_zxid, or the active count) keeps the epoch.
        epoch = max(current.epoch, self._shards.max_epoch()) + (1 if moved or removed else 0)
        doc = AssignmentDoc(epoch, {s: current.shards[s] if s not in moved else Grant(m, epoch)
                                    for s, m in target.items()}, master=me, updated_ms=self._clock.now_ms(),
                            active=active, rebalance=max(intents.rebalance, current.rebalance),
                            intents_zxid=intents_zxid)
        self._end_departed({g.member for g in current.shards.values()} - members, by_node)
        try:
            if version is None:
                call("create", self._paths.assignment, doc.encode(), makepath=True)
            else:
                call("set", self._paths.assignment, doc.encode(), version=version)
        except (BadVersionError, NodeExistsError):
            log.warning("the assignment changed under us (another master?): not applied")
            self.poke()
            return None
        # Every grant MySQL lacks, not only this pass's moves: a master that died between its two
        # writes left grants that only its successor can complete.
        self._repair(doc, stored, set(moved))
        per_node: dict[str, int] = {}
        for g in doc.shards.values():
            per_node[node_of(g.member)] = per_node.get(node_of(g.member), 0) + 1
        log.info("assignment epoch %d: moved %d shards %s%s; shards per node %s", epoch, len(moved),
                 sorted(moved), f", removed {removed}" if removed else "", dict(sorted(per_node.items())))
        return doc

    def _end_departed(self, owners: set[str], live: dict[str, str]) -> None:
        """End the MySQL connections of the nodes among these former owners that have no member
        now (a node back with a new session is going on, not frozen). Before the new owners hear
        of their shards, so that neither they nor the write of the epochs wait on a frozen node's
        locks; a failure leaves the write to time out and this pass to be tried again."""
        gone = {node_of(m) for m in owners} - set(live)
        if not gone or self._end_connections is None:
            return
        try:
            self._end_connections(gone)
        except Unavailable as e:
            log.warning("could not end the MySQL connections of departed nodes %s: %s", sorted(gone), e)

    def _repair(self, doc: AssignmentDoc, stored: dict[int, tuple[str | None, int]], moved: set[int]) -> None:
        """Write to MySQL every grant of the current assignment it lacks: this pass's moves, and
        any a master that died between its two writes left behind (the only ones worth a warning)."""
        missing = {s: (g.member, g.epoch) for s, g in doc.shards.items()
                   if stored.get(s, (None, -1)) != (g.member, g.epoch)}
        if missing:
            self._shards.grant(missing)
            left = sorted(set(missing) - moved)
            if left:
                log.warning("wrote %d shard grants a previous master left unwritten (shards %s) at epoch %d",
                            len(left), left, doc.epoch)
            log.debug("wrote %d shard grants in MySQL at epoch %d", len(missing), doc.epoch)
