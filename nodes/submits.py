"""SubmitBatcher: the submit and submitBatch calls waiting at one moment are served together, with
one MySQL statement (one commit, one fsync) for all of them.

The Thrift server hands it the calls (see nodes.server). A thread takes every call waiting when it
is free (nothing is held back on purpose: an idle node serves a lone submit at once), up to
`max_rows` tasks, decodes them, has the handler validate and insert them (`Handler.submit_many`)
and writes each reply. Each call keeps its own result: its tasks, created or existing, or its own
declared exception. It runs one thread. With two taking turns, each took half the calls waiting,
and the smaller groups cost more than overlapping two commits saved (8 clients of single
submits: 3,580/s against 3,870/s); with two as a pipeline (one preparing the next group while
the other writes), the handoffs cost more than the overlap (3,100/s against 3,360/s). Two
changes to this one thread measured no gain beyond the noise, in runs interleaved with the code
here (8 clients, 40,000 submits each run): checking the next calls while MySQL writes and sending
them the moment it answers (+2 to +6%), and holding a small group back up to 0.3 or 0.6 ms for
the clients served just before (-18% to +21%). Leaving the replies to the I/O thread (one wake-up
per group instead of a send per reply) was slower in each of 4 interleaved pairs (-5% to -40%):
the clients got their answers later.

Thread: one, owned here (a Lane). On stop, calls still waiting have their connections
closed: the client sees a broken connection and may retry on another node.
"""
from __future__ import annotations

import logging
import queue
from typing import Callable, NamedTuple, Sequence

from thrift.Thrift import TApplicationException, TMessageType
from thrift.transport import TTransport

from shared.gen.delayq_thrift import DelayScheduler, ttypes
from nodes.server import UNREADABLE, Call, Lane

log = logging.getLogger(__name__)

_ARGS = {"submit": DelayScheduler.submit_args, "submitBatch": DelayScheduler.submitBatch_args}
_RESULTS = {"submit": DelayScheduler.submit_result, "submitBatch": DelayScheduler.submitBatch_result}
# The field of the result struct that carries each declared exception (the same for both methods).
_FIELDS = {ttypes.InvalidTask: "invalid", ttypes.UnknownTopic: "unknownTopic", ttypes.Conflict: "conflict",
           ttypes.Unavailable: "unavailable"}


class _Request(NamedTuple):
    call: Call
    method: str
    seqid: int
    specs: Sequence[ttypes.TaskSpec] | None

    @property
    def batch(self) -> bool:
        return self.method == "submitBatch"


class SubmitBatcher(Lane):
    name = "submits"

    def __init__(self, submit_many: Callable[[list[tuple[Sequence | None, bool]]], list], protocol, *,
                 max_rows: int = 2000):
        super().__init__(protocol)
        self._submit_many = submit_many
        self._max_rows = max_rows

    def _run(self) -> None:
        while not self._stop.is_set():
            group = self._gather()
            try:
                self._serve(group)
            except Exception:  # noqa: BLE001 - logged; the thread goes on with the next group
                log.exception("serving submits failed")
        self._drop_waiting()

    def _gather(self) -> list[_Request]:
        """The calls waiting, decoded, up to max_rows tasks."""
        group, rows = [], 0
        call = self._next()
        while call is not None:
            request = self._decode(call)
            if request is not None:
                group.append(request)
                rows += len(request.specs or ())
            if rows >= self._max_rows:
                break
            try:
                call = self._inbox.get_nowait()
            except queue.Empty:
                break
        return group

    def _decode(self, call: Call) -> _Request | None:
        iprot = self._protocol.getProtocol(TTransport.TMemoryBuffer(call.frame))
        try:
            method, _, seqid = iprot.readMessageBegin()
            args = _ARGS[method]()
            args.read(iprot)
            iprot.readMessageEnd()
        except UNREADABLE as e:
            call.drop(f"unreadable request: {e}")
            return None
        return _Request(call, method, seqid, [args.task] if method == "submit" else args.tasks)

    def _serve(self, group: list[_Request]) -> None:
        if not group:
            return
        try:
            results = self._submit_many([(r.specs, r.batch) for r in group])
        except Exception:  # noqa: BLE001 - every call of the group gets the failure as its own
            log.exception("submits failed")
            results = [TApplicationException(TApplicationException.INTERNAL_ERROR, "Internal error")] * len(group)
        for request, result in zip(group, results):
            try:
                reply = self._encode(request, result)
            except Exception:  # noqa: BLE001 - this client gets a closed connection, the others their replies
                log.exception("could not encode the reply to %s", request.method)
                request.call.drop("internal error")
                continue
            request.call.reply(reply)

    def _encode(self, request: _Request, result) -> bytes:
        out = TTransport.TMemoryBuffer()
        oprot = self._protocol.getProtocol(out)
        if isinstance(result, TApplicationException):
            oprot.writeMessageBegin(request.method, TMessageType.EXCEPTION, request.seqid)
            result.write(oprot)
        else:
            reply = _RESULTS[request.method]()
            field = _FIELDS.get(type(result))
            if field is not None:
                setattr(reply, field, result)
            else:
                reply.success = result if request.batch else result[0]
            oprot.writeMessageBegin(request.method, TMessageType.REPLY, request.seqid)
            reply.write(oprot)
        oprot.writeMessageEnd()
        return out.getvalue()
