"""Membership: a member name is created only by the session it was named for (a refresh that finds
the znode gone after the session expired must not bring the old name back on the new session)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from kazoo.exceptions import NoNodeError, NodeExistsError

from delayq.nodes.zk.membership import Membership
from delayq.zkpaths import ZkPaths, member_name


@dataclass
class Stat:
    ephemeralOwner: int


class FakeSession:
    """The parts of ZkSession Membership uses: znodes as a dict of path -> owning session; posted
    work runs when the test says."""

    def __init__(self, session_id: int):
        self.session_id: int | None = session_id
        self.znodes: dict[str, int] = {}
        self.posted: list[Callable[[], None]] = []
        self.listener: Callable[[str, int | None], None] | None = None

    def subscribe(self, listener) -> None:
        self.listener = listener

    def post(self, fn, delay: float = 0.0) -> None:
        self.posted.append(fn)

    def watcher(self, fn):
        return lambda _event: None

    def call(self, method: str, *args, **kwargs):
        path = args[0] if args else None
        if method == "create":
            if path in self.znodes:
                raise NodeExistsError()
            self.znodes[path] = self.session_id
        elif method == "exists":
            return Stat(self.znodes[path]) if path in self.znodes else None
        elif method == "delete":
            self.znodes.pop(path, None)
        elif method == "set":
            if path not in self.znodes:
                raise NoNodeError()
        elif method == "get_children":
            return [p.rpartition("/")[2] for p in self.znodes]

    def expire(self, new_session: int) -> None:
        """The old session's ephemerals are gone and kazoo holds a new session, before the state
        events reach the session thread."""
        self.znodes = {p: s for p, s in self.znodes.items() if s != self.session_id}
        self.session_id = new_session


def members(session: FakeSession) -> list[str]:
    return sorted(p.rpartition("/")[2] for p in session.znodes)


def test_a_refresh_after_the_session_expired_does_not_bring_the_old_name_back():
    session = FakeSession(0x10)
    paths = ZkPaths("c")
    m = Membership(session, paths, "n3", "127.0.0.1:9090", stats=lambda: {"n": len(session.posted)})
    assert session.listener is not None
    session.listener("connected", 0x10)
    assert members(session) == [member_name("n3", 0x10)]
    session.expire(0x20)
    # The periodic refresh finds the znode gone before "lost" and "connected" arrive.
    refresh = session.posted[0]
    refresh()
    assert members(session) == []
    session.listener("lost", None)
    session.listener("connected", 0x20)
    assert members(session) == [member_name("n3", 0x20)]
    assert m.member == member_name("n3", 0x20)


def test_a_name_created_by_a_newer_session_is_deleted_again():
    session = FakeSession(0x10)
    m = Membership(session, ZkPaths("c"), "n3", "127.0.0.1:9090", stats=lambda: {})
    assert session.listener is not None
    session.listener("connected", 0x10)
    old = m.member
    session.znodes.clear()
    # The session changes between the check and the create: the create lands on the new one.
    real_call = session.call

    def call(method, *args, **kwargs):
        if method == "create":
            session.session_id = 0x20
        return real_call(method, *args, **kwargs)
    session.call = call   # type: ignore[method-assign]
    m._register(m._generation)
    assert old not in members(session)
