"""The disaster-recovery drill: `python -m bench.dr` (or `scripts/dr.sh drill`).

On the second site of scripts/dr.sh (a MariaDB primary on 3321 and its asynchronous replica on
3322, made afresh), a standalone node runs against the primary while a producer submits tasks at
--rate per second for --seconds, each due 1-4 s later. At --kill-after-s the primary site is lost:
the primary MariaDB and the node are SIGKILLed together. Then the runbook's steps, timed: promote
the replica (scripts/dr.sh promote), start the node again on the same port with the replica's URL.
The producer keeps submitting throughout (a submit that fails is not acknowledged: its caller knows).

Reported (one JSON line):
  rpo_lost_acknowledged  acknowledged submits the promoted replica does not have (lost for good),
                         and rpo_window_ms, how long before the kill the first of them was acknowledged;
  rto_s                  kill to the first task fired from the promoted replica, with its parts
                         (kill_to_promoted_s, promoted_to_node_ready_s);
  not_fired              acknowledged tasks the replica has that never arrived (must be 0);
  fired_again            tasks that arrived twice: fired on the primary site, the FINISHED not replicated;
  early                  deliveries before their due time (must be 0);
  lag_max_transactions   the most transactions the replica lacked in any 100 ms sample before the kill;
  mysql_tls              the TLS version the nodes' MySQL connections use (null: plaintext).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from bench.receiver import ConsumerProcess
from delayq import config, db as dbm, schema
from delayq.client import CallbackService, TaskSpec
from delayq.testing import security
from delayq.testing.cluster import Database, Node, node_env, now_ms, wait_for
from delayq.testing.services import AMQP_URL, delete_queue, delete_results_queues

ROOT = Path(__file__).resolve().parent.parent
DR = ROOT / "scripts" / "dr.sh"


def dr(*args: str, semi_sync: bool = False, timeout: float = 120) -> str:
    env = {**os.environ, "DELAYQ_DR_SEMI_SYNC": "1" if semi_sync else "0"}
    return subprocess.run([str(DR), *args], check=True, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=env).stdout


# scripts/dr.sh's servers take TLS with the local CA when scripts/services.sh made one: the drill's
# nodes then connect as they would to a managed MySQL service (docs/deployment.md).
TLS_CA = Path(os.environ.get("DELAYQ_STATE_DIR", "/var/tmp/delayq")) / "rabbitmq-tls" / "ca.pem"


def url(port: int, name: str) -> str:
    tls = f"?ssl_ca={TLS_CA}" if TLS_CA.exists() else ""
    return f"mysql+pymysql://root@127.0.0.1:{port}/{name}{tls}"


def session_tls(engine) -> str | None:
    """The TLS version of the engine's connections (None: plaintext)."""
    with engine.connect() as conn:
        row = conn.exec_driver_sql("SHOW SESSION STATUS LIKE 'Ssl_version'").first()
    return (row[1] or None) if row else None


def engine_of(u: str, database: bool = True):
    return dbm.make_engine(config.load({"DELAYQ_MYSQL_URL": u, "DELAYQ_MYSQL_TIMEOUT_MS": "3000"}).mysql,
                           database=database)


@dataclass
class Producer:
    """Submits task dr-<n> at its slot, to whichever node `node` is now; records what was acknowledged."""
    topic: str
    rate: float
    seconds: float
    node: Node
    acked: dict[str, tuple[int, int]] = field(default_factory=dict)   # task id -> (acknowledged ms, due ms)
    refused: int = 0
    latencies_ms: list[float] = field(default_factory=list)           # of the acknowledged submits

    def run(self) -> None:
        start, client, n = time.monotonic(), None, 0
        rng = random.Random(7)
        while time.monotonic() - start < self.seconds:
            slot = start + n / self.rate
            time.sleep(max(0.0, slot - time.monotonic()))
            task_id, delay = f"dr-{n:06d}", rng.randint(1000, 4000)
            n += 1
            try:
                if client is None:
                    client = self.node.client(timeout_s=2)
                sent = time.perf_counter()
                ref = client.submit(TaskSpec(topic=self.topic, taskId=task_id, delayMs=delay, payload=b"dr"))
                self.latencies_ms.append((time.perf_counter() - sent) * 1000)
                self.acked[task_id] = (now_ms(), ref.dueAtMs)
            except Exception:  # noqa: BLE001 - the site is down: the caller is told, the task is not acknowledged
                self.refused += 1
                if client is not None:
                    client.close()
                client = None
        if client is not None:
            client.close()


class LagSampler:
    """Every 100 ms until the primary is gone: how many transactions the replica lacks (the sequence
    numbers of the primary's and the replica's last GTID, one domain and server)."""

    def __init__(self, primary_url: str, replica_url: str):
        self._engines = engine_of(primary_url), engine_of(replica_url)
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dr-lag", daemon=True)
        self._thread.start()

    def _seq(self, engine, variable: str) -> int:
        with engine.connect() as conn:
            pos = conn.exec_driver_sql(f"SELECT @@{variable}").scalar() or "0-0-0"
        return max(int(p.split("-")[2]) for p in pos.split(","))

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            try:
                self.samples.append(self._seq(self._engines[0], "gtid_binlog_pos")
                                    - self._seq(self._engines[1], "gtid_slave_pos"))
            except Exception:  # noqa: BLE001 - the primary was killed: sampling ends
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for e in self._engines:
            e.dispose()


def on_replica(replica_url: str, ids: list[str]) -> set[str]:
    engine = engine_of(replica_url)
    found: set[str] = set()
    try:
        with engine.connect() as conn:
            for i in range(0, len(ids), 1000):
                chunk = "','".join(ids[i:i + 1000])
                for table in ("job_delay_task", "job_delay_task_backlog"):
                    found |= set(conn.exec_driver_sql(f"SELECT task_id FROM {table} WHERE task_id IN ('{chunk}')").scalars())
    finally:
        engine.dispose()
    return found


def drill(logs: Path, rate: float = 100, seconds: float = 20, kill_after_s: float = 8, semi_sync: bool = False) -> dict:
    # scripts/dr.sh's ports (the test suite gives free ones, so that two suites on a machine can drill).
    ports = (int(os.environ.get("DELAYQ_DR_PRIMARY_PORT", "3321")), int(os.environ.get("DELAYQ_DR_REPLICA_PORT", "3322")))
    security.install()
    logging.getLogger("thrift.transport.TSocket").setLevel(logging.CRITICAL)    # the site is down: said once
    # Whatever ends the drill (an error, a timeout, SIGTERM: main), nothing it started outlives it:
    # each thing started is stopped on the way out, in reverse order, each even if another fails.
    with contextlib.ExitStack() as started:
        started.callback(dr, "down")
        dr("reset")
        dr("up", semi_sync=semi_sync)
        name = f"delayq_dr_{uuid.uuid4().hex[:8]}"
        primary, replica = url(ports[0], name), url(ports[1], name)
        server = engine_of(primary, database=False)
        schema.create_database(server, name)
        server.dispose()
        engine = engine_of(primary)
        schema.migrate(engine)
        schema.init_cluster(engine, 8)
        security.admit(engine)
        mysql_tls = session_tls(engine)         # the nodes connect with the same URL
        engine.dispose()
        topic = f"dr.{uuid.uuid4().hex[:8]}"
        started.callback(delete_results_queues, name)
        started.callback(delete_queue, f"delayq.{topic}")
        env = node_env(Database(primary, name, 8), "dr1", DELAYQ_MYSQL_TIMEOUT_MS=2000)
        node = Node(env, logs / f"{name}-primary-site.log")
        started.callback(node.kill)
        out: dict = {"replication": "semi-sync" if semi_sync else "async", "rate": rate, "seconds": seconds,
                     "kill_after_s": kill_after_s, "mysql_tls": mysql_tls}
        node.start()
        with node.client() as c:
            c.registerService(CallbackService(topic=topic, ttrMs=0))
        consumer = ConsumerProcess(f"delayq.{topic}", [topic], logs / f"{name}.recv", AMQP_URL)
        started.callback(consumer.stop)
        producer = Producer(topic, rate, seconds, node)
        feeding = threading.Thread(target=producer.run, name="dr-producer", daemon=True)
        lag = LagSampler(primary, replica)
        started.callback(lag.stop)
        feeding.start()
        time.sleep(kill_after_s)
        lag.stop()
        killed = now_ms()
        node.kill()                 # the whole site: its node, then its database
        dr("kill-primary")
        dr("promote")
        promoted = now_ms()
        second_site = Node({**env, "DELAYQ_MYSQL_URL": replica, "DELAYQ_NODE_ID": "dr2"},
                           logs / f"{name}-second-site.log")
        started.callback(second_site.kill)
        producer.node = second_site
        second_site.start()
        ready = now_ms()
        feeding.join()
        acked = sorted(producer.acked)
        kept = on_replica(replica, acked)
        lost = [t for t in acked if t not in kept]
        last_due = max((due for _, due in producer.acked.values()), default=now_ms())
        deadline = (last_due - now_ms()) / 1000 + 30
        wait_for(lambda: kept <= {r.task_id for r in consumer.poll()}, max(deadline, 5), 0.1,
                 "every acknowledged task the replica has to fire")
        records = consumer.poll()
        second_site.stop()
    firsts: dict[str, int] = {}
    seen: dict[str, int] = {}
    for r in records:
        seen[r.task_id] = seen.get(r.task_id, 0) + 1
        firsts.setdefault(r.task_id, r.recv_us // 1000)
    after = [r.recv_us / 1000 for r in records if r.dispatched_ms >= promoted]      # fired by the second site
    lat = sorted(producer.latencies_ms)
    out.update({
        "acknowledged": len(acked), "refused_during_outage": producer.refused,
        "rpo_lost_acknowledged": len(lost),
        "rpo_window_ms": killed - min(producer.acked[t][0] for t in lost) if lost else 0,
        "rto_s": round((min(after) - killed) / 1000, 2) if after else None,
        "kill_to_promoted_s": round((promoted - killed) / 1000, 2),
        "promoted_to_node_ready_s": round((ready - promoted) / 1000, 2),
        "not_fired": len(kept - set(seen)),
        "fired_again": sum(1 for n in seen.values() if n > 1),
        "early": sum(1 for r in records if r.recv_us / 1000 < r.due_ms),
        "lag_max_transactions": max(lag.samples, default=None),
        "lag_samples": len(lag.samples),
        "submit_p50_ms": round(lat[len(lat) // 2], 2) if lat else None,
        "submit_p99_ms": round(lat[int(len(lat) * 0.99)], 2) if lat else None,
    })
    return out


def _leave(*_) -> None:
    """SIGTERM: end through the drill's cleanup, which a second SIGTERM does not cut short."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.exit(143)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rate", type=float, default=200)
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--kill-after-s", type=float, default=12)
    p.add_argument("--semi-sync", action="store_true", help="semi-synchronous replication (DELAYQ_DR_SEMI_SYNC=1)")
    a = p.parse_args()
    # SIGTERM (a test's time limit, an operator) ends the drill through its cleanup, not around it.
    signal.signal(signal.SIGTERM, _leave)
    with tempfile.TemporaryDirectory(prefix="delayq-dr-") as logs:
        print(json.dumps(drill(Path(logs), a.rate, a.seconds, a.kill_after_s, a.semi_sync)))


if __name__ == "__main__":
    sys.exit(main())
