"""discover: the endpoints of a cluster's live nodes as ZooKeeper lists them. Deprecated with
DelayqClient.from_zookeeper, its one use by clients: it reads ZooKeeper as the nodes' own identity,
which only operators (and the `delayq` command) should hold. Clients ask a node instead
(DelayqClient.from_seeds, the Thrift call `endpoints`).
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING

from delayq.client.gen.delayq_thrift import ttypes
from delayq.client.security import ClientSecurity

if TYPE_CHECKING:
    from delayq.config import ZkSettings


def discover(zk_hosts: str, cluster: str = "default", timeout_s: float = 5.0, zk_auth: str | None = None) -> list[str]:
    """The Thrift endpoints of the live nodes of a cluster, read from ZooKeeper as delayq's
    identity (`zk_auth`, user:password; default: ClientSecurity.from_env().zk_auth). ConfigError
    when ZooKeeper refuses that identity (none given, or not the nodes')."""
    from delayq.config import ZkSettings
    auth = ClientSecurity.from_env().zk_auth if zk_auth is None else zk_auth
    return live_members(ZkSettings(zk_hosts, auth, False, "", "", "", int(timeout_s * 1000), True), cluster)


def live_members(settings: "ZkSettings", cluster: str) -> list[str]:
    """discover, with every ZooKeeper setting of a node (TLS included): for `delayq` commands.
    Every call waits at most the session timeout."""
    from kazoo.client import KazooClient
    from kazoo.exceptions import NoAuthError, NoNodeError
    from kazoo.handlers.threading import KazooTimeoutError

    from delayq import zkauth
    from delayq.errors import ConfigError
    from delayq.zkpaths import ZkPaths

    paths = ZkPaths(cluster)
    auth, zk_hosts, timeout_s = settings.auth, settings.hosts, settings.session_timeout_ms / 1000.0
    zk = KazooClient(timeout=timeout_s, **zkauth.connection_args(settings))
    try:
        zk.start(timeout=timeout_s)
    except KazooTimeoutError:
        raise ttypes.Unavailable(reason=f"ZooKeeper at {zk_hosts} did not answer") from None
    try:
        endpoints = []
        for member in zk.get_children_async(paths.nodes).get(timeout=timeout_s):
            try:
                endpoints.append(json.loads(zk.get_async(paths.member(member)).get(timeout=timeout_s)[0])["endpoint"])
            except (NoNodeError, ValueError, KeyError):
                continue
        return sorted(endpoints)
    except NoNodeError:
        return []
    except NoAuthError:
        raise ConfigError(zkauth.refused(auth)) from None
    except KazooTimeoutError:
        raise ttypes.Unavailable(reason=f"ZooKeeper at {zk_hosts} did not answer") from None
    finally:
        zk.stop()
        zk.close()
