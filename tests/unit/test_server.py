"""Unit tests for the Thrift front of a node (delayq.nodes.front.server, delayq.nodes.front.submits) with a handler of its
own: what a client sees of grouping, errors, limits, order and stopping. Real sockets on
127.0.0.1; no MySQL, RabbitMQ or ZooKeeper."""
from __future__ import annotations

import concurrent.futures
import socket
import struct
import threading
import time
from typing import BinaryIO

import pytest
from thrift.protocol import TBinaryProtocol
from thrift.Thrift import TApplicationException, TMessageType
from thrift.transport import TTransport

from delayq.client import connect
from delayq.client.security import ClientSecurity
from delayq.client.gen.delayq_thrift import DelayScheduler, ttypes
from delayq.nodes.front.caller import current
from delayq.nodes.front.connection import ConnectionLimits
from delayq.nodes.front.inboxes import CallPool
from delayq.nodes.front.server import ThriftServer
from delayq.nodes.front.submits import SubmitBatcher
from tests.conftest import wait_until

PROTOCOL = TBinaryProtocol.TBinaryProtocolAcceleratedFactory(string_length_limit=64 << 20,
                                                             container_length_limit=1000)


class Handler:
    """Answers submits with a ref per task (topic "bad" is refused, "boom" fails inside), and
    records the groups submit_many was given and the threads that served them. `hold` keeps a
    group waiting; `slow_s` is how long a group takes on the clock `monotonic`."""

    def __init__(self):
        self.groups: list[int] = []
        self.threads: list[str] = []
        self.hold = threading.Event()
        self.hold.set()
        self.entered = threading.Event()
        self.now = 0.0
        self.slow_s = 0.0

    def monotonic(self) -> float:
        return self.now

    def submit_many(self, calls):
        self.entered.set()
        self.hold.wait(10)
        self.now += self.slow_s
        self.groups.append(len(calls))
        self.threads.append(threading.current_thread().name)
        out = []
        for specs, batch, _caller in calls:
            if any(s.topic == "bad" for s in specs):
                out.append(ttypes.InvalidTask(field="topic", reason="is bad", index=0 if batch else None))
            elif any(s.topic == "boom" for s in specs):
                out.append(TApplicationException(TApplicationException.INTERNAL_ERROR, "Internal error"))
            elif any(s.topic == "unencodable" for s in specs):
                out.append(["not a TaskRef"])
            else:
                out.append([ttypes.TaskRef(taskId=s.taskId, dueAtMs=s.delayMs, created=True) for s in specs])
        return out

    def authenticate(self, token):
        current().name = token      # every token is its client's here: identity, not access, is under test
        return token

    def get(self, taskId):
        if taskId == "held":
            self.entered.set()
            self.hold.wait(10)
        if taskId == "missing":
            raise ttypes.NotFound(taskId=taskId)
        return ttypes.TaskInfo(taskId=taskId, payload=b"p" * (int(taskId) if taskId.isdigit() else 1))


class Front:
    security = ClientSecurity(insecure=True)

    def __init__(self, handler, **limits):
        self.submits = SubmitBatcher(handler.submit_many, PROTOCOL, max_batch=1000, inline_budget_s=0.1,
                                     monotonic=handler.monotonic)
        self.calls = CallPool(DelayScheduler.Processor(handler), PROTOCOL, threads=2)
        self.closed: list[str] = []
        tls, max_connections = limits.pop("tls", None), limits.pop("max_connections", 8)
        self.server = ThriftServer({"submit": self.submits, "submitBatch": self.submits}, self.calls,
                                   "127.0.0.1", 0, ConnectionLimits(**{"max_frame": 1 << 20, "idle_timeout": 30.0,
                                                                       "frame_timeout": 10.0,
                                                                       "first_frame_timeout": 10.0, **limits}),
                                   max_connections=max_connections, closed=self.closed.append, tls=tls)

    def __enter__(self):
        self.submits.start()
        self.calls.start()
        self.server.start()
        return self

    def __exit__(self, *exc):
        self.server.stop()
        self.submits.stop()
        self.calls.stop()

    def client(self, timeout_s: float = 5.0):
        return connect("127.0.0.1", self.server.port, timeout_s, self.security)

    def raw(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.server.port), timeout=5)

    def accepted(self, n: int) -> list[socket.socket]:
        """n raw connections, once the server has accepted them all (its next pass reads them)."""
        before = self.server.connections
        socks = [self.raw() for _ in range(n)]
        wait_until(lambda: self.server.connections >= before + n, 5, what=f"{n} connections accepted")
        return socks


def _spec(i: int, topic: str = "t") -> ttypes.TaskSpec:
    return ttypes.TaskSpec(topic=topic, taskId=f"id-{i}", delayMs=i)


def _frame(name: str, seqid: int, args) -> bytes:
    """A framed TBinaryProtocol call, as a client sends it."""
    buf = TTransport.TMemoryBuffer()
    proto = TBinaryProtocol.TBinaryProtocol(buf)
    proto.writeMessageBegin(name, 1, seqid)
    args.write(proto)
    proto.writeMessageEnd()
    return struct.pack("!i", len(buf.getvalue())) + buf.getvalue()


def _reply(reader) -> tuple[TBinaryProtocol.TBinaryProtocol, int, int]:
    """Read one framed reply from a raw connection's reader: (protocol positioned after the message
    header, message kind, seqid); ConnectionError when the server closed the connection instead."""
    head = reader.read(4)
    if len(head) < 4:
        raise ConnectionError("closed by the server")
    (size,) = struct.unpack("!i", head)
    proto = TBinaryProtocol.TBinaryProtocol(TTransport.TMemoryBuffer(reader.read(size)))
    _, kind, seqid = proto.readMessageBegin()
    return proto, kind, seqid


def _answer(sock: socket.socket, method: str, reader: BinaryIO | None = None):
    """The answer to the one call sent on a raw connection: its result, declared exception or
    TApplicationException. Calls pipelined on one connection read their answers through one
    `reader` (sock.makefile): a reader of its own for each could buffer the next answer and lose it."""
    proto, kind, _ = _reply(reader or sock.makefile("rb"))
    if kind == TMessageType.EXCEPTION:
        error = TApplicationException()
        error.read(proto)
        return error
    result = getattr(DelayScheduler, f"{method}_result")()
    result.read(proto)
    return next(getattr(result, f) for f in ("success", "invalid", "unknownTopic", "conflict", "unavailable")
                if getattr(result, f, None) is not None)


def _closed_by_peer(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_concurrent_submits_are_served_in_one_group_and_each_gets_its_own_answer():
    handler = Handler()
    handler.hold.clear()          # the first submit waits, so the others gather behind it
    with Front(handler) as f:
        topics = ["t", "t", "bad", "t", "boom", "t"]
        socks = f.accepted(len(topics) - 1)
        try:
            c, trans = f.client()
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                first = pool.submit(c.submit, _spec(0))
                assert handler.entered.wait(5)
                for i, s in enumerate(socks, start=1):
                    s.sendall(_frame("submitBatch", i, DelayScheduler.submitBatch_args(tasks=[_spec(30), _spec(31)]))
                              if i == 3 else _frame("submit", i, DelayScheduler.submit_args(task=_spec(i, topics[i]))))
                handler.hold.set()
                answers = [first.result(10)] + [_answer(s, "submitBatch" if i == 3 else "submit")
                                                for i, s in enumerate(socks, start=1)]
            trans.close()
        finally:
            for s in socks:
                s.close()
    assert answers[0].taskId == "id-0" and answers[1].taskId == "id-1" and answers[5].taskId == "id-5"
    assert [r.taskId for r in answers[3]] == ["id-30", "id-31"]
    assert isinstance(answers[2], ttypes.InvalidTask) and answers[2].reason == "is bad"
    assert isinstance(answers[4], TApplicationException)
    assert handler.groups == [1, 5]
    assert handler.threads == ["thrift-io", "thrift-io"]      # no hand-off while MySQL is quick


def test_while_mysql_is_slow_submits_leave_the_io_thread_to_the_other_calls():
    handler = Handler()
    with Front(handler) as f:
        c, trans = f.client()
        other, other_trans = f.client()
        try:
            handler.slow_s = 1.0                     # past the budget of 0.1 s
            assert c.submit(_spec(1)).taskId == "id-1"
            handler.slow_s = 0.0
            handler.hold.clear()
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                held = pool.submit(c.submit, _spec(2))
                assert handler.entered.wait(5)
                assert other.get("abc").taskId == "abc"      # answered while a submit group is held
                assert not held.done()
                handler.hold.set()
                assert held.result(10).taskId == "id-2"
            assert c.submit(_spec(3)).taskId == "id-3"
        finally:
            trans.close()
            other_trans.close()
    # The slow group on the I/O thread, the next on the lane's own thread (quick: back again).
    assert handler.threads == ["thrift-io", "submits", "thrift-io"]


def test_other_calls_are_served_by_the_processor_with_their_declared_exceptions():
    with Front(Handler()) as f:
        c, trans = f.client()
        try:
            assert c.get("abc").taskId == "abc"
            with pytest.raises(ttypes.NotFound):
                c.get("missing")
            with pytest.raises(TApplicationException):
                c.cancel("x")           # the handler has no cancel: an internal error, not a dead connection
            assert c.submit(_spec(7)).taskId == "id-7"
        finally:
            trans.close()


def test_a_reply_larger_than_the_socket_takes_at_once_arrives_whole():
    with Front(Handler()) as f:
        c, trans = f.client(timeout_s=10)
        try:
            assert len(c.get(str(8 << 20)).payload) == 8 << 20
            assert c.get("abc").taskId == "abc"
        finally:
            trans.close()


def test_calls_sent_back_to_back_on_one_connection_are_answered_in_order():
    with Front(Handler()) as f, f.raw() as s:
        s.sendall(_frame("get", 1, DelayScheduler.get_args(taskId="a"))
                  + _frame("submit", 2, DelayScheduler.submit_args(task=_spec(2)))
                  + _frame("get", 3, DelayScheduler.get_args(taskId="b")))
        reader = s.makefile("rb")
        seqids = [_reply(reader)[2] for _ in range(3)]
        assert seqids == [1, 2, 3]


@pytest.mark.parametrize("frame, reason", [(struct.pack("!i", 1 << 30), "frame_too_large"),
                                           (struct.pack("!i", 64) + b"\xff" * 64, "unreadable"),
                                           (struct.pack("!i", 0), "unreadable")],
                         ids=["oversized", "garbage", "empty"])
def test_a_bad_frame_closes_its_connection_and_the_server_keeps_serving(frame, reason):
    with Front(Handler()) as f:
        with f.raw() as s:
            s.sendall(frame)
            assert _closed_by_peer(s)
        wait_until(lambda: f.closed == [reason], 5, what=f"the close counted as {reason}")
        c, trans = f.client()
        try:
            assert c.submit(_spec(1)).taskId == "id-1"
        finally:
            trans.close()


def _call_with_body(name: str, body: bytes) -> bytes:
    """A framed call of `name` whose arguments are these raw bytes."""
    buf = TTransport.TMemoryBuffer()
    TBinaryProtocol.TBinaryProtocol(buf).writeMessageBegin(name, 1, 1)
    frame = buf.getvalue() + body
    return struct.pack("!i", len(frame)) + frame


@pytest.mark.parametrize("method", ["submit", "submitBatch", "get"])
def test_a_call_whose_field_type_names_no_type_closes_its_connection_and_the_server_keeps_serving(method):
    # Field type 0x80: thrift's skip() raises TypeError, which once stopped the I/O thread for
    # submits (served on it) and so the whole Thrift server.
    with Front(Handler()) as f:
        with f.raw() as s:
            s.sendall(_call_with_body(method, b"\x80\x00\x01\x00"))
            assert _closed_by_peer(s)
        wait_until(lambda: f.closed == ["unreadable"], 5, what="the close counted as unreadable")
        assert f.server.alive
        c, trans = f.client()
        try:
            assert c.submit(_spec(1)).taskId == "id-1"
        finally:
            trans.close()


def _served(f: Front) -> bool:
    """A new client connects and is answered (False: refused or closed)."""
    try:
        c, trans = f.client(timeout_s=2)
    except Exception:  # noqa: BLE001 - refused
        return False
    try:
        return c.submit(_spec(1)).taskId == "id-1"
    except Exception:  # noqa: BLE001 - closed at once
        return False
    finally:
        trans.close()


def test_at_the_connection_limit_a_new_client_takes_the_place_of_the_longest_idle():
    with Front(Handler(), max_connections=2) as f:
        [oldest] = f.accepted(1)
        [newer] = f.accepted(1)
        with oldest, newer:
            assert _served(f)                       # at once, not after any timeout
            assert _closed_by_peer(oldest)
            newer.sendall(_frame("get", 1, DelayScheduler.get_args(taskId="abc")))
            assert _answer(newer, "get").taskId == "abc"
        assert f.closed == ["evicted"]


def _authenticated(f: Front) -> socket.socket:
    """A raw connection that has authenticated."""
    s = f.raw()
    s.sendall(_frame("authenticate", 1, DelayScheduler.authenticate_args(token="app")))
    assert _answer(s, "authenticate") == "app"
    return s


def test_at_the_connection_limit_a_flood_of_new_connections_never_evicts_an_authenticated_one():
    with Front(Handler(), max_connections=2) as f:
        with _authenticated(f) as working:
            flood = [f.raw() for _ in range(6)]
            try:
                # Each newcomer takes the place of the previous unauthenticated one, never the working client's.
                wait_until(lambda: f.closed.count("evicted") == 5, 5, what="each newcomer to push out the one before")
                working.sendall(_frame("get", 2, DelayScheduler.get_args(taskId="abc")))
                assert _answer(working, "get").taskId == "abc"
            finally:
                for s in flood:
                    s.close()


def test_at_the_connection_limit_with_every_connection_authenticated_a_new_one_is_refused():
    with Front(Handler(), max_connections=2) as f:
        with _authenticated(f) as one, _authenticated(f) as two:
            assert not _served(f)
            wait_until(lambda: f.closed == ["refused"], 5, what="the newcomer refused")
            for i, s in enumerate((one, two)):
                s.sendall(_frame("get", 2, DelayScheduler.get_args(taskId=str(i))))
                assert _answer(s, "get").taskId == str(i)


def test_a_large_frame_before_authenticating_closes_the_connection_unread_and_after_is_served():
    big = _frame("get", 1, DelayScheduler.get_args(taskId="x" * 8000))
    with Front(Handler(), max_unauthenticated_frame=4096) as f:
        with f.raw() as s:
            s.sendall(big[:4])          # the header alone is enough to close it
            assert _closed_by_peer(s)
        assert f.closed == ["frame_too_large"]
        with _authenticated(f) as s:
            s.sendall(big)
            assert _answer(s, "get").taskId == "x" * 8000


def test_a_large_frame_sent_right_behind_authenticate_waits_for_its_answer_and_is_served():
    with Front(Handler(), max_unauthenticated_frame=4096) as f:
        with f.raw() as s:
            s.sendall(_frame("authenticate", 1, DelayScheduler.authenticate_args(token="app"))
                      + _frame("get", 2, DelayScheduler.get_args(taskId="y" * 8000)))
            reader = s.makefile("rb")
            assert _answer(s, "authenticate", reader) == "app"
            assert _answer(s, "get", reader).taskId == "y" * 8000
        assert f.closed == []


def test_when_every_connection_has_a_call_in_progress_a_new_one_is_refused():
    handler = Handler()
    handler.hold.clear()
    with Front(handler, max_connections=2) as f:
        busy = f.accepted(2)
        try:
            for s in busy:
                s.sendall(_frame("get", 1, DelayScheduler.get_args(taskId="held")))
            wait_until(lambda: all(c.busy for c in f.server._conns.values()), 5, what="both calls in progress")
            extra = f.raw()
            assert _closed_by_peer(extra)
            extra.close()
            handler.hold.set()
            assert [_answer(s, "get").taskId for s in busy] == ["held", "held"]
        finally:
            for s in busy:
                s.close()
        assert f.closed == ["refused"]


def test_a_new_connection_that_sends_nothing_is_closed_after_the_first_frame_timeout():
    with Front(Handler(), first_frame_timeout=0.3) as f:
        c, trans = f.client()
        try:
            assert c.get("abc").taskId == "abc"
            with f.raw() as silent:
                started = time.monotonic()
                assert _closed_by_peer(silent)
                assert 0.3 <= time.monotonic() - started < 2
            assert c.get("abc").taskId == "abc"     # a client that has called is idle, not new: still open
        finally:
            trans.close()
        assert f.closed == ["first_frame_timeout"]


def test_a_new_connection_is_given_no_longer_than_a_client_between_calls():
    with Front(Handler(), first_frame_timeout=10.0, idle_timeout=0.3) as f, f.raw() as silent:
        started = time.monotonic()
        assert _closed_by_peer(silent)
        assert time.monotonic() - started < 2
        assert f.closed == ["first_frame_timeout"]


def test_a_frame_dribbled_byte_by_byte_is_closed_at_the_frame_deadline():
    frame = _frame("get", 1, DelayScheduler.get_args(taskId="abc"))
    with Front(Handler(), frame_timeout=0.5, idle_timeout=0.3) as f, f.raw() as s:
        started = time.monotonic()
        closed_after = None
        for byte in frame[:-1]:                     # one byte each 0.1 s: each would reset an idle timer
            try:
                s.sendall(bytes([byte]))
            except OSError:
                closed_after = time.monotonic() - started
                break
            s.settimeout(0.1)
            try:
                if s.recv(1) == b"":
                    closed_after = time.monotonic() - started
                    break
            except TimeoutError:
                pass
            except ConnectionResetError:
                closed_after = time.monotonic() - started
                break
        assert closed_after is not None and 0.5 <= closed_after < 1.5
        assert f.closed == ["frame_timeout"]


def test_a_frame_that_arrives_whole_within_the_deadline_is_answered_however_it_trickles_in():
    frame = _frame("get", 1, DelayScheduler.get_args(taskId="abc"))
    with Front(Handler(), frame_timeout=5.0, idle_timeout=0.2) as f, f.raw() as s:
        for i in range(0, len(frame), 4):           # each piece 0.05 s apart: longer in all than the idle timeout
            s.sendall(frame[i:i + 4])
            time.sleep(0.05)
        assert _answer(s, "get").taskId == "abc"


def test_calls_pipelined_past_what_a_connection_holds_are_all_answered_in_order():
    """100 calls sent at once on one connection (the server holds 16 behind the one it serves):
    it stops reading instead of closing, and answers each in turn."""
    with Front(Handler()) as f, f.raw() as s:
        s.sendall(b"".join(_frame("submit", i, DelayScheduler.submit_args(task=_spec(i))) if i % 3 == 0
                           else _frame("get", i, DelayScheduler.get_args(taskId=str(i))) for i in range(1, 101)))
        reader = s.makefile("rb")
        replies = [_reply(reader) for _ in range(100)]
        assert [seqid for _, _, seqid in replies] == list(range(1, 101))
        assert all(kind == TMessageType.REPLY for _, kind, _ in replies)
        assert f.closed == []


def test_a_held_call_with_calls_pipelined_behind_it_keeps_its_connection():
    handler = Handler()
    handler.hold.clear()
    with Front(handler) as f, f.raw() as s:
        s.sendall(_frame("get", 0, DelayScheduler.get_args(taskId="held"))
                  + b"".join(_frame("get", i, DelayScheduler.get_args(taskId=str(i))) for i in range(1, 41)))
        assert handler.entered.wait(5)
        wait_until(lambda: any(c.paused for c in f.server._conns.values()), 5, what="the connection paused")
        handler.hold.set()
        reader = s.makefile("rb")
        assert [_reply(reader)[2] for _ in range(41)] == list(range(41))


def test_a_batch_over_the_limit_is_answered_invalid_and_the_connection_serves_on():
    with Front(Handler()) as f:
        c, trans = f.client()
        try:
            with pytest.raises(ttypes.InvalidTask) as e:
                c.submitBatch([_spec(i) for i in range(1001)])
            assert e.value.field == "tasks" and e.value.reason == "holds 1001 tasks, at most 1000 allowed"
            assert c.submit(_spec(2)).taskId == "id-2"
        finally:
            trans.close()
        with f.raw() as s:          # a short frame that claims five million tasks: not built, answered
            empty = _frame("submitBatch", 7, DelayScheduler.submitBatch_args(tasks=[]))[4:]
            body = empty[:-6] + struct.pack("!bi", 12, 5_000_000) + b"\0\0"   # list header, STOP, STOP
            s.sendall(struct.pack("!i", len(body)) + body)
            answer = _answer(s, "submitBatch")
            assert isinstance(answer, ttypes.InvalidTask) and "holds 5000000 tasks" in answer.reason
        assert f.closed == []


def test_stop_closes_connections_and_joins_every_thread_promptly():
    f = Front(Handler())
    f.__enter__()
    c, trans = f.client()
    assert c.submit(_spec(1)).taskId == "id-1"
    started = time.monotonic()
    f.__exit__(None, None, None)
    assert time.monotonic() - started < 2
    assert not f.server.alive and not f.submits.alive and not f.calls.alive
    with pytest.raises(Exception):      # noqa: B017 - whichever error a closed connection gives
        c.submit(_spec(2))
    trans.close()


def test_a_reply_that_cannot_be_encoded_closes_that_connection_only():
    handler = Handler()
    handler.hold.clear()
    with Front(handler) as f:
        def call(topic):
            c, trans = f.client()
            try:
                return c.submit(_spec(1, topic))
            finally:
                trans.close()

        bad, good = f.accepted(2)
        with bad, good, concurrent.futures.ThreadPoolExecutor(1) as pool:
            first = pool.submit(call, "t")
            assert handler.entered.wait(5)
            bad.sendall(_frame("submit", 1, DelayScheduler.submit_args(task=_spec(1, "unencodable"))))
            good.sendall(_frame("submit", 2, DelayScheduler.submit_args(task=_spec(2))))
            handler.hold.set()
            assert first.result(10).taskId == "id-1"
            with pytest.raises(ConnectionError):
                _answer(bad, "submit")
            assert _answer(good, "submit").taskId == "id-2"
        assert handler.groups == [1, 2]            # the two in one group
        assert call("t").taskId == "id-1"          # submits go on being served


def test_a_client_gone_before_its_large_reply_is_sent_does_not_stop_the_server():
    with Front(Handler()) as f:
        for _ in range(3):
            s = f.raw()
            s.sendall(_frame("get", 1, DelayScheduler.get_args(taskId=str(48 << 20))))   # more than sockets buffer
            got = 0
            while got < 16 << 20:          # the server is sending as the socket takes it
                got += len(s.recv(1 << 20))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()                      # reset, with most of the reply unsent
        assert f.server.alive
        c, trans = f.client()
        try:
            assert c.get("abc").taskId == "abc"
        finally:
            trans.close()


def test_a_client_that_does_not_read_its_reply_is_closed_after_the_idle_timeout():
    with Front(Handler(), max_connections=1, idle_timeout=0.5) as f, f.raw() as s:
        s.sendall(_frame("get", 1, DelayScheduler.get_args(taskId=str(8 << 20))))     # and never reads

        def served():
            try:
                c, trans = f.client(timeout_s=2)
            except Exception:  # noqa: BLE001 - the one place is still taken
                return False
            try:
                return c.get("abc").taskId == "abc"
            except Exception:  # noqa: BLE001 - refused: closed at once
                return False
            finally:
                trans.close()
        wait_until(served, 10, 0.1, what="the place of the client that does not read")


def test_a_client_that_cannot_connect_says_why_and_where():
    with socket.socket() as s:        # a port nobody listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        with pytest.raises(TTransport.TTransportException) as e:
            connect("127.0.0.1", port, 1.0, ClientSecurity(insecure=True))
    assert f"127.0.0.1:{port}" in str(e.value) and "refused" in str(e.value).lower()
