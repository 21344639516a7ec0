"""Election: ZooKeeper's leader-election recipe, each candidate watching only its predecessor.

Each node creates an ephemeral sequential candidate under /election, named after its member (so a
create retried after a lost connection finds the first one); the smallest sequence is the
master; every other node watches only its immediate predecessor (no herd effect) and checks again
when that one goes. A node that loses its session stops being master at once (its candidate is
gone with the session) and joins again with the next session.

    election = Election(session, paths, member=lambda: membership.member, on_change=rebalancer.set_leader)

Runs on the ZkSession's thread; no thread of its own. `on_change(is_leader)` must not block.
"""
from __future__ import annotations

import logging
from typing import Callable

from kazoo.exceptions import KazooException

from delayq import zkauth
from delayq.coordination import ZkSession
from delayq.zkpaths import ZkPaths, candidate_member, candidate_order

log = logging.getLogger(__name__)


class Election:
    def __init__(self, session: ZkSession, paths: ZkPaths, member: Callable[[], str | None],
                 on_change: Callable[[bool], None]):
        self._session, self._paths = session, paths
        self._member, self._on_change = member, on_change
        self._candidate: str | None = None     # our znode's name, e.g. n_0000000007
        self._session_id: int | None = None
        self.leader = False
        session.subscribe(self._on_state)

    def _on_state(self, state: str, session_id: int | None) -> None:
        if state == "lost":
            self._candidate = None
            self._session_id = None
            self._set_leader(False)
        elif state == "connected" and session_id != self._session_id:
            self._session_id = session_id
            self._join()

    def _join(self) -> None:
        member = self._member()
        if member is None:
            return
        try:
            # A create that failed with ConnectionLoss may have happened: adopt it rather than
            # leave an orphan of our own session in front of us for good.
            self._session.call("ensure_path", self._paths.election)
            ours = sorted((c for c in self._session.call("get_children", self._paths.election)
                           if candidate_member(c) == member), key=candidate_order)
            if ours:
                self._candidate = ours[0]
                for extra in ours[1:]:
                    self._session.call("delete", f"{self._paths.election}/{extra}")
            else:
                path = self._session.call("create", self._paths.candidate_prefix(member), member.encode(),
                                                   ephemeral=True, sequence=True)
                self._candidate = path.rsplit("/", 1)[1]
        except KazooException as e:
            log.warning("joining the election failed: %s; retrying", zkauth.describe(e))
            self._session.post(self._join, 1.0)
            return
        self.check()

    def check(self) -> None:
        if self._candidate is None:
            return
        try:
            candidates = sorted(self._session.call("get_children", self._paths.election), key=candidate_order)
            if self._candidate not in candidates:
                return          # our session is going; "lost" follows and we join again
            index = candidates.index(self._candidate)
            if index == 0:
                self._set_leader(True)
                return
            self._set_leader(False)
            predecessor = f"{self._paths.election}/{candidates[index - 1]}"
            if self._session.call("exists", predecessor, watch=self._session.watcher(self.check)) is None:
                self._session.post(self.check)   # it went between the two calls
        except KazooException as e:
            log.warning("election check failed: %s; retrying", zkauth.describe(e))
            self._session.post(self.check, 1.0)

    def _set_leader(self, leader: bool) -> None:
        if leader != self.leader:
            self.leader = leader
            log.info("%s master", "became" if leader else "no longer")
            self._on_change(leader)
