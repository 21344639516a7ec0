"""What the benchmark adds to delayq's test harness: its clusters (bench settings, profiler,
databases named delayq_b_*), the sweep of databases a killed run left, and the machine's
description for the RESULTS header."""
from __future__ import annotations

import json
import os
from pathlib import Path

from bench import profile
from delayq import config, db as dbm
from delayq.testing.cluster import Cluster
from delayq.testing.services import AMQP_URL, MYSQL_SERVER, RABBITMQ_TLS_DIR, over_tls

# Node settings for every node of the run, e.g. DELAYQ_BENCH_NODE_ENV="DELAYQ_CLAIM_LEAD_MS=40 DELAYQ_..."
NODE_ENV = dict(kv.split("=", 1) for kv in os.environ.get("DELAYQ_BENCH_NODE_ENV", "").split())
# The settings the security mode implies (set by bench.__main__): DELAYQ_INSECURE with --insecure;
# else the local RabbitMQ's TLS listener, which nodes publish through as production's do.
MODE_ENV: dict[str, str] = {}
PREFIX = "delayq_b_"


def publish_over_tls() -> dict[str, str]:
    """Node settings to publish through the TLS listener scripts/services.sh sets up on the local
    RabbitMQ (same user and vhost as the plaintext URL, so the benchmark's consumers see it all);
    {} when there is none."""
    ca = Path(RABBITMQ_TLS_DIR) / "ca.pem"
    if not ca.exists():
        return {}
    return {"DELAYQ_AMQP_URL": over_tls(AMQP_URL), "DELAYQ_AMQP_CA_FILE": str(ca)}


def node_amqp() -> tuple[str, str]:
    """(AMQP URL, CA file) the run's nodes publish with."""
    env = {**MODE_ENV, **NODE_ENV}
    return env.get("DELAYQ_AMQP_URL", AMQP_URL), env.get("DELAYQ_AMQP_CA_FILE", "")


def bench_cluster(logs: Path, shards: int = 64, zk: bool = False, **node_settings: object) -> Cluster:
    """A Cluster whose nodes take the run's security mode, then node_settings (a scenario's own,
    which may set the mode itself), then DELAYQ_BENCH_NODE_ENV, and are profiled when --profile is on."""
    return Cluster(logs, shards=shards, zk=zk, prefix=PREFIX, on_start=profile.attach,
                   **{**MODE_ENV, **node_settings, **NODE_ENV})


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
