"""ZkSession: the node's ZooKeeper session and the one thread its events are handled on.

    session = ZkSession(settings.zk, ZkPaths(cluster).root)
    session.subscribe(listener)          # listener(state, session_id): "connected" | "suspended" | "lost"
    session.start(timeout=10)
    session.client.get_children(path, watch=session.watcher(on_change))

kazoo calls its state listeners and watch callbacks on its own threads, which must never block
(kazoo docs; issues #381, #356). Here they only queue work: every subscriber, every watch callback
and every `post`ed function runs in order on the session's own thread, "zk-events", where it may
call ZooKeeper synchronously.

States: "connected" is sent for the first session and for each new one after a loss (with the new
session id), and again when a suspended session resumes; "suspended" when the connection dropped
(the session may still be alive: stop acting on what we own); "lost" when the session expired
(every ephemeral node is gone: drop everything, register afresh on the next "connected").
"""
from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from typing import Callable

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import ConnectionLoss, KazooException
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from delayq import zkauth
from delayq.config import ZkSettings
from delayq.errors import ConfigError, Unavailable

log = logging.getLogger(__name__)

Listener = Callable[[str, int | None], None]
RECONNECT_MAX_S = 0.25


class ZkSession:
    def __init__(self, settings: ZkSettings, cluster_root: str):
        self.client = KazooClient(
            timeout=settings.session_timeout_ms / 1000.0, **zkauth.connection_args(settings),
            # Reconnect attempts at most RECONNECT_MAX_S apart (kazoo's default backoff reaches a
            # second and more, with jitter): nodes resume within a fraction of a second of
            # ZooKeeper answering again. An attempt to a member that is down costs a refused connect.
            connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=RECONNECT_MAX_S, max_jitter=0.2),
            command_retry=KazooRetry(max_tries=3, delay=0.1, max_delay=1.0))
        self._call_timeout = max(2.0, settings.session_timeout_ms / 1000.0)
        self._auth, self._root = settings.auth, cluster_root
        self._hosts = settings.hosts       # as given: kazoo keeps them parsed
        self._listeners: list[Listener] = []
        self._cond = threading.Condition()
        self._tasks: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="zk-events", daemon=True)
        self.state = "disconnected"
        self.client.add_listener(self._on_state)

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def start(self, timeout: float = 15.0) -> None:
        try:
            self.client.start(timeout=timeout)
        except KazooTimeoutError:
            self.stop()
            raise Unavailable(f"ZooKeeper at {self._hosts} did not answer within {timeout:.0f} s") from None
        # The cluster's znode must be this identity's alone before anything is read or written
        # under it: one made by another identity is refused (ConfigError), and the node stops.
        # Every call here has a deadline (the session timeout).
        deadline = time.monotonic() + timeout
        while True:
            try:
                zkauth.claim_cluster(self.client, self._auth, self._root, self._call_timeout)
                break
            except ConfigError:
                self.stop()
                raise
            except (KazooException, KazooTimeoutError) as e:
                if time.monotonic() > deadline:
                    self.stop()
                    raise Unavailable(f"could not check {self._root} in ZooKeeper: {zkauth.describe(e)}") from None
                log.warning("could not check %s yet: %s", self._root, zkauth.describe(e))
                time.sleep(RECONNECT_MAX_S)
        # Only now do subscribers hear of the session (kazoo's events wait in the queue meanwhile):
        # nothing is registered under a cluster znode before it was found to be ours.
        self._thread.start()
        # kazoo reports the first CONNECTED before start() returns only to listeners added earlier.
        self.post(lambda: self._notify("connected"))

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        try:
            self.client.stop()
            self.client.close()
        finally:
            if self._thread.is_alive():
                self._thread.join(5)

    @property
    def session_id(self) -> int | None:
        cid = self.client.client_id
        return cid[0] if cid else None

    def call(self, method: str, *args, **kwargs):
        """A ZooKeeper call with a deadline (the session timeout). kazoo's plain calls wait for as
        long as the connection is down; a timeout here raises ConnectionLoss like a dropped one."""
        try:
            return getattr(self.client, f"{method}_async")(*args, **kwargs).get(timeout=self._call_timeout)
        except KazooTimeoutError:
            raise ConnectionLoss(f"ZooKeeper did not answer {method} within {self._call_timeout:.0f} s") from None

    def post(self, fn: Callable[[], None], delay: float = 0.0) -> None:
        """Run fn on the session thread, after delay seconds."""
        with self._cond:
            heapq.heappush(self._tasks, (time.monotonic() + delay, next(self._seq), fn))
            self._cond.notify_all()

    def watcher(self, fn: Callable[[], None]) -> Callable[[object], None]:
        """A kazoo watch callback that runs fn on the session thread."""
        return lambda _event: self.post(fn)

    def _on_state(self, state: str) -> None:
        # On a kazoo thread: never block here.
        name = {KazooState.CONNECTED: "connected", KazooState.SUSPENDED: "suspended", KazooState.LOST: "lost"}[state]
        self.post(lambda: self._notify(name))

    def _notify(self, name: str) -> None:
        if name == "connected" and not self.client.connected:
            return     # stale: the connection dropped again before we got here
        if name == self.state == "connected":
            return     # start() and the listener may both report the first connection
        self.state = name
        sid = self.session_id if name == "connected" else None
        if name == "connected":
            log.info("ZooKeeper session 0x%x connected", sid or 0)
        elif name == "suspended":
            log.warning("ZooKeeper connection suspended: not claiming until it resumes")
        else:
            log.warning("ZooKeeper session lost: dropping every shard, registering afresh")
        for listener in self._listeners:
            listener(name, sid)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stop and (not self._tasks or self._tasks[0][0] > time.monotonic()):
                    wait = None if not self._tasks else self._tasks[0][0] - time.monotonic()
                    self._cond.wait(wait)
                if self._stop:
                    return
                _, _, fn = heapq.heappop(self._tasks)
            try:
                fn()
            except Exception:  # noqa: BLE001 - one failing handler must not stop the others
                log.exception("ZooKeeper event handler failed")
