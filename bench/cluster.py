"""Fresh databases and node processes for the benchmark (the same way tests/conftest.py runs them).

    with Cluster(shards=64, zk=False, logs=dir) as cl:      # own database, migrated, shards created
        node = cl.add_node()                                 # `python -m nodes.cli node`, waits until it serves
        node.rss_kb(); node.kill(); node.start()
    # nodes stopped, database dropped, ZooKeeper tree deleted
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

from bench import profile
from shared import config, db as dbm, schema
from shared.client import CallbackService, DelayqClient, connect

MYSQL_SERVER = os.environ.get("DELAYQ_BENCH_MYSQL", "mysql+pymysql://root@127.0.0.1:3306")
AMQP_URL = os.environ.get("DELAYQ_BENCH_AMQP", "amqp://guest:guest@127.0.0.1:5672/%2F")
ZK_HOSTS = os.environ.get("DELAYQ_BENCH_ZK", "127.0.0.1:2181")
# Node settings for every node of the run, e.g. DELAYQ_BENCH_NODE_ENV="DELAYQ_CLAIM_LEAD_MS=40 DELAYQ_..."
NODE_ENV = dict(kv.split("=", 1) for kv in os.environ.get("DELAYQ_BENCH_NODE_ENV", "").split())
ROOT = Path(__file__).resolve().parent.parent


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
    def __init__(self, env: dict[str, str], log_path: Path):
        self.env, self.log_path = env, log_path
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
        self.proc = subprocess.Popen([sys.executable, "-m", "nodes.cli", "node"], env=self.env, cwd=ROOT,
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        profile.attach(self.proc.pid, f"{self.node_id}-{self.spawned_ms}")
        if wait:
            wait_for(self.answers, 60, 0.01, f"node {self.node_id} to serve\n{self.log_tail()}")
        return self

    def answers(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"node {self.node_id} exited with {self.proc.returncode}\n{self.log_tail()}")
        try:
            client, transport = connect("127.0.0.1", self.port, 1.0)
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
        if self.alive():
            os.kill(self.proc.pid, sig)
            if sig in (signal.SIGKILL, signal.SIGTERM):
                self.proc.wait(30)

    def stop(self) -> None:
        if not self.alive():
            return
        os.kill(self.proc.pid, signal.SIGCONT)
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def rss_kb(self) -> int:
        """VmRSS of the node process, from /proc (0 when it is not running)."""
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        except (OSError, AttributeError):
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

    def client(self, timeout_s: float = 10.0) -> DelayqClient:
        return DelayqClient([self.endpoint], timeout_s=timeout_s)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class Cluster:
    """A fresh database (own cluster name) and the nodes started against it; all gone on exit."""

    def __init__(self, logs: Path, shards: int = 64, zk: bool = False, **node_settings: str):
        self.logs, self.shards, self.zk = logs, shards, zk
        self.name = f"delayq_b_{uuid.uuid4().hex[:10]}"
        self.settings = config.load({"DELAYQ_MYSQL_URL": f"{MYSQL_SERVER}/{self.name}"})
        self.url = self.settings.mysql.url
        self.node_settings = {k: str(v) for k, v in node_settings.items()}
        self.nodes: list[Node] = []
        self._server = None

    def __enter__(self) -> "Cluster":
        self._server = dbm.make_engine(self.settings.mysql, database=False)
        schema.create_database(self._server, self.name)
        engine = dbm.make_engine(self.settings.mysql)
        try:
            schema.migrate(engine)
            schema.init_cluster(engine, self.shards)
        finally:
            engine.dispose()
        return self

    def __exit__(self, *exc) -> None:
        for node in self.nodes:
            try:
                node.stop()
            except Exception:  # noqa: BLE001 - clean up the rest regardless
                pass
        if self.zk:
            _delete_zk_tree(f"/delayq/{self.name}")
        deadline = time.monotonic() + 60        # MySQL may be restarting (someone's outage test)
        while True:
            try:
                with self._server.begin() as conn:
                    conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{self.name}`")
                break
            except Exception:  # noqa: BLE001
                if time.monotonic() > deadline:
                    print(f"could not drop database {self.name}; the next run drops it", file=sys.stderr)
                    break
                time.sleep(2)
        self._server.dispose()

    def engine(self):
        return dbm.make_engine(self.settings.mysql)

    def add_node(self, start: bool = True, **overrides: str) -> Node:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DELAYQ_")}
        env.update({
            "DELAYQ_MYSQL_URL": self.url, "DELAYQ_AMQP_URL": AMQP_URL, "DELAYQ_ZK_HOSTS": ZK_HOSTS,
            "DELAYQ_PORT": str(free_port()), "DELAYQ_HTTP_PORT": str(free_port()),
            "DELAYQ_NODE_ID": f"n{len(self.nodes) + 1}", "DELAYQ_CLUSTER": self.name,
            "DELAYQ_ZK_ENABLED": "true" if self.zk else "false", "PYTHONUNBUFFERED": "1",
        })
        env.update(self.node_settings)
        env.update(NODE_ENV)
        env.update({k: str(v) for k, v in overrides.items()})
        node = Node(env, self.logs / f"{self.name}-{env['DELAYQ_NODE_ID']}.log")
        self.nodes.append(node)
        return node.start() if start else node

    def register(self, topic: str) -> None:
        """A callback service expecting no result (ttr 0): tasks finish at the broker's confirm."""
        with self.nodes[0].client() as c:
            c.registerService(CallbackService(topic=topic, ttrMs=0))

    def wait_balanced(self, timeout: float = 30.0):
        """ZooKeeper mode: every shard assigned, to every live node, balanced to +-1."""
        live = {n.node_id for n in self.nodes if n.alive()}

        def balanced():
            with next(n for n in self.nodes if n.alive()).client() as c:
                ci = c.cluster()
            counts: dict[str, int] = {}
            for owner in ci.assignment.values():
                counts[owner] = counts.get(owner, 0) + 1
            ok = (len(ci.assignment) == self.shards and set(counts) == live
                  and max(counts.values()) - min(counts.values()) <= 1)
            return ci if ok else None
        return wait_for(balanced, timeout, 0.05, f"{sorted(live)} to share the shards")


def wait_for_services(timeout: float = 120.0) -> float:
    """Until MariaDB and RabbitMQ both answer (someone may be restarting them); returns the seconds
    waited, raising TimeoutError after timeout."""
    import pika
    import pymysql
    from sqlalchemy.engine import make_url
    u = make_url(MYSQL_SERVER)
    started = time.monotonic()

    def up() -> bool:
        try:
            pymysql.connect(host=u.host or "127.0.0.1", port=u.port or 3306, user=u.username or "root",
                            password=u.password or "", connect_timeout=2).close()
            pika.BlockingConnection(pika.URLParameters(AMQP_URL)).close()
            return True
        except Exception:  # noqa: BLE001 - not up yet
            return False
    wait_for(up, timeout, 1.0, "MariaDB and RabbitMQ to answer")
    return time.monotonic() - started


def sweep_stale(max_age_s: int = 3600) -> list[str]:
    """Drop benchmark databases (delayq_b_*) left behind by a run that could not clean up (MySQL
    down at the end, the process killed), once their tables are older than max_age_s."""
    engine = dbm.make_engine(config.load({"DELAYQ_MYSQL_URL": f"{MYSQL_SERVER}/mysql"}).mysql, database=False)
    dropped = []
    try:
        with engine.begin() as conn:
            stale = [r[0] for r in conn.exec_driver_sql(
                "SELECT table_schema FROM information_schema.tables WHERE table_schema LIKE 'delayq\\_b\\_%%' "
                "GROUP BY table_schema HAVING MAX(create_time) < NOW() - INTERVAL %s SECOND", (max_age_s,))]
            for name in stale:
                conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{name}`")
                dropped.append(name)
    finally:
        engine.dispose()
    return dropped


def _delete_zk_tree(path: str) -> None:
    from kazoo.client import KazooClient
    zk = KazooClient(hosts=ZK_HOSTS, timeout=5)
    try:
        zk.start(timeout=5)
        zk.delete(path, recursive=True)
    except Exception:  # noqa: BLE001 - nothing there, or ZooKeeper gone: nothing to clean
        pass
    finally:
        try:
            zk.stop()
            zk.close()
        except Exception:  # noqa: BLE001
            pass


def describe_machine() -> dict:
    """What the RESULTS header says about this machine and its services."""
    import platform
    info = {"host": platform.node(), "kernel": platform.release(), "python": platform.python_version(),
            "cores": os.cpu_count()}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["memory_mb"] = int(line.split()[1]) // 1024
    except OSError:
        pass
    try:
        engine = dbm.make_engine(config.load({"DELAYQ_MYSQL_URL": f"{MYSQL_SERVER}/mysql"}).mysql, database=False)
        with engine.connect() as conn:
            row = conn.exec_driver_sql("SELECT VERSION(), @@innodb_buffer_pool_size, "
                                       "@@innodb_flush_log_at_trx_commit").one()
        engine.dispose()
        info["mysql"] = f"{row[0]}, buffer pool {int(row[1]) // 2**20} MB, flush_log_at_trx_commit={row[2]}"
    except Exception as e:  # noqa: BLE001
        info["mysql"] = f"unknown ({e})"
    try:
        import pika
        conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
        props = conn._impl.server_properties  # noqa: SLF001 - the only place pika keeps it
        info["rabbitmq"] = props.get("version", b"?").decode() if isinstance(props.get("version"), bytes) \
            else str(props.get("version"))
        conn.close()
    except Exception as e:  # noqa: BLE001
        info["rabbitmq"] = f"unknown ({e})"
    return json.loads(json.dumps(info))
