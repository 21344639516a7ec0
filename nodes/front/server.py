"""ThriftServer: TBinaryProtocol over TFramedTransport on TCP. One I/O thread moves the bytes and
serves the submits; the other calls run on the inboxes' threads.

The I/O thread (a selector over the listener and every connection) accepts, reads and cuts
frames (delayq.nodes.front.connection), and hands each request to an inbox chosen by its method name
(delayq.nodes.front.inboxes): submits to the SubmitBatcher, which serves every submit waiting with one
transaction, everything else to the CallPool. An `inline` inbox (the SubmitBatcher) is served on
the I/O thread itself after each pass over the sockets, while its MySQL writes are quick; see
delayq.nodes.front.submits. The thread that served a call writes the reply straight to the socket; only what
the socket does not take at once goes back to the I/O thread. (A thread per connection costs about
ten thread switches per call under the GIL; a group of submits served this way costs none.)

One call per connection is served at a time, so replies keep the order of their requests; calls a
client pipelines wait behind it, and past `max_waiting` of them the connection is not read until
a reply makes room (delayq.nodes.front.connection). Closed, each counted by `closed(reason)`:
- a frame header above `max_frame`, before its body is read (`frame_too_large`); a request that
  cannot be read (`unreadable`); an error on the connection (`error`);
- a connection that sends nothing for `first_frame_timeout` after it was accepted
  (`first_frame_timeout`); a frame not whole `frame_timeout` after its first byte, however its
  bytes trickle in (`frame_timeout`); silent between calls for `idle_timeout` (`idle`); a reply not
  taken whole for `idle_timeout` (`reply_not_read`);
- a frame header above `max_unauthenticated_frame` on a connection with no client identity yet
  (`frame_too_large`): an authenticate call is small, and a peer that has not shown who it is
  has no business having megabytes read and decoded on this thread;
- at `max_connections` connections, a new one closes the unauthenticated one that has waited
  longest since its last request (and has no call in progress nor a reply unsent) to take its
  place (`evicted`); when every connection has a call in progress or a client identity, the new
  one is closed at once (`refused`), a clean refusal the client can retry elsewhere (the open connections and these rules:
  delayq.nodes.front.openconns). (A per-address limit was not chosen: the clients of a
  business system often come from a few addresses, or one behind a proxy, and the benchmark runs
  every client on one host; who has been silent longest is what tells a stuck client from a
  working one.)

Why not the thrift package's servers: docs/ARCHITECTURE.md, "Library internals". This server uses
only thrift's public API (the accelerated binary protocol and the generated Processor).

TLS (`tls`, a delayq.nodes.front.handshakes.TlsPort): each accepted socket is wrapped and its
handshake driven by the I/O thread without blocking; a client that stalls in it is closed after
`first_frame_timeout` like one that sends nothing (`tls_handshake_timeout`), one that fails it at
once (`tls_handshake`: plaintext sent to a TLS port, a certificate from another CA, ...). A
handshake's cryptography is the costly part of a connection, and anyone can start one: an address
past its budget of handshakes (HandshakeBudget, there with why a budget) has its new connections
closed as they are accepted, before any handshake and before one could take another's place at the
connection limit (`handshake_budget`; the address told to `tls.refused`). The frame cap, timeouts
and connection limit hold as without TLS. A verified client certificate's common name is noted on
the connection's caller (delayq.nodes.front.access looks it up at its first call).

`stop()` closes the listener and every connection and joins the I/O thread. The inboxes belong to
whoever made them (delayq.nodes.main), which stops them after the server.
"""
from __future__ import annotations

import logging
import selectors
import socket
import ssl
import threading
import time
from typing import Callable, Mapping, cast

from delayq.access.tls import common_name
from delayq.nodes.front.connection import Call, Connection, ConnectionLimits
from delayq.nodes.front.handshakes import TlsPort
from delayq.nodes.front.inboxes import Inbox, InlineInbox, method_of
from delayq.nodes.front.openconns import OpenConnections

log = logging.getLogger(__name__)

_CHUNK = 256 * 1024
_WAKE = object()
_RW = selectors.EVENT_READ | selectors.EVENT_WRITE


class ThriftServer:
    def __init__(self, inboxes: Mapping[str, Inbox], default: Inbox, host: str, port: int, limits: ConnectionLimits,
                 *, max_connections: int, closed: Callable[[str], None] = lambda reason: None,
                 tls: TlsPort | None = None):
        self._inboxes = {name.encode(): inbox for name, inbox in inboxes.items()}
        self._default = default
        self._host, self._port = host, port
        self._limits = limits
        self._closed = closed
        self._tls = tls
        self._sweep_every = min(0.25, limits.idle_timeout / 4, limits.frame_timeout / 4, limits.first_frame_timeout / 4)
        self._sel = selectors.DefaultSelector()
        self._conns = OpenConnections(self._sel, max_connections, closed)
        self._listener: socket.socket | None = None
        self._listening = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._attend: list[Connection] = []      # connections for the I/O thread: reply bytes left, resumed, dropped
        self._attend_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # An inbox with `inline` set is served on this thread too (see Inbox), and so has these calls.
        self._inline = [cast(InlineInbox, inbox) for inbox in
                        {id(inbox): inbox for inbox in [*inboxes.values(), default] if inbox.inline}.values()]
        for inbox in self._inline:
            inbox.bind(self._wake)

    @property
    def port(self) -> int:
        assert self._listener is not None
        return self._listener.getsockname()[1]

    @property
    def connections(self) -> int:
        """Client connections open (accepted and not yet closed)."""
        return len(self._conns)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        ls = socket.create_server((self._host, self._port), backlog=128, reuse_port=False)
        ls.setblocking(False)
        self._listener = ls
        self._sel.register(ls, selectors.EVENT_READ, None)
        self._listening = True
        for s in (self._wake_r, self._wake_w):
            s.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, _WAKE)
        self._thread = threading.Thread(target=self._run, name="thrift-io", daemon=True)
        self._thread.start()
        log.info("Thrift server listening on %s:%d", self._host, self.port)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake()
        if self._thread is not None:
            self._thread.join(timeout)

    # ---- called from the inboxes' threads -------------------------------------------------------

    def route(self, call: Call) -> None:
        self._inboxes.get(method_of(call.frame), self._default).put(call)

    def attend(self, conn: Connection) -> None:
        """The I/O thread is to look at conn: reply bytes left to send, reading to resume, or a
        drop to close."""
        with self._attend_lock:
            self._attend.append(conn)
        self._wake()

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass        # a wake-up is pending already, or the server has stopped

    # ---- the I/O thread -----------------------------------------------------------------------

    def _run(self) -> None:
        next_sweep = time.monotonic()
        try:
            while not self._stop.is_set():
                waiting = any(inbox.pending for inbox in self._inline)
                for key, mask in self._sel.select(timeout=0 if waiting else self._sweep_every):
                    if key.data is None:
                        self._accept()
                    elif key.data is _WAKE:
                        self._woken()
                    else:
                        self._serve(key.data, mask)
                for inbox in self._inline:
                    self._serve_inline(inbox)
                now = time.monotonic()
                if now >= next_sweep:
                    self._sweep(now)
                    next_sweep = now + self._sweep_every
        except Exception:  # noqa: BLE001 - logged; /healthz reports the server stopped
            log.exception("the Thrift server's I/O thread failed")
        finally:
            self._close_all()

    def _serve_inline(self, inbox: InlineInbox) -> None:
        """What this pass read for an inline inbox, as one group. The inbox answers or closes each
        call itself, whatever a call holds; were it to fail all the same, the calls it held would
        go unanswered (their clients time out), but the I/O thread goes on serving everyone else."""
        try:
            inbox.serve_pending()
        except Exception:  # noqa: BLE001 - logged; one failure must not stop every connection
            log.exception("serving the calls waiting for the I/O thread failed")

    def _accept(self) -> None:
        assert self._listener is not None
        while True:
            try:
                sock, peer = self._listener.accept()
            except (BlockingIOError, ConnectionAbortedError):
                return
            except OSError as e:
                # Out of file descriptors and the like: stop listening for a moment (the sweep resumes it).
                log.warning("accept failed: %s", e)
                self._sel.unregister(self._listener)
                self._listening = False
                return
            if self._tls is not None and not self._within_budget(peer):
                sock.close()
                continue
            if not self._conns.make_room(peer):
                log.warning("refusing a connection from %s: %d connections open, each authenticated or with a call "
                            "in progress",
                            peer, len(self._conns))
                self._closed("refused")
                sock.close()
                continue
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self._tls is not None:
                    sock = self._tls.context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            except OSError:
                sock.close()        # reset before it was served
                continue
            self._conns.add(Connection(self, sock, peer, self._limits, time.monotonic(), tls=self._tls is not None))

    def _within_budget(self, peer) -> bool:
        assert self._tls is not None
        budget = self._tls.budget
        if budget is None or budget.admit(str(peer[0]), time.monotonic()):
            return True
        # Not logged one by one: a peer looping on the port would fill the log. Counted, and
        # summarised per address in the audit log.
        self._closed("handshake_budget")
        self._tls.refused(str(peer[0]))
        return False

    def _serve(self, conn: Connection, mask: int) -> None:
        """One connection's events. Whatever goes wrong with it closes it, not the server."""
        try:
            if conn.handshaking:
                self._handshake(conn)
                return
            if mask & selectors.EVENT_WRITE:
                self._flush(conn)
            if mask & selectors.EVENT_READ and conn in self._conns:
                self._read(conn)
        except OSError as e:
            self._conns.close(conn, str(e), "error")
        except Exception:  # noqa: BLE001 - one connection must not take the server down
            log.exception("closing connection from %s", conn.peer)
            self._conns.close(conn, None, "error")

    def _handshake(self, conn: Connection) -> None:
        try:
            done = conn.handshake()
        except (ssl.SSLError, OSError) as e:
            self._conns.close(conn, f"TLS handshake failed: {getattr(e, 'reason', None) or e}", "tls_handshake")
            return
        self._conns.watch(conn)
        if done:
            cert = cast(ssl.SSLSocket, conn.sock).getpeercert()     # a TLS connection's socket
            if cert:
                conn.caller.certificate = common_name(cert)
            self._read(conn)        # the client's first request may have come with its last handshake bytes

    def _read(self, conn: Connection) -> None:
        while True:
            data = conn.recv(_CHUNK)
            if data is None:
                return
            if not data:
                self._conns.close(conn, *(conn.dropped or (None, None)))      # by the client, or by an inbox's drop()
                return
            bad = conn.feed(data, time.monotonic())
            if bad is not None:
                self._conns.close(conn, *bad)
                return
            if conn.paused:
                self._conns.watch(conn)       # not read until a reply makes room
                return
            if not conn.pending():
                return                  # else TLS holds decrypted bytes the selector cannot see

    def _woken(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except BlockingIOError:
            pass
        with self._attend_lock:
            conns, self._attend = self._attend, []
        now = time.monotonic()
        for conn in conns:
            if conn not in self._conns:
                continue
            if conn.dropped:
                self._conns.close(conn, *conn.dropped)
                continue
            try:
                conn.flush(now)
                bad = conn.feed(b"", now) if conn.inbuf and not conn.paused else None   # read before it paused
            except OSError as e:
                self._conns.close(conn, str(e), "error")
                continue
            if bad is not None:
                self._conns.close(conn, *bad)
                continue
            self._conns.watch(conn)
            if conn.pending() and not conn.paused:
                self._serve(conn, selectors.EVENT_READ)

    def _flush(self, conn: Connection) -> None:
        if conn.flush(time.monotonic()):
            self._conns.watch(conn)

    def _sweep(self, now: float) -> None:
        if not self._listening and self._listener is not None:
            self._sel.register(self._listener, selectors.EVENT_READ, None)
            self._listening = True
        self._conns.sweep(now)

    def _close_all(self) -> None:
        self._conns.close_all()
        if self._listener is not None:
            self._listener.close()
        self._sel.close()
        for s in (self._wake_r, self._wake_w):
            s.close()

