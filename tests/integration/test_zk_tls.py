"""ZooKeeper over TLS: a node given DELAYQ_ZK_TLS, the CA and a client certificate joins a cluster
through a ZooKeeper that serves only a TLS port (secureClientPort, Netty, client certificates
required), and is elected its master there.

The ZooKeeper is this module's own, on another loopback port with its own data directory, started
and stopped here; the shared one is never touched. Skipped only where Java or ZooKeeper's jars are
missing (scripts/services.sh installs them)."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from conftest import wait_until
from delayq.ops.certs import dev_set
from delayq.testing.ports import free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

JARS = Path("/usr/share/java")
# zookeeper.jar's manifest names Netty's transport and handler; its codec, resolver and the
# native transport's common part it does not, and the Netty server needs them for TLS.
CLASSPATH = [JARS / name for name in ("zookeeper.jar", "slf4j-simple.jar", "netty-codec.jar", "netty-resolver.jar",
                                      "netty-transport-native-unix-common.jar")]
MISSING = [str(p) for p in CLASSPATH if not p.exists()] + ([] if shutil.which("java") else ["java"])


def tls_args(folder: Path) -> dict:
    return {"use_ssl": True, "ca": str(folder / "ca.pem"), "certfile": str(folder / "zk-client.pem"),
            "keyfile": str(folder / "zk-client.key"), "check_hostname": True}


def answers(hosts: str, folder: Path) -> bool:
    zk = KazooClient(hosts=hosts, timeout=2, **tls_args(folder))
    try:
        zk.start(timeout=2)
        return True
    except KazooTimeoutError:
        return False
    finally:
        zk.stop()
        zk.close()


@pytest.fixture(scope="module")
def tls_zookeeper(tmp_path_factory):
    """(hosts, certificate folder) of a ZooKeeper serving only TLS on a loopback port."""
    if MISSING:
        pytest.skip(f"not installed: {', '.join(MISSING)}")
    folder = tmp_path_factory.mktemp("zk-tls")
    dev_set(folder, clients=("zk-client",))          # a CA of its own, node.pem for 127.0.0.1
    (folder / "server.pem").write_text((folder / "node.key").read_text() + (folder / "node.pem").read_text())
    port = free_port()
    (folder / "data").mkdir()
    (folder / "zoo.cfg").write_text("\n".join([
        "tickTime=500", f"dataDir={folder / 'data'}", f"secureClientPort={port}", "secureClientPortAddress=127.0.0.1",
        "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory", "admin.enableServer=false",
        f"ssl.keyStore.location={folder / 'server.pem'}", "ssl.keyStore.type=PEM",
        f"ssl.trustStore.location={folder / 'ca.pem'}", "ssl.trustStore.type=PEM", ""]))
    log = open(folder / "zookeeper.log", "wb")
    proc = subprocess.Popen(["java", "-Xmx128m", "-cp", ":".join(map(str, CLASSPATH)),
                             "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(folder / "zoo.cfg")],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    hosts = f"127.0.0.1:{port}"
    try:
        wait_until(lambda: proc.poll() is not None or answers(hosts, folder), 60, 0.2,
                   what="the TLS ZooKeeper to answer")
        assert proc.poll() is None, (folder / "zookeeper.log").read_text()[-3000:]
        yield hosts, folder
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def cluster(node):
    with node.client() as c:
        return c.cluster()


def test_a_node_joins_and_leads_its_cluster_through_zookeeper_over_tls(node_factory, tls_zookeeper):
    hosts, folder = tls_zookeeper
    node = node_factory(DELAYQ_ZK_ENABLED="true", DELAYQ_ZK_HOSTS=hosts, DELAYQ_ZK_TLS="true",
                        DELAYQ_ZK_CA_FILE=str(folder / "ca.pem"), DELAYQ_ZK_CERT_FILE=str(folder / "zk-client.pem"),
                        DELAYQ_ZK_KEY_FILE=str(folder / "zk-client.key"))
    wait_until(lambda: cluster(node).master == node.node_id, 30, 0.1, what="the node elected over TLS")
    info = cluster(node)
    assert [n.endpoint for n in info.nodes] == [node.endpoint] and set(info.assignment.values()) == {node.node_id}


def test_a_node_without_delayq_zk_tls_cannot_reach_a_tls_only_zookeeper(node_factory, tls_zookeeper):
    hosts, _ = tls_zookeeper
    node = node_factory(start=False, DELAYQ_ZK_ENABLED="true", DELAYQ_ZK_HOSTS=hosts)
    node.start(wait=False)
    assert node.proc is not None
    node.proc.wait(60)
    log = node.log_path.read_text()
    assert node.proc.returncode != 0 and f"ZooKeeper at {hosts} did not answer" in log, log
