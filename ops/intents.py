"""What the `delayq` ops commands do to a running cluster: record intent in ZooKeeper, then wait
until the cluster reports it applied. Only the master changes the assignment; these functions never
write it. Each call opens its own short ZooKeeper session."""
from __future__ import annotations

import contextlib
import time
from typing import Callable, Iterator

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError
from thrift.Thrift import TException

from delayq import zkauth
from delayq.client import DelayqClient, discover
from delayq.client.gen.delayq_thrift import ttypes
from delayq.config import Settings
from delayq.errors import Unavailable
from delayq.zkpaths import AssignmentDoc, Intents, ZkPaths


@contextlib.contextmanager
def zk_session(settings: Settings) -> Iterator[KazooClient]:
    timeout = settings.zk.session_timeout_ms / 1000.0
    zk = KazooClient(hosts=settings.zk.hosts, timeout=timeout, **zkauth.kazoo_args(settings.zk.auth))
    try:
        zk.start(timeout=timeout)
    except KazooTimeoutError:
        raise Unavailable(f"ZooKeeper at {settings.zk.hosts} did not answer") from None
    try:
        zkauth.ensure_root(zk, settings.zk.auth, timeout)
        yield zk
    finally:
        zk.stop()
        zk.close()


def read_intents(zk: KazooClient, paths: ZkPaths) -> Intents:
    try:
        return Intents.decode(zk.get(paths.intents)[0])
    except NoNodeError:
        return Intents()


def update_intents(zk: KazooClient, paths: ZkPaths, change: Callable[[Intents], Intents]) -> tuple[Intents, int]:
    """Apply `change` to the intents with a version check, retrying when someone else wrote first.
    Returns the new intents and their zxid, which the master echoes once it has applied them."""
    while True:
        try:
            data, stat = zk.get(paths.intents)
            version = stat.version
        except NoNodeError:
            data, version = None, None
        new = change(Intents.decode(data))
        try:
            if version is None:
                zk.create(paths.intents, new.encode(), makepath=True)
                return new, zk.exists(paths.intents).mzxid
            return new, zk.set(paths.intents, new.encode(), version=version).mzxid
        except (BadVersionError, NodeExistsError):
            continue


def wait_applied(zk: KazooClient, paths: ZkPaths, zxid: int, timeout_s: float) -> AssignmentDoc | None:
    """Wait until the master has written an assignment that took these intents into account."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            doc = AssignmentDoc.decode(zk.get(paths.assignment)[0])
            if doc.intents_zxid >= zxid:
                return doc
        except NoNodeError:
            pass
        if time.monotonic() > deadline:
            return None
        time.sleep(0.1)


def cluster_info(settings: Settings, endpoints: list[str]) -> ttypes.ClusterInfo:
    found = endpoints or discover(settings.zk.hosts, settings.node.cluster, settings.zk.session_timeout_ms / 1000,
                                  settings.zk.auth)
    if not found:
        raise Unavailable(f"no live node in cluster {settings.node.cluster!r}")
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
