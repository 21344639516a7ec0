"""Inboxes: where the Thrift server sends the calls it read. An inbox is a queue of calls and the threads (a
NodeThread) that serve it; CallPool serves calls with the generated Thrift processor. The submits'
inbox is delayq.nodes.front.submits.SubmitBatcher.
"""
from __future__ import annotations

import logging
import queue
import struct
from typing import Callable, Protocol

from thrift.Thrift import TException
from thrift.transport import TTransport

from delayq.nodes.front.caller import serving
from delayq.nodes.front.connection import HEADER, Call
from delayq.nodes.threads import NodeThread

log = logging.getLogger(__name__)

# What reading a request that is not a well-formed call of the IDL can raise (TypeError: thrift's
# skip() of a field whose type byte names no type).
UNREADABLE = (TException, ValueError, EOFError, OverflowError, KeyError, TypeError, struct.error)


class InlineInbox(Protocol):
    """What an Inbox with `inline` set offers the server's I/O thread (see Inbox)."""
    def bind(self, wake: Callable[[], None]) -> None: ...
    @property
    def pending(self) -> bool: ...
    def serve_pending(self) -> None: ...


class Inbox(NodeThread):
    """An inbox and the threads that serve it. Calls still waiting when the threads stop have
    their connections closed.

    An inbox with `inline` set is also served on the server's I/O thread: the server calls
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
            call.drop("the node is stopping", "stopping")


class CallPool(Inbox):
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
        serving(call.caller)
        try:
            self._processor.process(self._protocol.getProtocol(TTransport.TMemoryBuffer(call.frame)),
                                    self._protocol.getProtocol(out))
        except UNREADABLE as e:
            call.drop(f"request not read or reply not written: {e!r}")
            return
        except Exception:  # noqa: BLE001 - one client's request must not take the node down
            log.exception("closing connection: the request failed")
            call.drop("internal error", "internal_error")
            return
        finally:
            serving(None)
        call.reply(out.getvalue())


def method_of(frame: bytes) -> bytes:
    """The method name of a TBinaryProtocol message, strict (version first) or not; b"" if none."""
    if len(frame) < 8:
        return b""
    if frame[0] & 0x80:
        (n,) = HEADER.unpack_from(frame, 4)
        return frame[8:8 + n] if n > 0 else b""
    (n,) = HEADER.unpack_from(frame, 0)
    return frame[4:4 + n] if n > 0 else b""

