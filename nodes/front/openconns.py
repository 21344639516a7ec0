"""OpenConnections: the Thrift server's client connections, and what its selector watches on each.

It holds the rules that span connections: at `max_connections`, a new connection takes the place
of the unauthenticated one longest without a request (and with no call in progress nor a reply
unsent: `evicted`), or is refused when every connection has a call in progress or a client
identity: a new connection has none yet, and a flood of them must not push out the clients
working; a connection overdue
(delayq.nodes.front.connection: a first frame, a frame or a reply not done in time, or idle too
long) is closed at each sweep; each close is counted by `closed(reason)`.

Not thread-safe: the server's I/O thread alone uses it (delayq.nodes.front.server).
"""
from __future__ import annotations

import logging
import selectors
import socket
from typing import Callable

from delayq.nodes.front.connection import Connection

log = logging.getLogger(__name__)


class OpenConnections:
    def __init__(self, sel: selectors.BaseSelector, max_connections: int, closed: Callable[[str], None]):
        self._sel, self._max, self._closed = sel, max_connections, closed
        self._conns: dict[socket.socket, Connection] = {}

    def __len__(self) -> int:
        return len(self._conns)

    def __contains__(self, conn: Connection) -> bool:
        return conn.sock in self._conns

    def values(self) -> list[Connection]:
        return list(self._conns.values())

    def make_room(self, peer: object) -> bool:
        """Room for a connection from peer: at the limit, the unauthenticated one longest without a
        request gives way to it; False when none may (each has a call in progress, a reply unsent,
        or a client identity)."""
        if len(self._conns) < self._max:
            return True
        idle = [c for c in self._conns.values() if c.evictable and not c.authenticated]
        if not idle:
            return False
        victim = min(idle, key=lambda c: c.last)
        self.close(victim, f"{len(self._conns)} connections open, the longest idle gives way to {peer}", "evicted")
        return True

    def add(self, conn: Connection) -> None:
        self._conns[conn.sock] = conn
        self.watch(conn)

    def watch(self, conn: Connection) -> None:
        """Have the selector watch what conn waits for: its requests unless it is paused, the
        socket's room for its reply bytes while some are left."""
        events = ((0 if conn.paused else selectors.EVENT_READ)
                  | (selectors.EVENT_WRITE if conn.out or conn.want_write else 0))
        if events == conn.events:
            return
        if not conn.events:
            self._sel.register(conn.sock, events, conn)
        elif not events:
            self._sel.unregister(conn.sock)
        else:
            self._sel.modify(conn.sock, events, conn)
        conn.events = events

    def sweep(self, now: float) -> None:
        """Close every connection overdue by now."""
        for conn in list(self._conns.values()):
            overdue = conn.overdue(now)
            if overdue is not None:
                self.close(conn, *overdue)

    def close(self, conn: Connection, why: str | None, reason: str | None = None) -> None:
        if why:
            log.info("closing connection from %s: %s", conn.peer, why)
        if self._conns.pop(conn.sock, None) is not None:
            if conn.events:
                self._sel.unregister(conn.sock)
                conn.events = 0
            if reason:
                self._closed(reason)
        conn.close()

    def close_all(self) -> None:
        for conn in list(self._conns.values()):
            self.close(conn, None)
