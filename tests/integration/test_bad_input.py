"""Bad input gets a declared exception or a closed connection; the node keeps serving; nothing is
half written."""
from __future__ import annotations

import json
import os
import socket
import struct
import threading
import time
import urllib.request
import uuid

import pytest
from thrift.protocol import TBinaryProtocol
from thrift.Thrift import TMessageType
from thrift.transport import TTransport

from delayq import config, db as dbm
from delayq.client import CallbackService, TaskSpec, connect
from delayq.client.security import ClientSecurity
from delayq.client.gen.delayq_thrift import DelayScheduler, ttypes
from conftest import now_ms, wait_until
from delayq.testing import security

pytestmark = pytest.mark.integration

DAY_MS = 24 * 3600 * 1000


@pytest.fixture(scope="module")
def node(node_factory):
    return node_factory(DELAYQ_MAX_PAYLOAD_BYTES="1024", DELAYQ_MAX_FRAME_BYTES="65536",
                        DELAYQ_IDLE_TIMEOUT_MS="1000", DELAYQ_FIRST_FRAME_TIMEOUT_MS="1000",
                        DELAYQ_THRIFT_WORKERS="4")


@pytest.fixture(scope="module")
def known(node) -> str:
    name = f"t.{uuid.uuid4().hex[:10]}"
    with node.client() as c:
        c.registerService(CallbackService(topic=name, ttrMs=0))
    return name


@pytest.mark.parametrize("spec, field, reason", [
    (dict(topic=""), "topic", "is required"),
    (dict(topic="x" * 129), "topic", "at most 128"),
    (dict(topic="bad topic!"), "topic", "must be"),
    (dict(delayMs=-1), "delayMs", "must not be negative"),
    (dict(delayMs=None), "delayMs", "exactly one"),
    (dict(dueAtMs=1), "delayMs", "exactly one"),
    (dict(delayMs=31 * DAY_MS), "delayMs", "beyond the horizon"),
    (dict(delayMs=None, dueAtMs=-5), "dueAtMs", "must not be negative"),
    (dict(payload=b"x" * 1025), "payload", "at most 1024"),
    (dict(taskId="x" * 65), "taskId", "at most 64"),
    (dict(taskId="has space"), "taskId", "must be"),
    (dict(maxRetries=-1), "maxRetries", "between"),
    (dict(ttrMs=-1), "ttrMs", "between"),
])
def test_invalid_tasks_are_refused_with_the_field_and_reason(node, known, spec, field, reason):
    args = dict(topic=known, delayMs=1000) | spec
    with node.client() as c, pytest.raises(ttypes.InvalidTask) as e:
        c.submit(TaskSpec(**args))
    assert e.value.field == field and reason in e.value.reason and e.value.index is None


def test_a_past_due_time_fires_now_rather_than_being_refused(node, known):
    with node.client() as c:
        ref = c.submit(TaskSpec(topic=known, dueAtMs=now_ms() - 60_000))
    assert abs(ref.dueAtMs - now_ms()) < 5_000


def test_unknown_topic(node):
    with node.client() as c, pytest.raises(ttypes.UnknownTopic) as e:
        c.submit(TaskSpec(topic="nobody.listens", delayMs=10))
    assert e.value.topic == "nobody.listens"


def test_one_bad_task_refuses_the_whole_batch_and_writes_nothing(node, known):
    ids = [f"b-{uuid.uuid4().hex[:8]}" for _ in range(3)]
    specs = [TaskSpec(topic=known, taskId=ids[0], delayMs=60_000),
             TaskSpec(topic=known, taskId=ids[1], delayMs=60_000),
             TaskSpec(topic=known, taskId=ids[2], delayMs=-3)]
    with node.client() as c:
        with pytest.raises(ttypes.InvalidTask) as e:
            c.submitBatch(specs)
        assert (e.value.index, e.value.field) == (2, "delayMs")
        for tid in ids:
            with pytest.raises(ttypes.NotFound):
                c.get(tid)
        with pytest.raises(ttypes.InvalidTask):
            c.submitBatch([])


@pytest.mark.parametrize("bad_at", [None, 0, 200, 599])
def test_a_large_batch_of_generated_ids_is_written_whole_or_not_at_all(node, database, bad_at):
    """600 tasks without ids go to MySQL part by part while the rest is checked: a bad task
    anywhere still refuses the whole batch, and nothing of the parts already sent is written."""
    topic = f"t.{uuid.uuid4().hex[:10]}"
    with node.client() as c:
        c.registerService(CallbackService(topic=topic, ttrMs=0))
        specs = [TaskSpec(topic=topic, delayMs=DAY_MS, payload=b"%d" % i) for i in range(600)]
        if bad_at is None:
            refs = c.submitBatch(specs)
            assert len({r.taskId for r in refs}) == 600 and all(r.created for r in refs)
            assert [c.get(r.taskId).payload for r in refs[::99]] == [b"%d" % i for i in range(0, 600, 99)]
        else:
            specs[bad_at].ttrMs = -1
            with pytest.raises(ttypes.InvalidTask) as e:
                c.submitBatch(specs)
            assert (e.value.index, e.value.field) == (bad_at, "ttrMs")
    engine = dbm.make_engine(config.load({"DELAYQ_MYSQL_URL": database.url}).mysql)
    try:
        with engine.connect() as conn:
            written = conn.exec_driver_sql("SELECT COUNT(*) FROM job_delay_task WHERE topic = %s",
                                           (topic,)).scalar_one()
    finally:
        engine.dispose()
    assert written == (600 if bad_at is None else 0)


def test_a_conflicting_id_refuses_the_batch_and_writes_nothing(node, known):
    taken, fresh = f"c-{uuid.uuid4().hex[:8]}", f"c-{uuid.uuid4().hex[:8]}"
    with node.client() as c:
        c.submit(TaskSpec(topic=known, taskId=taken, delayMs=60_000, payload=b"one"))
        with pytest.raises(ttypes.Conflict) as e:
            c.submitBatch([TaskSpec(topic=known, taskId=fresh, delayMs=60_000),
                           TaskSpec(topic=known, taskId=taken, delayMs=60_000, payload=b"two")])
        assert e.value.taskId == taken
        with pytest.raises(ttypes.NotFound):
            c.get(fresh)


def test_resubmitting_the_same_task_is_idempotent(node, known):
    tid = f"i-{uuid.uuid4().hex[:8]}"
    spec = TaskSpec(topic=known, taskId=tid, delayMs=60_000, payload=b"same")
    with node.client() as c:
        first, again = c.submit(spec), c.submit(spec)
        [dup] = c.submitBatch([spec])
    assert first.created and not again.created and not dup.created
    assert first.dueAtMs == again.dueAtMs == dup.dueAtMs


def test_reschedule_and_get_refuse_what_they_cannot_do(node, known):
    with node.client() as c:
        with pytest.raises(ttypes.NotFound):
            c.reschedule("missing-task", now_ms() + 1000)
        with pytest.raises(ttypes.InvalidTask):
            c.get("")
        ref = c.submit(TaskSpec(topic=known, delayMs=60_000))
        with pytest.raises(ttypes.InvalidTask) as e:
            c.reschedule(ref.taskId, now_ms() + 40 * DAY_MS)
        assert e.value.field == "dueAtMs"


def test_invalid_services_are_refused(node):
    with node.client() as c:
        with pytest.raises(ttypes.InvalidService) as e:
            c.registerService(CallbackService(topic="ok.topic", backoff="sometimes"))
        assert e.value.field == "backoff"
        with pytest.raises(ttypes.InvalidService):
            c.registerService(CallbackService(topic="bad topic"))
        assert "ok.topic" not in {s.topic for s in c.listServices()}


def _raw(node, authenticate: bool = True) -> socket.socket:
    """A connection that frames its own bytes, as a client of the node does: TLS set up and
    (unless told not to) authenticated as test-admin."""
    sock = ClientSecurity.from_env().context().wrap_socket(
        socket.create_connection(("127.0.0.1", node.port), timeout=5), server_hostname="127.0.0.1")
    if not authenticate:
        return sock
    sock.sendall(_frame("authenticate", 0, DelayScheduler.authenticate_args(token=os.environ["DELAYQ_TOKEN"])))
    reader = sock.makefile("rb")
    (size,) = struct.unpack("!i", reader.read(4))
    reply = DelayScheduler.authenticate_result()
    proto = TBinaryProtocol.TBinaryProtocol(TTransport.TMemoryBuffer(reader.read(size)))
    proto.readMessageBegin()
    reply.read(proto)
    assert reply.success == security.ADMIN, reply
    return sock


def _closed_by_peer(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except OSError:         # reset, or TLS cut short
        return True


def test_an_oversized_frame_closes_the_connection_and_the_node_keeps_serving(node, known):
    with _raw(node) as s:
        s.sendall(struct.pack("!i", 1 << 30))     # claims a 1 GiB frame
        assert _closed_by_peer(s)
    with _raw(node) as s:
        s.sendall(struct.pack("!i", 64) + b"\xff" * 64)   # a frame of garbage
        assert _closed_by_peer(s)
    with node.client() as c:
        assert c.submit(TaskSpec(topic=known, delayMs=60_000)).created


@pytest.mark.parametrize("method", ["submit", "submitBatch"])
def test_a_call_that_cannot_be_read_sent_before_any_login_leaves_the_node_serving(node, known, method):
    # A field type byte that names no type (0x80): reading it once stopped the node's Thrift
    # server for every client, while /readyz still answered ok.
    head = TTransport.TMemoryBuffer()
    TBinaryProtocol.TBinaryProtocol(head).writeMessageBegin(method, TMessageType.CALL, 1)
    body = head.getvalue() + b"\x80\x00\x01\x00"
    with ClientSecurity.from_env().context().wrap_socket(
            socket.create_connection(("127.0.0.1", node.port), timeout=5), server_hostname="127.0.0.1") as s:
        s.sendall(struct.pack("!i", len(body)) + body)
        assert _closed_by_peer(s)
    with node.client() as c:
        assert c.submit(TaskSpec(topic=known, delayMs=60_000)).created
    with urllib.request.urlopen(f"http://127.0.0.1:{node.env['DELAYQ_HTTP_PORT']}/readyz", timeout=5) as r:
        ready = json.load(r)
    assert ready["status"] == "ok", ready


def test_a_string_that_is_not_unicode_is_refused_by_the_client_naming_the_field_and_the_client_serves_on(node, known):
    with node.client() as c:
        with pytest.raises(ttypes.InvalidTask) as e:
            c.submit(TaskSpec(topic=known, delayMs=60_000, key="a\ud800b"))
        assert (e.value.field, e.value.index) == ("key", None)
        with pytest.raises(ttypes.InvalidTask) as e:
            c.submitBatch([TaskSpec(topic=known, delayMs=60_000), TaskSpec(topic=known, tags=["ok", "\udfff"])])
        assert (e.value.field, e.value.index) == ("tags", 1)
        # Nothing of the refused requests went out ahead of this one.
        assert c.submit(TaskSpec(topic=known, delayMs=60_000, key="order-42")).created


def test_a_silent_client_is_disconnected_and_cannot_starve_others(node, known):
    silent = [_raw(node) for _ in range(4)]          # as many as the node has workers
    try:
        # Past the idle timeout (1 s) the node drops them and serves a new client again.
        def served() -> bool:
            try:
                with node.client(timeout_s=2) as c:
                    return c.submit(TaskSpec(topic=known, delayMs=60_000)).created
            except Exception:  # noqa: BLE001 - refused while the silent ones hold the workers
                return False
        wait_until(served, 10, 0.2, what="the node to serve again")
        assert all(_closed_by_peer(s) for s in silent)
    finally:
        for s in silent:
            s.close()


def test_concurrent_submits_each_keep_their_own_result(node, known):
    """Concurrent submits share commits; one client's conflict or duplicate is its own business."""
    import concurrent.futures

    shared_id, taken = f"g-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    with node.client() as c:
        c.submit(TaskSpec(topic=known, taskId=taken, delayMs=60_000, payload=b"first"))

    local = threading.local()

    def one(i: int):
        if not hasattr(local, "client"):       # one connection per thread: the node serves 4
            local.client = node.client()
        c = local.client
        try:
            if i % 4 == 0:      # everyone sends the same task: exactly one creates it
                return "same", c.submit(TaskSpec(topic=known, taskId=shared_id, delayMs=60_000, payload=b"s")).created
            if i % 4 == 1:      # a different task under a taken id: refused, alone
                c.submit(TaskSpec(topic=known, taskId=taken, delayMs=60_000, payload=f"other {i}".encode()))
                return "conflict", None
            return "own", c.submitBatch([TaskSpec(topic=known, delayMs=60_000) for _ in range(3)])
        except ttypes.Conflict as e:
            return "conflict", e.taskId

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        results = list(pool.map(one, range(64)))
    same = [r for kind, r in results if kind == "same"]
    assert sorted(same) == [False] * 15 + [True]
    assert [r for kind, r in results if kind == "conflict"] == [taken] * 16
    own = [refs for kind, refs in results if kind == "own"]
    assert len(own) == 32 and all(len(refs) == 3 and all(r.created for r in refs) for refs in own)
    with node.client() as c:
        for refs in own:
            for r in refs:
                assert c.get(r.taskId).topic == known


# ---- the Thrift door of a node with the default limits --------------------------------------------

@pytest.fixture(scope="module")
def door(node_factory):
    """A node with the default payload, batch, frame and connection limits (64). Silent
    connections are not closed by a timeout here, so that only the admission policy can let a new
    client in; a frame must arrive within 1 s."""
    return node_factory(DELAYQ_IDLE_TIMEOUT_MS="60000", DELAYQ_FIRST_FRAME_TIMEOUT_MS="60000",
                        DELAYQ_FRAME_TIMEOUT_MS="1000")


@pytest.fixture(scope="module")
def door_topic(door) -> str:
    name = f"t.{uuid.uuid4().hex[:10]}"
    with door.client() as c:
        c.registerService(CallbackService(topic=name, ttrMs=0))
    return name


def _closes(node, reason: str) -> float:
    """delayq_thrift_connections_closed_total{reason} of the node."""
    return node.metrics(labelled=True).get(f'delayq_thrift_connections_closed_total{{reason="{reason}"}}', 0.0)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("size", [69_633, 2 << 20])
def test_a_payload_over_the_limit_is_answered_and_the_connection_serves_on(door, door_topic, size):
    c, trans = connect("127.0.0.1", door.port, 10)
    try:
        with pytest.raises(ttypes.InvalidTask) as e:
            c.submit(TaskSpec(topic=door_topic, delayMs=60_000, payload=b"x" * size))
        assert e.value.field == "payload" and "at most 65536" in e.value.reason and e.value.index is None
        assert c.submit(TaskSpec(topic=door_topic, delayMs=60_000)).created      # the same connection
    finally:
        trans.close()


@pytest.mark.timeout(60)
def test_a_batch_over_the_limit_is_answered_and_the_connection_serves_on(door, door_topic):
    ids = [f"o-{uuid.uuid4().hex[:8]}" for _ in range(3)]
    c, trans = connect("127.0.0.1", door.port, 10)
    try:
        with pytest.raises(ttypes.InvalidTask) as e:
            c.submitBatch([TaskSpec(topic=door_topic, delayMs=60_000) for _ in range(1001)])
        assert (e.value.field, e.value.reason) == ("tasks", "holds 1001 tasks, at most 1000 allowed")
        with pytest.raises(ttypes.InvalidTask) as e:
            c.submitBatch([TaskSpec(topic=door_topic, taskId=ids[0], delayMs=60_000),
                           TaskSpec(topic=door_topic, taskId=ids[1], delayMs=60_000, payload=b"x" * (1 << 20)),
                           TaskSpec(topic=door_topic, taskId=ids[2], delayMs=60_000)])
        assert (e.value.field, e.value.index) == ("payload", 1)
        for tid in ids:
            with pytest.raises(ttypes.NotFound):
                c.get(tid)
        assert len(c.submitBatch([TaskSpec(topic=door_topic, delayMs=60_000) for _ in range(1000)])) == 1000
    finally:
        trans.close()


def _frame(name: str, seqid: int, args) -> bytes:
    buf = TTransport.TMemoryBuffer()
    proto = TBinaryProtocol.TBinaryProtocol(buf)
    proto.writeMessageBegin(name, TMessageType.CALL, seqid)
    args.write(proto)
    proto.writeMessageEnd()
    return struct.pack("!i", len(buf.getvalue())) + buf.getvalue()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("calls", [18, 100])
def test_calls_pipelined_on_one_connection_are_all_answered(door, door_topic, calls):
    """As the Node.js client sends concurrent calls: all at once on one connection."""
    with door.client() as c:
        tid = c.submit(TaskSpec(topic=door_topic, delayMs=60_000)).taskId
    with _raw(door) as s:
        s.sendall(b"".join(_frame("get", i, DelayScheduler.get_args(taskId=tid)) for i in range(calls)))
        reader = s.makefile("rb")
        seqids = []
        for _ in range(calls):
            (size,) = struct.unpack("!i", reader.read(4))
            proto = TBinaryProtocol.TBinaryProtocol(TTransport.TMemoryBuffer(reader.read(size)))
            _, kind, seqid = proto.readMessageBegin()
            result = DelayScheduler.get_result()
            result.read(proto)
            assert kind == TMessageType.REPLY and result.success.taskId == tid
            seqids.append(seqid)
    assert seqids == list(range(calls))


@pytest.mark.timeout(60)
def _accepted(node) -> int:
    """Thrift connections the node process has accepted: its socket fds bound to the node's port
    (its other connections, to MySQL or RabbitMQ, come and go and are not counted)."""
    port = f"{node.port:04X}"
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[1].rsplit(":", 1)[1] == port and fields[3] == "01":      # local port, ESTABLISHED
                inodes.add(fields[9])
    fd_dir = f"/proc/{node.proc.pid}/fd"
    count = 0
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(f"{fd_dir}/{fd}")
        except OSError:
            continue
        count += target.startswith("socket:[") and target[8:-1] in inodes
    return count


def test_silent_connections_at_the_limit_do_not_keep_a_client_out(door, door_topic):
    # Connections that never said who they are: an authenticated one is never pushed out for a
    # newcomer (tests/unit/test_server.py), so these are the ones a flood would be made of.
    evicted = _closes(door, "evicted")
    before = _accepted(door)
    silent = [_raw(door, authenticate=False) for _ in range(64)]         # as many as the node admits
    try:
        wait_until(lambda: _accepted(door) >= before + 64, 10, what="64 connections accepted")
        started = time.monotonic()
        c, trans = connect("127.0.0.1", door.port, 5)
        try:
            assert c.submit(TaskSpec(topic=door_topic, delayMs=60_000)).created
        finally:
            trans.close()
        assert time.monotonic() - started < 2
        assert _closes(door, "evicted") == evicted + 1
        assert _closed_by_peer(silent[0])            # the one idle longest gave way
    finally:
        for s in silent:
            s.close()


@pytest.mark.timeout(60)
def test_a_dribbled_frame_is_closed_at_the_frame_deadline(door):
    frame = _frame("get", 1, DelayScheduler.get_args(taskId="x" * 40))
    with _raw(door) as s:
        s.settimeout(0.2)
        started, closed_after = time.monotonic(), None
        for byte in frame[:-1]:          # a byte each 0.2 s: the frame would take over 10 s
            try:
                s.sendall(bytes([byte]))
                if s.recv(1) == b"":
                    closed_after = time.monotonic() - started
                    break
            except TimeoutError:
                continue
            except OSError:
                closed_after = time.monotonic() - started
                break
    assert closed_after is not None and 1.0 <= closed_after < 3.0
    assert _closes(door, "frame_timeout") >= 1
