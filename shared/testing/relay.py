"""Relay: a TCP relay on loopback between a node and a server it needs (MariaDB), that a test or a
benchmark cuts and restores, so that an outage of that server can be played for one node without
stopping the server the machine's other runs share.

    relay = Relay(("127.0.0.1", 3306))
    node = node_factory(DELAYQ_MYSQL_URL=relay.url(database.node_url))
    relay.cut()          # as the server stopping: every connection dropped, new ones refused
    relay.restore()      # the server answering again, on the same port
    relay.close()

States: OPEN (connections relayed) -> cut() -> CUT (the port refuses) -> restore() -> OPEN ...;
close() -> CLOSED. A connection whose upstream cannot be reached is closed at once, as the
server's own port would refuse it.

Threads: one accepting while OPEN, and two per relayed connection (one each way); all owned here:
cut() and close() close their sockets and join them.
"""
from __future__ import annotations

import contextlib
import socket
import threading

from sqlalchemy.engine import make_url

JOIN_S = 2.0


class Relay:
    def __init__(self, upstream: tuple[str, int], connect_timeout: float = 2.0):
        self._upstream, self._connect_timeout = upstream, connect_timeout
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._listener: socket.socket | None = None
        self.port = 0
        self._listen()

    def url(self, url: str) -> str:
        """A SQLAlchemy URL that reaches the same database through this relay."""
        return make_url(url).set(host="127.0.0.1", port=self.port).render_as_string(hide_password=False)

    @property
    def cut_off(self) -> bool:
        return self._listener is None

    def cut(self) -> None:
        """Drop every relayed connection and refuse new ones until restore()."""
        with self._lock:
            listener, self._listener = self._listener, None
            doomed, self._sockets = self._sockets, set()
            threads, self._threads = self._threads, []
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)     # wakes the accepting thread (close alone does not)
            listener.close()
        for s in doomed:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        for t in threads:
            t.join(JOIN_S)

    def restore(self) -> None:
        """Accept connections again, on the same port."""
        with self._lock:
            if self._listener is not None:
                return
        self._listen()

    def close(self) -> None:
        self.cut()

    def _listen(self) -> None:
        listener = socket.create_server(("127.0.0.1", self.port))      # SO_REUSEADDR: the same port again
        self.port = listener.getsockname()[1]
        with self._lock:
            self._listener = listener
        self._spawn(self._accept, listener, name="relay-accept")

    def _spawn(self, target, *args, name: str) -> None:
        t = threading.Thread(target=target, args=args, name=name, daemon=True)
        with self._lock:
            self._threads = [*(old for old in self._threads if old.is_alive()), t]
        t.start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:             # cut or closed
                return
            try:
                server = socket.create_connection(self._upstream, timeout=self._connect_timeout)
                server.settimeout(None)
            except OSError:             # the server itself is away: so is the relay
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:      # cut meanwhile
                    client.close()
                    server.close()
                    return
                self._sockets |= {client, server}
            self._spawn(self._pump, client, server, name="relay-up")
            self._spawn(self._pump, server, client, name="relay-down")

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        # One side closed: close both, so the other pump ends too.
        for s in (source, sink):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
        with self._lock:
            self._sockets -= {source, sink}
        source.close()
        sink.close()
