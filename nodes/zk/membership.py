"""Membership: this node's ephemeral znode under /nodes, registered afresh on every new session.

Its data (endpoint, shards owned, DelayQueue size) is refreshed every few seconds so `cluster()`
on any node can show every node. `live` is how many members there are, this one included, as a
watch on /nodes last saw them (limits split between the nodes use it). Runs on the ZkSession's
thread; no thread of its own.

A member name carries the session it was made for, and is created only by that session: a refresh
that finds the znode gone may run after the session expired and kazoo made a new one, before the
"lost" event reaches this thread. Creating the old name then would leave a member no node follows
(an ephemeral znode of the new session), which the master would give shards that never fire.
"""
from __future__ import annotations

import json
import logging
from typing import Callable

from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError

from delayq import zkauth
from delayq.coordination import ZkSession
from delayq.zkpaths import ZkPaths, member_name

log = logging.getLogger(__name__)


class Membership:
    def __init__(self, session: ZkSession, paths: ZkPaths, node_id: str, endpoint: str,
                 stats: Callable[[], dict], refresh_s: float = 2.0):
        self._session, self._paths = session, paths
        self._node_id, self._endpoint = node_id, endpoint
        self._stats, self._refresh_s = stats, refresh_s
        self.member: str | None = None
        self._member_session: int | None = None      # the session `member` was named for
        self._published: bytes = b""
        self._generation = 0
        self.live = 1
        self._watching = 0              # the generation whose session watches /nodes
        session.subscribe(self._on_state)

    def _on_state(self, state: str, session_id: int | None) -> None:
        if state == "lost":
            self.member = None
        elif state == "connected" and session_id is not None:
            name = member_name(self._node_id, session_id)
            if name != self.member:
                self.member = name
                self._member_session = session_id
                self._generation += 1
                self._register(self._generation)

    def _data(self) -> bytes:
        return json.dumps({"node_id": self._node_id, "endpoint": self._endpoint, **self._stats()},
                          sort_keys=True).encode()

    def _register(self, generation: int) -> None:
        if generation != self._generation or self.member is None:
            return
        if self._session.session_id != self._member_session:
            return         # another session by now: its "connected" registers it under its own name
        data = self._data()
        path = self._paths.member(self.member)
        try:
            self._session.call("create", path, data, ephemeral=True, makepath=True)
            # The session may have changed between the check above and the create.
            stat = self._session.call("exists", path)
            if stat is not None and stat.ephemeralOwner != self._member_session:
                self._session.call("delete", path)
                log.info("not registering %s: made for a session that has ended", self.member)
                return
            log.info("registered as %s (%s)", self.member, self._endpoint)
        except NodeExistsError:
            pass           # the same session registered it already
        except KazooException as e:
            log.warning("registering %s failed: %s; retrying", self.member, zkauth.describe(e))
            self._session.post(lambda: self._register(generation), 1.0)
            return
        self._published = data
        self._session.post(lambda: self._refresh(generation), self._refresh_s)
        if self._watching != generation:
            self._watching = generation
            self._count(generation)

    def _count(self, generation: int) -> None:
        if generation != self._generation or self.member is None:
            return          # a watch of an older session: the next one sets its own
        try:
            members = self._session.call("get_children", self._paths.nodes,
                                         watch=self._session.watcher(lambda: self._count(generation)))
            self.live = max(1, len(members))
        except KazooException as e:
            log.debug("counting members failed: %s; retrying", zkauth.describe(e))
            self._session.post(lambda: self._count(generation), 1.0)

    def _refresh(self, generation: int) -> None:
        if generation != self._generation or self.member is None:
            return
        data = self._data()
        if data != self._published:
            try:
                self._session.call("set", self._paths.member(self.member), data)
                self._published = data
            except NoNodeError:
                self._register(generation)
                return
            except KazooException as e:
                log.debug("refreshing member data failed: %s", e)
        self._session.post(lambda: self._refresh(generation), self._refresh_s)
