"""The services a test or benchmark cluster runs on, and their cleaning.

They are found through DELAYQ_TEST_MYSQL (a server URL without a database), DELAYQ_TEST_AMQP and
DELAYQ_TEST_ZK, defaulting to the local ones `scripts/services.sh` starts.
"""
from __future__ import annotations

import os
import time
from urllib.parse import urlsplit, urlunsplit

MYSQL_SERVER = os.environ.get("DELAYQ_TEST_MYSQL", "mysql+pymysql://root@127.0.0.1:3306")
AMQP_URL = os.environ.get("DELAYQ_TEST_AMQP", "amqp://guest:guest@127.0.0.1:5672/%2F")
ZK_HOSTS = os.environ.get("DELAYQ_TEST_ZK", "127.0.0.1:2181")
# RabbitMQ's TLS listener, CA and `delayq` vhost and user, as scripts/services.sh sets them up.
RABBITMQ_TLS_DIR = os.path.join(os.environ.get("DELAYQ_STATE_DIR", "/var/tmp/delayq"), "rabbitmq-tls")


def amqps_url() -> str:
    """The delayq user's amqps:// URL into its vhost (its password as scripts/services.sh made it)."""
    with open(os.path.join(RABBITMQ_TLS_DIR, "delayq.password"), encoding="utf-8") as fh:
        password = fh.read().strip()
    port = os.environ.get("DELAYQ_RABBITMQ_TLS_PORT", "5671")
    return f"amqps://delayq:{password}@127.0.0.1:{port}/delayq"


def over_tls(url: str) -> str:
    """The same user and vhost as url (amqp://...), through the local TLS listener (amqps://)."""
    u = urlsplit(url)
    auth, at, _ = u.netloc.rpartition("@")
    port = os.environ.get("DELAYQ_RABBITMQ_TLS_PORT", "5671")
    return urlunsplit(u._replace(scheme="amqps", netloc=f"{auth}{at}{u.hostname}:{port}"))


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
    deadline = time.monotonic() + timeout
    while not up():
        if time.monotonic() > deadline:
            raise TimeoutError(f"MariaDB and RabbitMQ did not answer within {timeout:.0f} s")
        time.sleep(1.0)
    return time.monotonic() - started


def delete_zk_tree(path: str, hosts: str = ZK_HOSTS) -> None:
    from kazoo.client import KazooClient

    from delayq import zkauth
    from delayq.testing import security
    zk = KazooClient(hosts=hosts, timeout=5, **zkauth.kazoo_args(security.zk_auth()))
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


def delete_queue(queue: str, params=None) -> None:
    """Delete a RabbitMQ queue if RabbitMQ answers (nothing to clean otherwise); `params`: other
    connection parameters than AMQP_URL's."""
    import pika
    try:
        conn = pika.BlockingConnection(params or pika.URLParameters(AMQP_URL))
    except pika.exceptions.AMQPError:
        return
    try:
        conn.channel().queue_delete(queue)
    except pika.exceptions.AMQPError:
        pass
    finally:
        if conn.is_open:
            conn.close()


def delete_results_queues(cluster: str, params=None) -> None:
    """Delete a cluster's two results queues (delayq.topology). Both are quorum queues, each a Raft
    group RabbitMQ keeps running: left behind by every test database and drill, they add up until
    the broker stops answering."""
    from delayq import topology
    for queue in (topology.results_queue(cluster), topology.parked_results_queue(cluster)):
        delete_queue(queue, params)


def broker_queues() -> dict[str, int] | None:
    """The local broker's queues in the default vhost and how many consumers each has, read with
    rabbitmqctl (None when it cannot be run here: another machine's broker, or not root)."""
    import json
    import shutil
    import subprocess
    ctl = shutil.which("rabbitmqctl") or "/usr/sbin/rabbitmqctl"
    if os.geteuid() != 0 or not os.path.exists(ctl) or urlsplit(AMQP_URL).hostname not in ("127.0.0.1", "localhost"):
        return None
    def listed(*args: str) -> list[dict]:
        out = subprocess.run([ctl, "-q", *args, "--formatter", "json"], capture_output=True, text=True, timeout=60,
                             check=True).stdout
        return json.loads(out or "[]")
    try:
        # list_queues counts no consumer of a quorum queue (3.10); list_consumers lists them all.
        queues = {q["name"]: 0 for q in listed("list_queues", "name")}
        for c in listed("list_consumers", "queue_name"):
            if c["queue_name"] in queues:
                queues[c["queue_name"]] += 1
        return queues
    except (OSError, subprocess.SubprocessError, ValueError, KeyError):
        return None


def sweep_queues(before: dict[str, int]) -> list[str]:
    """Delete the queues made since `before` was read that no consumer reads: the topic queues
    tests declared through the consumer helper. Each is a quorum queue, a Raft group the broker
    keeps running; a few hundred left by earlier runs once stopped it answering. A queue in use
    by another suite on this machine has a consumer and is kept."""
    now = broker_queues() or {}
    left = [name for name, consumers in now.items() if name not in before and consumers == 0]
    for name in left:
        delete_queue(name)
    return left
