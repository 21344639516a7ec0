"""SubmitBatcher: the submit and submitBatch calls waiting at one moment are served together, with
one MySQL statement (one commit, one fsync) for all of them.

The Thrift server hands it the calls (see delayq.nodes.front.server). It takes every call waiting when it is
free (nothing is held back on purpose: an idle node serves a lone submit at once), up to
`max_rows` tasks, decodes them, has the handler validate and insert them (`SubmitPath.submit_many`)
and writes each reply. Each call keeps its own result: its tasks, created or existing, or its own
declared exception. A submitBatch of more tasks than the protocol reads (`max_batch`) is answered
`InvalidTask(tasks)` here, from the count its request declares, without building its tasks.

Where: on the server's I/O thread, right after each pass over the sockets has read the calls,
with no hand-off to another thread (measured: docs/ARCHITECTURE.md, "Submits"). The I/O thread
reads nothing else while MySQL writes a group, so a group slower than `inline_budget_s` (MySQL
slow or down) hands the calls after it to this inbox's own thread, and the I/O thread goes on
reading every other call; the thread hands them back once it has served a group within the
budget and none is waiting. One of the two serves submits at a time, never both.

Thread: one, owned here (a Inbox), which serves only while MySQL is slow. On stop, calls still
waiting have their connections closed: the client sees a broken connection and may retry on
another node.
"""
from __future__ import annotations

import collections
import logging
import struct
import threading
import time
from typing import Any, Callable, NamedTuple, Sequence

from thrift.Thrift import TApplicationException, TMessageType
from thrift.transport import TTransport

from delayq.client.gen.delayq_thrift import DelayScheduler, ttypes
from delayq.nodes.front.caller import Caller
from delayq.nodes.front.connection import HEADER, Call
from delayq.nodes.front.errors import exception_fields
from delayq.nodes.front.inboxes import UNREADABLE, Inbox

log = logging.getLogger(__name__)

# The generated structs (untyped).
_ARGS: dict[str, Any] = {"submit": DelayScheduler.submit_args, "submitBatch": DelayScheduler.submitBatch_args}
_REPLIES: dict[str, Any] = {"submit": DelayScheduler.submit_result, "submitBatch": DelayScheduler.submitBatch_result}
_FIELDS = {method: exception_fields(reply) for method, reply in _REPLIES.items()}
# A submitBatch's arguments start with field 1, a list of structs: its header and element count.
_TASKS = struct.Struct("!bhbi")
_T_LIST, _T_STRUCT = 15, 12


class _Request(NamedTuple):
    call: Call
    method: str
    seqid: int
    specs: Sequence[ttypes.TaskSpec] | None

    @property
    def batch(self) -> bool:
        return self.method == "submitBatch"


class SubmitBatcher(Inbox):
    name = "submits"
    inline = True

    def __init__(self, submit_many: Callable[[list[tuple[Sequence | None, bool, Caller]]], list], protocol, *,
                 max_batch: int, max_rows: int = 2000, inline_budget_s: float = 0.1,
                 monotonic: Callable[[], float] = time.monotonic):
        super().__init__(protocol)
        self._max_batch = max_batch
        self._submit_many = submit_many
        self._max_rows = max_rows
        self._budget = inline_budget_s
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._on_io = True                  # under _lock: put() gives calls to the I/O thread
        self._pending: list[Call] = []      # under _lock: calls for the I/O thread
        self._io_thread: int | None = None
        self._wake_io: Callable[[], None] = lambda: None

    # ---- the server's side --------------------------------------------------------------------

    def bind(self, wake_io: Callable[[], None]) -> None:
        """The server serves this inbox on its I/O thread; wake_io() makes it look at new calls."""
        self._wake_io = wake_io

    @property
    def pending(self) -> bool:
        """Calls are waiting for the I/O thread."""
        return bool(self._pending)

    def put(self, call: Call) -> None:
        with self._lock:
            if not self._on_io:
                self._inbox.put(call)
                return
            self._pending.append(call)
            if threading.get_ident() == self._io_thread:
                return              # read by the I/O thread, which serves it after this pass
        self._wake_io()             # routed by another thread (a call waiting behind its reply)

    def serve_pending(self) -> None:
        """I/O thread: serve the calls waiting for it, a group of up to max_rows tasks at a time.
        After a group slower than the budget, the rest go to the inbox's thread."""
        self._io_thread = threading.get_ident()
        if not self._pending:
            return      # most passes (other calls, wake-ups); a call put since comes with a wake-up
        with self._lock:
            calls, self._pending = collections.deque(self._pending), []
        while calls:
            group = self._group(calls.popleft(), lambda: calls.popleft() if calls else None)
            if self._timed_serve(group) > self._budget:
                with self._lock:
                    self._on_io = False
                    for call in [*calls, *self._pending]:
                        self._inbox.put(call)
                    self._pending = []
                log.info("MySQL took over %.0f ms for a group of submits: serving them on their own thread "
                         "until it answers in time", self._budget * 1000)
                return

    # ---- the inbox's thread --------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            group = self._group(self._next(), self._waiting)
            if group and self._timed_serve(group) <= self._budget:
                with self._lock:
                    if not self._on_io and self._inbox.empty():
                        self._on_io = True
                        log.info("MySQL answers submits in time again: serving them on the I/O thread")
        self._drop_waiting()

    def _drop_waiting(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, []
        for call in pending:
            call.drop("the node is stopping")
        super()._drop_waiting()

    # ---- either ---------------------------------------------------------------------------------

    def _group(self, call: Call | None, more: Callable[[], Call | None]) -> list[_Request]:
        """This call and the next ones from more(), decoded, up to max_rows tasks."""
        group, rows = [], 0
        while call is not None:
            try:
                request = self._decode(call)
            except Exception:  # noqa: BLE001 - one client's bytes must not stop the I/O thread serving
                log.exception("closing connection: its request could not be read")
                call.drop("internal error", "internal_error")
                request = None
            if request is not None:
                group.append(request)
                rows += len(request.specs or ())
            if rows >= self._max_rows:
                break
            call = more()
        return group

    def _timed_serve(self, group: list[_Request]) -> float:
        """Serve the group; how long it took (seconds)."""
        started = self._monotonic()
        try:
            self._serve(group)
        except Exception:  # noqa: BLE001 - logged; the thread goes on with the next group
            log.exception("serving submits failed")
        return self._monotonic() - started

    def _decode(self, call: Call) -> _Request | None:
        iprot = self._protocol.getProtocol(TTransport.TMemoryBuffer(call.frame))
        try:
            method, _, seqid = iprot.readMessageBegin()
            args = _ARGS[method]()
        except UNREADABLE as e:
            call.drop(f"unreadable request: {e}")
            return None
        try:
            args.read(iprot)
            iprot.readMessageEnd()
        except UNREADABLE as e:
            # The protocol refuses a list longer than the largest batch before it builds one (a
            # frame of 8 MiB could claim millions of tasks): answered like any batch too large.
            n = _declared_tasks(call.frame) if method == "submitBatch" else None
            if n is not None and n > self._max_batch:
                self._send(_Request(call, method, seqid, None), ttypes.InvalidTask(
                    field="tasks", reason=f"holds {n} tasks, at most {self._max_batch} allowed"))
            else:
                call.drop(f"unreadable request: {e}")
            return None
        return _Request(call, method, seqid, [args.task] if method == "submit" else args.tasks)

    def _serve(self, group: list[_Request]) -> None:
        if not group:
            return
        try:
            results = self._submit_many([(r.specs, r.batch, r.call.caller) for r in group])
        except Exception:  # noqa: BLE001 - every call of the group gets the failure as its own
            log.exception("submits failed")
            results = [TApplicationException(TApplicationException.INTERNAL_ERROR, "Internal error")] * len(group)
        for request, result in zip(group, results):
            self._send(request, result)

    def _send(self, request: _Request, result) -> None:
        try:
            reply = self._encode(request, result)
        except Exception:  # noqa: BLE001 - this client gets a closed connection, the others their replies
            log.exception("could not encode the reply to %s", request.method)
            request.call.drop("internal error", "internal_error")
            return
        request.call.reply(reply)

    def _encode(self, request: _Request, result) -> bytes:
        out = TTransport.TMemoryBuffer()
        oprot = self._protocol.getProtocol(out)
        if isinstance(result, TApplicationException):
            oprot.writeMessageBegin(request.method, TMessageType.EXCEPTION, request.seqid)
            result.write(oprot)
        else:
            reply = _REPLIES[request.method]()
            field = _FIELDS[request.method].get(type(result))
            if field is not None:
                setattr(reply, field, result)
            else:
                reply.success = result if request.batch else result[0]
            oprot.writeMessageBegin(request.method, TMessageType.REPLY, request.seqid)
            reply.write(oprot)
        oprot.writeMessageEnd()
        return out.getvalue()


def _declared_tasks(frame: bytes) -> int | None:
    """How many tasks a submitBatch request says it holds, read from the head of its frame; None
    when the request does not start as a submitBatch of the IDL does."""
    try:
        if frame[0] & 0x80:         # strict: version and type, name, seqid
            (n,) = HEADER.unpack_from(frame, 4)
            at = 8 + n + 4
        else:                       # old style: name, type, seqid
            (n,) = HEADER.unpack_from(frame, 0)
            at = 4 + n + 1 + 4
        kind, field, element, count = _TASKS.unpack_from(frame, at)
    except (IndexError, struct.error):
        return None
    return count if (kind, field, element) == (_T_LIST, 1, _T_STRUCT) else None
