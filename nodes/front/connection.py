"""Connection: one client connection of the Thrift server, and Call, one request read from it.

The server's I/O thread reads the connection and cuts its frames (`feed`); any thread that served
a call replies on it (`Call.reply`). A connection has one call served at a time, so its replies go
back in the order of its requests; the frames a client pipelines behind that call wait here, up to
`max_waiting` of them and `max_frame` bytes (ConnectionLimits). Past that the connection is
*paused*: the I/O thread stops reading it (its bytes wait in the socket, and TCP slows the client
down) until a reply makes room and asks the server to attend to it (`ThriftServer.attend`).

Over TLS the socket is an ssl.SSLSocket: the I/O thread drives its handshake (`handshake`) before
any frame, and every read and write of it is made under `lock`, since OpenSSL does not allow one
TLS connection to be read and written by two threads at once.

States the server reads to close it (`overdue`): handshaking (TLS not yet set up), fresh (nothing received since it was accepted),
inside a frame (part of a frame received), idle (between calls), serving (a call of its own in
progress, or paused), and whether reply bytes are waiting for the client to read them.
"""
from __future__ import annotations

import collections
import socket
import ssl
import struct
import threading
import time
from dataclasses import dataclass
from typing import Protocol, cast

from delayq.config import LimitSettings
from delayq.nodes.front.caller import Caller

HEADER = struct.Struct("!i")
# A send that would block. Over TLS, OpenSSL is to be asked again with the same bytes, which `out`
# keeps at its head.
_WOULD_BLOCK = (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError)


class Server(Protocol):
    """What a connection needs of its server (delayq.nodes.front.server.ThriftServer)."""

    def route(self, call: Call) -> None:
        """Hand a whole request to the lane that serves its method."""

    def attend(self, conn: Connection) -> None:
        """Look at this connection again on the I/O thread (a reply is waiting to be written)."""


@dataclass(frozen=True)
class ConnectionLimits:
    """What a connection may do, in bytes and seconds."""
    max_frame: int                  # larger frame headers close the connection before the body is read
    idle_timeout: float             # silent between calls, or a reply not taken whole, this long: closed
    frame_timeout: float            # a frame must arrive whole this long after its first byte
    first_frame_timeout: float      # a new connection must start its first frame this soon
    max_waiting: int = 16           # pipelined requests held per connection; more stay in the socket
    # Larger frames from a connection with no client identity yet close it; None: no lower limit
    # (security off, where every connection runs as the one built-in client).
    max_unauthenticated_frame: int | None = None

    @classmethod
    def of(cls, s: LimitSettings, *, identities: bool) -> ConnectionLimits:
        """`identities`: calls run as the client a connection authenticated as (security on)."""
        return cls(max_frame=s.max_frame_bytes, idle_timeout=s.idle_timeout_ms / 1000.0,
                   frame_timeout=s.frame_timeout_ms / 1000.0, first_frame_timeout=s.first_frame_timeout_ms / 1000.0,
                   max_unauthenticated_frame=min(s.max_unauthenticated_frame_bytes, s.max_frame_bytes)
                   if identities else None)


class Call:
    """One request frame (a whole Thrift message), and the way back to its connection."""
    __slots__ = ("frame", "_conn")

    def __init__(self, frame: bytes, conn: Connection):
        self.frame, self._conn = frame, conn

    @property
    def caller(self) -> Caller:
        return self._conn.caller

    def reply(self, message: bytes) -> None:
        """Send the reply message (framed here); the connection's next call may then be served."""
        self._conn.reply(message)

    def drop(self, why: str, reason: str = "unreadable") -> None:
        """Close the connection instead of replying (the request could not be read or answered);
        `reason` labels the close in the metrics."""
        self._conn.drop(why, reason)


class Connection:
    """A client connection. The I/O thread reads it; any thread may reply on it (under `lock`)."""

    def __init__(self, server: Server, sock: socket.socket, peer, limits: ConnectionLimits, now: float,
                 tls: bool = False):
        self.server, self.sock, self.peer, self.limits = server, sock, peer, limits
        self.caller = Caller(peer)
        self.tls = tls
        self.handshaking = tls          # the TLS handshake is not over yet
        self.want_write = False         # the handshake waits for room to write
        self.inbuf = bytearray()
        self.out = bytearray()          # reply bytes the socket has not taken yet; the I/O thread sends them
        self.out_since = 0.0            # when `out` last became non-empty
        self.busy = False               # one of its calls is being served
        self.waiting: collections.deque[bytes] = collections.deque()
        self.waiting_bytes = 0
        self.paused = False             # not read until a reply makes room for its next frame
        self.fresh = True               # nothing received yet
        self.frame_started: float | None = None     # when the frame now arriving started
        self.last = now                 # accepted, or the last whole request or reply
        self.events = 0                 # the I/O thread's: what the selector watches for it
        self.dropped: tuple[str, str] | None = None     # (why, reason): to be closed by the I/O thread
        self.closed = False
        self.lock = threading.Lock()

    # ---- the I/O thread -----------------------------------------------------------------------

    def handshake(self) -> bool:
        """Take the TLS handshake one step further; True once it is over. Raises ssl.SSLError or
        OSError when it fails."""
        try:
            cast(ssl.SSLSocket, self.sock).do_handshake()     # a TLS connection's socket
        except ssl.SSLWantReadError:
            self.want_write = False
            return False
        except ssl.SSLWantWriteError:
            self.want_write = True
            return False
        self.handshaking = self.want_write = False
        return True

    def recv(self, size: int) -> bytes | None:
        """What the socket has (b"": the peer closed it), or None when it has nothing now."""
        if not self.tls:
            try:
                return self.sock.recv(size)
            except BlockingIOError:
                return None
        with self.lock:
            try:
                return self.sock.recv(size)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return None

    def pending(self) -> int:
        """Bytes decrypted and not yet read: the selector does not see them."""
        return cast(ssl.SSLSocket, self.sock).pending() if self.tls else 0

    def feed(self, data: bytes, now: float) -> tuple[str, str] | None:
        """Take what was read, and hand each whole frame to the server, until none is left or the
        connection has to pause: the frame at the head of the buffer is served, or kept behind the
        call in progress unless the frames kept are as many or as large as a connection may hold.
        A frame header the server cannot take: (why, reason) to close the connection."""
        buf, took, max_frame = self.inbuf, False, self.limits.max_frame
        buf += data
        self.fresh = False
        while len(buf) >= 4:
            (size,) = HEADER.unpack_from(buf)
            if size <= 0 or size > max_frame:
                return f"frame of {size} bytes (at most {max_frame})", "frame_too_large" if size > 0 else "unreadable"
            if self._over_unauthenticated(size):
                # Judged on the header, before the body is read. Behind a call in progress (its
                # authenticate, say) the frame waits for that call's answer and is judged again.
                with self.lock:
                    if not self.busy:
                        return (f"frame of {size} bytes before the connection authenticated "
                                f"(at most {self.limits.max_unauthenticated_frame})", "frame_too_large")
                    self.paused = True
                break
            if len(buf) < 4 + size:
                break
            with self.lock:
                if self.busy and (len(self.waiting) >= self.limits.max_waiting
                                  or self.waiting and self.waiting_bytes + size > max_frame):
                    self.paused = True
                    break
                frame = bytes(buf[4:4 + size])
                del buf[:4 + size]
                took = True
                if self.busy:
                    self.waiting.append(frame)
                    self.waiting_bytes += size
                    continue
                self.busy = True
            self.server.route(Call(frame, self))
        if took:
            self.last = now
            self.frame_started = now if buf and not self.paused else None   # the next frame began in this read
        elif self.paused:
            self.frame_started = None
        elif self.frame_started is None and buf:
            self.frame_started = now
        return None

    def flush(self, now: float) -> bool:
        """Send what is left; True when nothing is. Raises OSError when the peer is gone."""
        with self.lock:
            if self.out and not self.closed:
                try:
                    sent = self.sock.send(self.out)
                except _WOULD_BLOCK:
                    sent = 0
                del self.out[:sent]
                if not self.out:
                    self.last = now
            return not self.out

    def overdue(self, now: float) -> tuple[str, str] | None:
        """(why, reason) when the connection has overstayed; None while it keeps to its deadlines."""
        lim = self.limits
        if self.handshaking:
            limit = min(lim.first_frame_timeout, lim.idle_timeout)
            if now - self.last > limit:
                return f"TLS handshake not complete after {limit:g} s", "tls_handshake_timeout"
            return None
        if self.out and now - self.out_since > lim.idle_timeout:
            return f"not reading its replies for {lim.idle_timeout:g} s", "reply_not_read"
        if self.paused:
            return None         # its calls are being served; the frames behind them wait in the socket
        if self.frame_started is not None:
            if now - self.frame_started > lim.frame_timeout:
                return f"a frame not complete after {lim.frame_timeout:g} s", "frame_timeout"
            return None
        if self.busy:
            return None         # its own call is being served
        if self.fresh:
            limit = min(lim.first_frame_timeout, lim.idle_timeout)     # never longer than a client between calls
            if now - self.last > limit:
                return f"sent nothing for {limit:g} s", "first_frame_timeout"
            return None
        if not self.out and now - self.last > lim.idle_timeout:
            return f"silent for {lim.idle_timeout:g} s", "idle"
        return None

    def _over_unauthenticated(self, size: int) -> bool:
        limit = self.limits.max_unauthenticated_frame
        return limit is not None and size > limit and not self.authenticated

    @property
    def authenticated(self) -> bool:
        """It has a client identity: a token's (authenticate) or a verified certificate's."""
        return self.caller.name is not None or self.caller.certificate is not None

    @property
    def evictable(self) -> bool:
        """Neither a call of its own in progress nor a reply waiting for it."""
        return not (self.busy or self.paused or self.out)

    # ---- any thread ---------------------------------------------------------------------------

    def reply(self, message: bytes) -> None:
        data = HEADER.pack(len(message)) + message
        with self.lock:
            if self.closed:
                return
            if not self.out:
                try:
                    data = data[self.sock.send(data):]
                except _WOULD_BLOCK:
                    pass
                except OSError:
                    data = b""      # the peer is gone: the I/O thread reads that and closes it
            now = time.monotonic()
            if data:
                if not self.out:
                    self.out_since = now
                self.out += data
            else:
                self.last = now
            frame = self.waiting.popleft() if self.waiting else None
            if frame is not None:
                self.waiting_bytes -= len(frame)
            self.busy = frame is not None
            resume, self.paused = self.paused, False
        if data or resume:
            self.server.attend(self)
        if frame is not None:
            self.server.route(Call(frame, self))

    def drop(self, why: str, reason: str) -> None:
        with self.lock:
            if self.closed or self.dropped:
                return
            self.dropped = (why, reason)
            try:
                self.sock.shutdown(socket.SHUT_RDWR)     # the client learns at once; the I/O thread closes it
            except OSError:
                pass
        self.server.attend(self)

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.sock.close()
