"""AssignmentFollower: applies the master's assignment to this node's Ownership.

    connected   read the assignment (and watch it); claim again if the session resumed
    assignment  re-read: shards granted to this member are owned at their grant epoch, others dropped
    suspended   stop claiming (ownership kept: the session may resume)
    lost        drop every shard (the master will give them to others, and maybe back to us later)

Runs on the ZkSession's thread; no thread of its own. MySQL fences every claim anyway, so a late
view here can only make claims fail, never dispatch a task twice.
"""
from __future__ import annotations

import logging
from typing import Callable

from kazoo.exceptions import KazooException, NoNodeError

from delayq import zkauth
from delayq.coordination import ZkSession
from delayq.nodes.cluster.ownership import Ownership
from delayq.zkpaths import AssignmentDoc, ZkPaths

log = logging.getLogger(__name__)


class AssignmentFollower:
    def __init__(self, session: ZkSession, paths: ZkPaths, ownership: Ownership, member: Callable[[], str | None],
                 all_shards: Callable[[], list[int]]):
        self._session, self._paths, self._ownership = session, paths, ownership
        self._member, self._all_shards = member, all_shards
        self.epoch = 0
        session.subscribe(self._on_state)

    def _on_state(self, state: str, session_id: int | None) -> None:
        if state == "suspended":
            self._ownership.set_claimable(False)
        elif state == "lost":
            self._ownership.set_claimable(False)
            self._ownership.set({}, self._ownership.all_shards())
        elif state == "connected":
            self._ownership.set_claimable(True)
            self._read()

    def _read(self) -> None:
        try:
            data, _ = self._session.call("get", self._paths.assignment, watch=self._session.watcher(self._read))
        except NoNodeError:
            # No master has written one yet: watch for its creation.
            if self._session.call("exists", self._paths.assignment, watch=self._session.watcher(self._read)):
                self._session.post(self._read)
            return
        except KazooException as e:
            log.warning("reading the assignment failed: %s; retrying", zkauth.describe(e))
            self._session.post(self._read, 1.0)
            return
        doc = AssignmentDoc.decode(data)
        member = self._member()
        mine = doc.owned_by(member) if member else {}
        before = self._ownership.shards()
        self.epoch = doc.epoch
        self._ownership.set(mine, doc.active_shards() or self._all_shards(), owner=member,
                            assigned=len(doc.shards) or None)
        gained, lost = set(mine) - before, before - set(mine)
        if gained or lost:
            log.info("assignment epoch %d: %d shards; gained %s, lost %s", doc.epoch, len(mine),
                     sorted(gained), sorted(lost))
