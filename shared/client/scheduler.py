"""DelayqClient: the Python client for business systems.

    with DelayqClient(["127.0.0.1:9090"], timeout_s=5) as dq:
        ref = dq.submit(TaskSpec(topic="order.cancel", taskId="order-42", delayMs=30_000, payload=b"42"))

Security: it connects over TLS and authenticates with a token, as ClientSecurity says
(delayq.client.security; by default read from the environment: DELAYQ_TLS_CA_FILE, DELAYQ_TOKEN
or DELAYQ_TOKEN_FILE, ...). Unauthenticated and Forbidden are raised as the node declares them and
never retried elsewhere: every node would answer the same.

It spreads calls over the endpoints it is given, or over the live nodes one or a few seed
endpoints name (`DelayqClient.from_seeds(["node1:9090", "node2:9090"])`: the `endpoints` call,
which any authenticated client may make), and retries a call that failed because a node was
unreachable or answered Unavailable on the next one (a submit is safe to retry when it carries a
taskId; so is `touch`, a running attempt's heartbeat). Every call has a timeout. Not thread-safe:
use one client per thread (`twin()` makes another over the same nodes).

A node closes a connection that stays silent (`DELAYQ_IDLE_TIMEOUT_MS`, 60 s by default). Before
each call the client looks whether its node has closed the connection meanwhile and, if so,
connects again first: nothing was sent on the closed one, so even a submit without a taskId is
safe. Only a close that crosses the call on the wire (the node's idle timer ends as the call
leaves) still fails it.
"""
from __future__ import annotations

import random
import select
import socket
import ssl
import warnings
from typing import Any, Callable, Sequence

from thrift.protocol import TBinaryProtocol
from thrift.Thrift import TException
from thrift.transport import TSocket, TSSLSocket, TTransport

from delayq.client.gen.delayq_thrift import DelayScheduler, ttypes
from delayq.client.security import ClientSecurity
from delayq.client.zkdiscovery import discover


def parse_endpoint(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return (host or "127.0.0.1"), int(port)


def connect(host: str, port: int, timeout_s: float = 5.0, security: ClientSecurity | None = None
            ) -> tuple[DelayScheduler.Client, TTransport.TTransportBase]:
    """One connection to one node, authenticated: (client, transport); close the transport when
    done. `security`: ClientSecurity.from_env() when not given."""
    client, transport, _ = _open(host, port, timeout_s, security or ClientSecurity.from_env())
    return client, transport


def _open(host: str, port: int, timeout_s: float, security: ClientSecurity
          ) -> tuple[DelayScheduler.Client, TTransport.TTransportBase, TSocket.TSocket]:
    context = security.context()
    sock = (TSocket.TSocket(host, port) if context is None
            else TSSLSocket.TSSLSocket(host, port, ssl_context=context, server_hostname=host))
    sock.setTimeout(int(timeout_s * 1000))
    transport = TTransport.TFramedTransport(sock)
    try:
        transport.open()
    except TTransport.TTransportException as e:
        if isinstance(e.inner, ssl.SSLError):      # say why, not only "could not connect"
            raise TTransport.TTransportException(
                TTransport.TTransportException.NOT_OPEN,
                f"TLS with {host}:{port} failed: {e.inner.reason or e.inner} (does DELAYQ_TLS_CA_FILE hold the CA "
                "of the nodes' certificates, and do the nodes serve TLS?)", e.inner) from None
        if isinstance(e.inner, OSError):           # thrift's message names the address, not the reason
            raise TTransport.TTransportException(
                TTransport.TTransportException.NOT_OPEN,
                f"could not connect to {host}:{port}: {e.inner.strerror or e.inner}", e.inner) from None
        raise
    # A framed call goes out in one write, but over TLS as several records: without TCP_NODELAY
    # the last one waits for the node's delayed ACK (40 ms per large call; measured: a 1000-task
    # submitBatch went from 89,606 to 17,277 tasks/s over TLS, `python -m bench --scenario submit`).
    sock.handle.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    client = DelayScheduler.Client(TBinaryProtocol.TBinaryProtocolAccelerated(transport))
    if security.token and not security.insecure:
        try:
            client.authenticate(security.token)
        except BaseException:
            transport.close()
            raise
    return client, transport, sock


def closed_by_peer(sock: TSocket.TSocket) -> bool:
    """True when the node has closed (or reset) this idle connection: between calls a node sends
    nothing, so anything readable on the socket is its end of stream or an error."""
    handle = sock.handle
    if handle is None:
        return True
    try:
        readable, _, _ = select.select([handle], [], [], 0)
        if readable and isinstance(handle, ssl.SSLSocket):
            return True         # a node sends no TLS bytes between calls but its close (no session tickets)
        return bool(readable) and not handle.recv(1, socket.MSG_PEEK)
    except OSError:
        return True


class DelayqClient:
    def __init__(self, endpoints: Sequence[str], timeout_s: float = 5.0, rng: random.Random | None = None,
                 rediscover: Callable[[], list[str]] | None = None, security: ClientSecurity | None = None):
        if not endpoints:
            raise ValueError("no delayq endpoints given")
        self._security = security or ClientSecurity.from_env()
        self._rng = rng or random.Random()
        self._endpoints = [parse_endpoint(e) for e in endpoints]
        self._rng.shuffle(self._endpoints)
        self._rediscover = rediscover
        self._timeout_s = timeout_s
        self._current: tuple[DelayScheduler.Client, TTransport.TTransportBase, TSocket.TSocket] | None = None
        self._index = 0

    @classmethod
    def from_seeds(cls, seeds: Sequence[str], timeout_s: float = 5.0,
                   security: ClientSecurity | None = None) -> "DelayqClient":
        """A client over the cluster's live nodes, as the first of `seeds` (host:port of one or a
        few nodes) that answers names them; when none of them answers any more, the nodes are
        asked again (those last known, then the seeds). Needs the client's own token only."""
        security = security or ClientSecurity.from_env()
        found = live_endpoints(seeds, timeout_s, security)
        if not found:
            raise ttypes.Unavailable(reason="the seed nodes named no live node")
        known = list(found)

        def again() -> list[str]:
            fresh = live_endpoints(list(dict.fromkeys([*known, *seeds])), timeout_s, security, quiet=True)
            known[:] = fresh or known
            return fresh
        return cls(found, timeout_s, rediscover=again, security=security)

    @classmethod
    def from_zookeeper(cls, zk_hosts: str, cluster: str = "default", timeout_s: float = 5.0,
                       security: ClientSecurity | None = None) -> "DelayqClient":
        """Deprecated: use from_seeds. A client over the cluster's live nodes as ZooKeeper lists
        them, read as the nodes' own ZooKeeper identity (ClientSecurity.zk_auth), which a
        business client should not hold."""
        warnings.warn("DelayqClient.from_zookeeper needs the nodes' ZooKeeper identity and is deprecated: "
                      "use DelayqClient.from_seeds", DeprecationWarning, stacklevel=2)
        auth = (security or ClientSecurity.from_env()).zk_auth
        found = discover(zk_hosts, cluster, timeout_s, auth)
        if not found:
            raise ttypes.Unavailable(reason=f"no live delayq node in cluster {cluster!r}")
        return cls(found, timeout_s, rediscover=lambda: discover(zk_hosts, cluster, timeout_s, auth),
                   security=security)

    def twin(self) -> "DelayqClient":
        """A client over the same endpoints and security with a connection of its own, for another
        thread (the consumer helper's heartbeats run beside a handler that may use this one)."""
        return DelayqClient([f"{h}:{p}" for h, p in self._endpoints], self._timeout_s, rediscover=self._rediscover,
                            security=self._security)

    def __enter__(self) -> "DelayqClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._current is not None:
            self._current[1].close()
            self._current = None

    def __getattr__(self, method: str) -> Any:
        if not hasattr(DelayScheduler.Iface, method):
            raise AttributeError(method)
        return lambda *args: self._call(method, args)

    def _call(self, method: str, args: tuple, rediscover: bool = True) -> Any:
        last: Exception | None = None
        for _ in range(max(2, len(self._endpoints))):
            if self._current is not None and closed_by_peer(self._current[2]):
                self.close()         # closed while idle: nothing was sent on it, connect again
            try:
                if self._current is None:
                    host, port = self._endpoints[self._index % len(self._endpoints)]
                    self._current = _open(host, port, self._timeout_s, self._security)
            except (TTransport.TTransportException, OSError) as e:
                last = e             # never reached the node: always safe to try the next one
                self._current = None
                self._index += 1
                continue
            try:
                return getattr(self._current[0], method)(*args)
            except ttypes.Unavailable as e:
                last = e             # the node wrote nothing: try the next one
            except (TTransport.TTransportException, OSError) as e:
                if not _idempotent(method, args):
                    self.close()
                    raise            # the node may have applied it: retrying could submit twice
                last = e
            except TException:
                raise                # declared by the node and read whole: the connection serves on
            except Exception as e:
                # Raised while the request was being written (a string that is not valid Unicode):
                # its first bytes may wait in the transport's buffer, to go out ahead of the next
                # call, so the connection is not used again. Nothing reached the node.
                self.close()
                refused = _invalid_text(method, args) if isinstance(e, UnicodeEncodeError) else None
                if refused is not None:
                    raise refused from e
                raise
            self.close()
            self._index += 1
        assert last is not None
        if rediscover and self._rediscover is not None:
            fresh = [parse_endpoint(e) for e in self._rediscover()]
            if fresh and set(fresh) != set(self._endpoints):
                self._endpoints = fresh
                self._rng.shuffle(self._endpoints)
                return self._call(method, args, rediscover=False)
        raise last


def live_endpoints(seeds: Sequence[str], timeout_s: float = 5.0, security: ClientSecurity | None = None,
                   quiet: bool = False) -> list[str]:
    """The live nodes' endpoints, as the first of `seeds` that answers names them. `quiet`: []
    rather than the error when none answers (Unauthenticated is raised whatever `quiet` says)."""
    try:
        with DelayqClient(seeds, timeout_s, security=security) as seed:
            return list(seed.endpoints().endpoints)
    except (TTransport.TTransportException, OSError, ttypes.Unavailable):
        if quiet:
            return []
        raise


# Calls whose repeat after a lost answer would not answer as the first did: the token addClient
# returns is lost to an "exists already", a revoked grant is "not held" the second time, a bulk job
# would be started twice.
_ONCE = frozenset({"addClient", "revokeClient", "rotateClient", "bulkStart"})


def _invalid_text(method: str, args: tuple) -> ttypes.InvalidTask | None:
    """A submit's InvalidTask naming the first task field (and the task's index in a batch)
    whose text cannot be sent as UTF-8, as the node would name a field it refuses."""
    if method not in ("submit", "submitBatch") or not args:
        return None
    tasks = [args[0]] if method == "submit" else list(args[0] or ())
    for index, task in enumerate(tasks):
        for field, value in vars(task).items():
            texts = value if isinstance(value, list) else [value]
            if any(isinstance(t, str) and not _encodes(t) for t in texts):
                return ttypes.InvalidTask(field=field, reason="is not valid Unicode text (a lone surrogate)",
                                          index=index if method == "submitBatch" else None)
    return None


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _idempotent(method: str, args: tuple) -> bool:
    if method in _ONCE:
        return False
    if method == "submit":
        return bool(args and args[0].taskId)
    if method == "submitBatch":
        return bool(args and all(t.taskId for t in args[0]))
    return True
