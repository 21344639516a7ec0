"""Fresh databases and real node processes: the harness of delayq's tests and benchmark.

    with Cluster(logs=dir, shards=64, zk=False) as cl:      # own database, migrated, shards created
        node = cl.add_node()                                 # `python -m delayq node`, waits until it serves
        node.rss_kb(); node.kill(); node.start()
    # nodes stopped, database dropped, ZooKeeper tree deleted

The services are those of delayq.testing.services.
"""
from __future__ import annotations

import contextlib
import functools
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from dataclasses import dataclass
from typing import Callable, Iterator

from delayq import accounts, config, db as dbm, schema
from delayq.client import CallbackService, DelayqClient, connect
from delayq.client.gen.delayq_thrift import ttypes
from delayq.client.security import ClientSecurity
from delayq.testing import security
from delayq.testing.ports import free_port
from delayq.testing.services import AMQP_URL, MYSQL_SERVER, ZK_HOSTS, delete_queue, delete_zk_tree


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def wait_for(predicate, timeout: float, interval: float = 0.02, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.1f} s waiting for {what}")
        time.sleep(interval)


class Node:
    """One `delayq node` process with the settings `env`, its output appended to log_path.

    on_start(pid, name) is called each time the process starts (the benchmark attaches its
    profiler there)."""

    def __init__(self, env: dict[str, str], log_path: Path, on_start: Callable[[int, str], None] | None = None):
        self.env, self.log_path, self.on_start = env, log_path, on_start
        self.proc: subprocess.Popen | None = None
        self.spawned_ms = 0

    @property
    def port(self) -> int:
        return int(self.env["DELAYQ_PORT"])

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def node_id(self) -> str:
        return self.env["DELAYQ_NODE_ID"]

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, wait: bool = True) -> "Node":
        log = open(self.log_path, "ab")
        self.spawned_ms = now_ms()
        self.proc = subprocess.Popen([sys.executable, "-m", "delayq", "node"], env=self.env,
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        if self.on_start is not None:
            self.on_start(self.proc.pid, f"{self.node_id}-{self.spawned_ms}")
        if wait:
            wait_for(self.answers, 60, 0.01, f"node {self.node_id} to serve\n{self.log_tail()}")
        return self

    def answers(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"node {self.node_id} exited with {self.proc.returncode}\n{self.log_tail()}")
        try:
            client, transport = connect("127.0.0.1", self.port, 1.0, self.security)
        except Exception:  # noqa: BLE001 - refused while starting
            return False
        try:
            client.cluster()
            return True
        except Exception:  # noqa: BLE001
            return False
        finally:
            transport.close()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send sig; for one that ends the process, wait until it has (SIGSTOP/SIGCONT do not)."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, sig)
            if sig in (signal.SIGKILL, signal.SIGTERM):
                proc.wait(30)

    def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGCONT)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)

    def rss_kb(self) -> int:
        """VmRSS of the node process, from /proc (0 when it is not running)."""
        if self.proc is None:
            return 0
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        except OSError:
            pass
        return 0

    def metrics(self, labelled: bool = False) -> dict[str, float]:
        """The node's Prometheus samples (name -> value); with labelled, also those with labels,
        named as exposed: 'delayq_x_total{reason="idle"}'."""
        url = f"http://127.0.0.1:{self.env['DELAYQ_HTTP_PORT']}/metrics"
        out = {}
        with urllib.request.urlopen(url, timeout=2) as r:
            for line in r.read().decode().splitlines():
                if line and not line.startswith("#") and (labelled or "{" not in line):
                    name, _, value = line.rpartition(" ")
                    try:
                        out[name] = float(value)
                    except ValueError:
                        pass
        return out

    @functools.cached_property
    def security(self) -> ClientSecurity:
        """How a client reaches this node (plaintext if it runs insecure, else TLS as test-admin),
        whatever this process's settings: a secured node and an insecure one can run side by side."""
        return ClientSecurity.from_env(self.env)

    def client(self, timeout_s: float = 10.0) -> DelayqClient:
        return DelayqClient([self.endpoint], timeout_s=timeout_s, security=self.security)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass(frozen=True)
class Database:
    """A database of its own: its name is also the name of the cluster using it. `url` is the
    admin's; nodes use `node_url`, the account `delayq db init --node-account` makes."""
    url: str
    name: str
    shards: int
    node_url: str = ""


@contextlib.contextmanager
def fresh_database(shards: int, prefix: str = "delayq_t_") -> Iterator[Database]:
    """A new, migrated database with `shards` shards; on exit it is dropped (waiting up to 60 s
    for a MySQL that someone's outage test is restarting) with the cluster's results queue."""
    name = f"{prefix}{uuid.uuid4().hex[:10]}"
    settings = config.load({"DELAYQ_MYSQL_URL": f"{MYSQL_SERVER}/{name}"})
    server = dbm.make_engine(settings.mysql, database=False)
    schema.create_database(server, name)
    try:
        engine = dbm.make_engine(settings.mysql)
        try:
            schema.migrate(engine)
            schema.init_cluster(engine, shards)
            security.admit(engine)
            password = accounts.ensure_node_account(engine, name, _account(name))
        finally:
            engine.dispose()
        yield Database(settings.mysql.url, name, shards,
                       accounts.node_url(settings.mysql.url, _account(name), password))
    finally:
        _drop(server, name)
        delete_queue(f"delayq.results.{name}")
        delete_zk_tree(f"/delayq/{name}")       # the cluster its nodes made, if they used ZooKeeper


def _account(database: str) -> str:
    return f"n_{database[-10:]}"


def _drop(server, name: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            with server.begin() as conn:
                conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{name}`")
                conn.exec_driver_sql(f"DROP USER IF EXISTS '{_account(name)}'@'%%'")
            break
        except Exception:  # noqa: BLE001 - MySQL restarting: try again until the deadline
            if time.monotonic() > deadline:
                print(f"could not drop database {name}; drop it by hand", file=sys.stderr)
                break
            time.sleep(2)
    server.dispose()


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
                 on_start: Callable[[int, str], None] | None = None, **node_settings: object):
        self.logs, self.shards, self.zk, self.prefix, self.on_start = logs, shards, zk, prefix, on_start
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
        self.db = self._stack.enter_context(fresh_database(self.shards, self.prefix))
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
        return dbm.make_engine(config.load({"DELAYQ_MYSQL_URL": self.url}).mysql)

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
