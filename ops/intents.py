"""What the `delayq` ops commands do to a running cluster: record intent in ZooKeeper, then wait
until the cluster reports it applied. Only the master changes the assignment; these functions never
write it (delayq.master.intents records what is asked). Each call opens its own short ZooKeeper session."""
from __future__ import annotations

import contextlib
import time
from typing import Callable, Iterator

from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from thrift.Thrift import TException

from delayq import zkauth
from delayq.client import DelayqClient
from delayq.client.gen.delayq_thrift import ttypes
from delayq.config import Settings
from delayq.errors import ConfigError, Unavailable
from delayq.master.intents import Call, kazoo_call
from delayq.ops.common import node_endpoints
from delayq.zkpaths import AssignmentDoc, ZkPaths


@contextlib.contextmanager
def zk_session(settings: Settings) -> Iterator[Call]:
    """A short ZooKeeper session as delayq's identity; yields its calls (each with a deadline).
    A refused identity is a ConfigError naming the setting."""
    timeout = settings.zk.session_timeout_ms / 1000.0
    zk = KazooClient(timeout=timeout, **zkauth.connection_args(settings.zk))
    try:
        zk.start(timeout=timeout)
    except KazooTimeoutError:
        raise Unavailable(f"ZooKeeper at {settings.zk.hosts} did not answer") from None
    try:
        zkauth.ensure_root(zk, settings.zk.auth, timeout)
        yield kazoo_call(zk, max(2.0, timeout))
    except NoAuthError:
        raise ConfigError(zkauth.refused(settings.zk.auth)) from None
    finally:
        zk.stop()
        zk.close()


def wait_applied(call: Call, paths: ZkPaths, zxid: int, timeout_s: float) -> AssignmentDoc | None:
    """Wait until the master has written an assignment that took these intents into account."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            doc = AssignmentDoc.decode(call("get", paths.assignment)[0])
            if doc.intents_zxid >= zxid:
                return doc
        except NoNodeError:
            pass
        if time.monotonic() > deadline:
            return None
        time.sleep(0.1)


def cluster_info(settings: Settings, endpoints: list[str]) -> ttypes.ClusterInfo:
    found = node_endpoints(settings, endpoints)
    try:
        with DelayqClient(found) as c:
            return c.cluster()
    except (TException, OSError) as e:
        raise Unavailable(f"no node answered: {e}") from None


def wait_for(settings: Settings, endpoints: list[str], done: Callable[[ttypes.ClusterInfo], bool],
             timeout_s: float) -> ttypes.ClusterInfo | None:
    """Poll the cluster until done(info); None when the timeout passed first."""
    deadline = time.monotonic() + timeout_s
    while True:
        info = cluster_info(settings, endpoints)
        if done(info):
            return info
        if time.monotonic() > deadline:
            return None
        time.sleep(0.25)
