"""Fresh databases and real node processes: the harness of delayq's tests and benchmark.

    with Cluster(logs=dir, shards=64, zk=False) as cl:      # own database, migrated, shards created
        node = cl.add_node()                                 # `python -m delayq node`, waits until it serves
        node.rss_kb(); node.kill(); node.start()
    # nodes stopped, database dropped, ZooKeeper tree deleted

The database part is delayq.testing.database, the process part delayq.testing.process; their names
are importable from here too. The services are those of delayq.testing.services.
"""
from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Callable

from delayq import config, db as dbm
from delayq.client import CallbackService
from delayq.client.gen.delayq_thrift import ttypes
from delayq.testing import security
from delayq.testing.database import Database, fresh_database
from delayq.testing.ports import free_port
from delayq.testing.process import Node, now_ms, wait_for
from delayq.testing.services import AMQP_URL, MYSQL_SERVER, ZK_HOSTS, delete_zk_tree

__all__ = ["Cluster", "Database", "Node", "free_port", "fresh_database", "node_env", "now_ms", "wait_for"]


def node_env(db: Database, node_id: str, zk: bool = False, **settings: object) -> dict[str, str]:
    """The environment of a node of db's cluster: this process's environment without its DELAYQ_
    settings, the services, free ports, TLS and the admin's token (so that `delayq` commands run
    with a node's environment call the nodes as test-admin; delayq.testing.security), then `settings`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DELAYQ_")}
    env.update({**security.node_environment(), **security.client_environment()})
    env.update({
        "DELAYQ_MYSQL_URL": db.node_url or db.url, "DELAYQ_AMQP_URL": AMQP_URL, "DELAYQ_ZK_HOSTS": ZK_HOSTS,
        "DELAYQ_PORT": str(free_port()), "DELAYQ_HTTP_PORT": str(free_port()),
        "DELAYQ_NODE_ID": node_id, "DELAYQ_CLUSTER": db.name,
        "DELAYQ_ZK_ENABLED": "true" if zk else "false", "PYTHONUNBUFFERED": "1",
    })
    env.update({k: str(v) for k, v in settings.items()})
    return env


class Cluster:
    """A fresh database (own cluster name) and the nodes started against it; all gone on exit.

    node_settings apply to every node; add_node(**overrides) to one."""

    def __init__(self, logs: Path, shards: int = 64, zk: bool = False, prefix: str = "delayq_t_",
                 on_start: Callable[[int, str], None] | None = None, server: str = MYSQL_SERVER,
                 **node_settings: object):
        self.logs, self.shards, self.zk, self.prefix, self.on_start = logs, shards, zk, prefix, on_start
        self.server = server
        self.node_settings = node_settings
        self.nodes: list[Node] = []
        self._stack = contextlib.ExitStack()
        self.db: Database | None = None

    @property
    def database(self) -> Database:
        if self.db is None:
            raise RuntimeError("the cluster has no database before `with Cluster(...)`")
        return self.db

    @property
    def name(self) -> str:
        return self.database.name

    @property
    def url(self) -> str:
        return self.database.url

    def __enter__(self) -> "Cluster":
        self.db = self._stack.enter_context(fresh_database(self.shards, self.prefix, self.server))
        return self

    def __exit__(self, *exc) -> None:
        with self._stack:
            for node in self.nodes:
                try:
                    node.stop()
                except Exception:  # noqa: BLE001 - clean up the rest regardless
                    pass
            if self.zk:
                delete_zk_tree(f"/delayq/{self.name}")

    def engine(self):
        return dbm.make_engine(config.load({"DELAYQ_MYSQL_URL": self.url,
                                            "DELAYQ_MYSQL_HOSTS": str(self.node_settings.get("DELAYQ_MYSQL_HOSTS", ""))}).mysql)

    def add_node(self, start: bool = True, **overrides: object) -> Node:
        env = node_env(self.database, f"n{len(self.nodes) + 1}", self.zk, **{**self.node_settings, **overrides})
        node = Node(env, self.logs / f"{self.name}-{env['DELAYQ_NODE_ID']}.log", self.on_start)
        self.nodes.append(node)
        return node.start() if start else node

    def register(self, topic: str) -> None:
        """A callback service expecting no result (ttr 0): tasks finish at the broker's confirm."""
        with self.nodes[0].client() as c:
            c.registerService(CallbackService(topic=topic, ttrMs=0))

    def wait_balanced(self, timeout: float = 30.0):
        """ZooKeeper mode: every shard assigned, to every live node, balanced to +-1."""
        live = {n.node_id for n in self.nodes if n.alive()}

        def balanced() -> ttypes.ClusterInfo | None:
            with next(n for n in self.nodes if n.alive()).client() as c:
                ci = c.cluster()
            counts: dict[str, int] = {}
            for owner in ci.assignment.values():
                counts[owner] = counts.get(owner, 0) + 1
            ok = (len(ci.assignment) == self.shards and set(counts) == live
                  and max(counts.values()) - min(counts.values()) <= 1)
            return ci if ok else None
        return wait_for(balanced, timeout, 0.05, f"{sorted(live)} to share the shards")
