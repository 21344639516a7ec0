"""ThriftServer: TBinaryProtocol over TFramedTransport on TCP. One I/O thread moves the bytes and
serves the submits; the other calls run on the lanes' threads.

The I/O thread (a selector over the listener and every connection) accepts, reads and cuts
frames, and hands each request to a lane chosen by its method name: submits to the SubmitBatcher,
which serves every submit waiting with one transaction, everything else to the CallPool. An
`inline` lane (the SubmitBatcher) is served on the I/O thread itself after each pass over the
sockets, while its MySQL writes are quick; see nodes.submits. The thread that served a call writes
the reply straight to the socket; only what the socket does not take at once goes back to the I/O
thread. (A thread per connection costs about ten thread switches per call under the GIL; a group
of submits served this way costs none.)

Limits: at most `max_connections` connections (one more is closed at once: a clean refusal the
client can retry elsewhere); a frame header above `max_frame` closes the connection before the
body is read; a connection without a call in progress that stays silent (or does not read its
reply) for `idle_timeout` seconds is closed; an error on one connection closes that connection
only. Thrift's clients send a call and wait for its reply; a frame that arrives while its
connection's call is still being served waits for that reply (at most `max_waiting` of them), so
replies keep their order.

`stop()` closes the listener and every connection and joins the I/O thread. The lanes belong to
whoever made them (nodes.main), which stops them after the server.
"""
from __future__ import annotations

import collections
import logging
import queue
import selectors
import socket
import struct
import threading
import time
from typing import Mapping

from thrift.Thrift import TException
from thrift.transport import TTransport

from nodes.worker import Worker

log = logging.getLogger(__name__)

_HEADER = struct.Struct("!i")
_CHUNK = 256 * 1024
_WAKE = object()


class Call:
    """One request frame (a whole Thrift message), and the way back to its connection."""
    __slots__ = ("frame", "_conn")

    def __init__(self, frame: bytes, conn: _Conn):
        self.frame, self._conn = frame, conn

    def reply(self, message: bytes) -> None:
        """Send the reply message (framed here); the connection's next call may then be served."""
        self._conn.reply(message)

    def drop(self, why: str) -> None:
        """Close the connection instead of replying (the request could not be read)."""
        log.info("closing connection from %s: %s", self._conn.peer, why)
        self._conn.shutdown()


class _Conn:
    """A client connection. The I/O thread reads it; any thread may reply on it (under `lock`)."""

    def __init__(self, server: ThriftServer, sock: socket.socket, peer):
        self.server, self.sock, self.peer = server, sock, peer
        self.inbuf = bytearray()
        self.out = bytearray()          # reply bytes the socket has not taken yet; the I/O thread sends them
        self.busy = False               # one of its calls is being served
        self.waiting: collections.deque[bytes] = collections.deque()
        self.last = time.monotonic()    # last request or reply
        self.closed = False
        self.lock = threading.Lock()

    def received(self, frame: bytes) -> bool:
        """A whole request arrived: serve it, or keep it until the call in progress is answered.
        False: too many calls are waiting on this connection."""
        with self.lock:
            if self.busy:
                if len(self.waiting) >= self.server.max_waiting:
                    return False
                self.waiting.append(frame)
                return True
            self.busy = True
        self.server.route(Call(frame, self))
        return True

    def reply(self, message: bytes) -> None:
        data = _HEADER.pack(len(message)) + message
        with self.lock:
            if self.closed:
                return
            if not self.out:
                try:
                    data = data[self.sock.send(data):]
                except BlockingIOError:
                    pass
                except OSError:
                    data = b""      # the peer is gone: the I/O thread reads that and closes it
            if data:
                self.out += data
                self.server.want_write(self)
            self.last = time.monotonic()
            frame = self.waiting.popleft() if self.waiting else None
            self.busy = frame is not None
        if frame is not None:
            self.server.route(Call(frame, self))

    def flush(self) -> bool:
        """I/O thread: send what is left; True when nothing is. Raises OSError when the peer is gone."""
        with self.lock:
            if self.out and not self.closed:
                try:
                    sent = self.sock.send(self.out)
                except BlockingIOError:
                    sent = 0
                if sent:
                    del self.out[:sent]
                    self.last = time.monotonic()
            return not self.out

    def shutdown(self) -> None:
        with self.lock:
            if not self.closed:
                try:
                    self.sock.shutdown(socket.SHUT_RDWR)     # the I/O thread then reads EOF and closes it
                except OSError:
                    pass

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.sock.close()


class ThriftServer:
    def __init__(self, lanes: Mapping[str, Lane], default: Lane, host: str, port: int, *, max_connections: int,
                 max_frame: int, idle_timeout: float, max_waiting: int = 16):
        self._lanes = {name.encode(): lane for name, lane in lanes.items()}
        self._default = default
        self._host, self._port = host, port
        self._max_connections = max_connections
        self._max_frame = max_frame
        self._idle_timeout = idle_timeout
        self.max_waiting = max_waiting
        self._sel = selectors.DefaultSelector()
        self._conns: dict[socket.socket, _Conn] = {}
        self._listener: socket.socket | None = None
        self._listening = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._writers: list[_Conn] = []          # connections with reply bytes left, for the I/O thread
        self._writers_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._inline = list({id(lane): lane for lane in [*lanes.values(), default] if lane.inline}.values())
        for lane in self._inline:
            lane.bind(self._wake)

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

    # ---- called from the lanes' threads -------------------------------------------------------

    def route(self, call: Call) -> None:
        self._lanes.get(_method(call.frame), self._default).put(call)

    def want_write(self, conn: _Conn) -> None:
        with self._writers_lock:
            self._writers.append(conn)
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
                waiting = any(lane.pending for lane in self._inline)
                for key, mask in self._sel.select(timeout=0 if waiting else 0.25):
                    if key.data is None:
                        self._accept()
                    elif key.data is _WAKE:
                        self._woken()
                    else:
                        self._serve(key.data, mask)
                for lane in self._inline:
                    lane.serve_pending()        # what this pass read, as one group
                now = time.monotonic()
                if now >= next_sweep:
                    self._sweep(now)
                    next_sweep = now + min(0.25, self._idle_timeout / 4)
        except Exception:  # noqa: BLE001 - logged; /healthz reports the server stopped
            log.exception("the Thrift server's I/O thread failed")
        finally:
            self._close_all()

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
            if len(self._conns) >= self._max_connections:
                log.warning("refusing a connection from %s: %d connections open", peer, len(self._conns))
                sock.close()
                continue
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                sock.close()        # reset before it was served
                continue
            conn = _Conn(self, sock, peer)
            self._conns[sock] = conn
            self._sel.register(sock, selectors.EVENT_READ, conn)

    def _serve(self, conn: _Conn, mask: int) -> None:
        """One connection's events. Whatever goes wrong with it closes it, not the server."""
        try:
            if mask & selectors.EVENT_WRITE:
                self._flush(conn)
            if mask & selectors.EVENT_READ and conn.sock in self._conns:
                self._read(conn)
        except OSError as e:
            self._close(conn, str(e))
        except Exception:  # noqa: BLE001 - one connection must not take the server down
            log.exception("closing connection from %s", conn.peer)
            self._close(conn, None)

    def _read(self, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(_CHUNK)
        except BlockingIOError:
            return
        if not data:
            self._close(conn, None)
            return
        conn.last = time.monotonic()
        buf = conn.inbuf
        buf += data
        while len(buf) >= 4:
            (size,) = _HEADER.unpack_from(buf)
            if size <= 0 or size > self._max_frame:
                self._close(conn, f"frame of {size} bytes (at most {self._max_frame})")
                return
            if len(buf) < 4 + size:
                return
            frame = bytes(buf[4:4 + size])
            del buf[:4 + size]
            if not conn.received(frame):
                self._close(conn, f"more than {self.max_waiting} calls waiting for replies")
                return

    def _woken(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except BlockingIOError:
            pass
        with self._writers_lock:
            writers, self._writers = self._writers, []
        for conn in writers:
            if conn.sock in self._conns:
                try:
                    if not conn.flush():
                        self._sel.modify(conn.sock, selectors.EVENT_READ | selectors.EVENT_WRITE, conn)
                except OSError as e:
                    self._close(conn, str(e))

    def _flush(self, conn: _Conn) -> None:
        if conn.flush() and conn.sock in self._conns:
            self._sel.modify(conn.sock, selectors.EVENT_READ, conn)

    def _sweep(self, now: float) -> None:
        if not self._listening and self._listener is not None:
            self._sel.register(self._listener, selectors.EVENT_READ, None)
            self._listening = True
        for conn in list(self._conns.values()):
            # Not while a call of its own is being served; a reply it does not read counts as silence.
            if not conn.busy and now - conn.last > self._idle_timeout:
                self._close(conn, f"silent for {self._idle_timeout:g} s" if not conn.out
                            else f"not reading its replies for {self._idle_timeout:g} s")

    def _close(self, conn: _Conn, why: str | None) -> None:
        if why:
            log.info("closing connection from %s: %s", conn.peer, why)
        if self._conns.pop(conn.sock, None) is not None:
            self._sel.unregister(conn.sock)
        conn.close()

    def _close_all(self) -> None:
        for conn in list(self._conns.values()):
            self._close(conn, None)
        if self._listener is not None:
            self._listener.close()
        self._sel.close()
        for s in (self._wake_r, self._wake_w):
            s.close()


def _method(frame: bytes) -> bytes:
    """The method name of a TBinaryProtocol message, strict (version first) or not; b"" if none."""
    if len(frame) < 8:
        return b""
    if frame[0] & 0x80:
        (n,) = _HEADER.unpack_from(frame, 4)
        return frame[8:8 + n] if n > 0 else b""
    (n,) = _HEADER.unpack_from(frame, 0)
    return frame[4:4 + n] if n > 0 else b""


# What reading a request that is not a well-formed call of the IDL can raise.
UNREADABLE = (TException, ValueError, EOFError, OverflowError, KeyError, struct.error)


class Lane(Worker):
    """Where the server sends calls: an inbox and the threads (a Worker) that serve it. Calls
    still waiting when the threads stop have their connections closed.

    A lane with `inline` set is also served on the server's I/O thread: the server calls
    `bind(wake)` once, and after each pass over the sockets `serve_pending()`; `pending` says
    calls wait for it (the server then does not sleep in select), and wake() wakes the I/O thread
    for a call put from another thread."""
    inline = False

    def __init__(self, protocol, threads: int = 1):
        super().__init__(threads)
        self._protocol = protocol
        self._inbox: queue.Queue[Call] = queue.Queue()

    def put(self, call: Call) -> None:
        self._inbox.put(call)

    def _next(self) -> Call | None:
        """The next call, or None after 0.2 s without one (so a thread sees the stop flag)."""
        try:
            return self._inbox.get(timeout=0.2)
        except queue.Empty:
            return None

    def _waiting(self) -> Call | None:
        """The next call if one is waiting, else None at once."""
        try:
            return self._inbox.get_nowait()
        except queue.Empty:
            return None

    def _drop_waiting(self) -> None:
        while (call := self._waiting()) is not None:
            call.drop("the node is stopping")


class CallPool(Lane):
    """Serves calls with the generated Thrift processor, one call per thread at a time. A request
    that cannot be read closes its connection; the handler's errors are the processor's business
    (declared exceptions, or an internal error)."""
    name = "thrift"

    def __init__(self, processor, protocol, threads: int):
        super().__init__(protocol, threads)
        self._processor = processor

    def _run(self) -> None:
        while not self._stop.is_set():
            call = self._next()
            if call is not None:
                self.serve(call)
        self._drop_waiting()

    def serve(self, call: Call) -> None:
        out = TTransport.TMemoryBuffer()
        try:
            self._processor.process(self._protocol.getProtocol(TTransport.TMemoryBuffer(call.frame)),
                                    self._protocol.getProtocol(out))
        except UNREADABLE as e:
            call.drop(f"request not read or reply not written: {e!r}")
            return
        except Exception:  # noqa: BLE001 - one client's request must not take the node down
            log.exception("closing connection: the request failed")
            call.drop("internal error")
            return
        call.reply(out.getvalue())
