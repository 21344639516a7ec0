"""Metrics, health and logs, as an operator's tools see them."""
from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from delayq.client import CallbackService, TaskSpec
from conftest import Collector, wait_until

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def node(node_factory):
    return node_factory(DELAYQ_LOG_FORMAT="json")


def http(node, path: str) -> tuple[int, bytes]:
    url = f"http://127.0.0.1:{node.env['DELAYQ_HTTP_PORT']}{path}"
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def samples(node) -> dict[tuple[str, tuple], float]:
    status, body = http(node, "/metrics")
    assert status == 200
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_count_a_task_from_submit_to_confirm(node):
    topic = f"t.{uuid.uuid4().hex[:10]}"
    with node.client() as c:
        c.registerService(CallbackService(topic=topic, ttrMs=0))
        collector = Collector("delayq", topic)
        try:
            c.submit(TaskSpec(topic=topic, delayMs=100, payload=b"m"))
            collector.wait_for(1, 10)
        finally:
            collector.close()
    t = (("topic", topic),)
    m = wait_until(lambda: (s := samples(node)).get(("delayq_tasks_finished_total", t)) == 1 and s, 10,
                   what="the finished counter")
    for name in ("submitted", "dispatched", "confirmed", "finished"):
        assert m[(f"delayq_tasks_{name}_total", t)] == 1, name
    assert m[("delayq_fire_lateness_seconds_count", t)] == 1
    assert m[("delayq_fire_lateness_seconds_bucket", (("le", "60.0"),) + t)] == 1
    assert m[("delayq_thrift_requests_total", (("method", "submit"), ("outcome", "ok")))] >= 1
    assert m[("delayq_shards_owned", ())] == 8
    assert m[("delayq_is_master", ())] == 1
    for gauge in ("delayq_queue_size", "delayq_unconfirmed_publishes", "delayq_assignment_epoch",
                  "delayq_zookeeper_connected", "delayq_overdue_attempts", "delayq_in_flight_attempts",
                  "delayq_catchup_tasks_total", "delayq_window_scans_total"):
        assert (gauge, ()) in m, gauge
    assert not [k for k in m if k[0].startswith("delayq_") and "task_id" in dict(k[1])]


def test_refused_calls_are_counted_by_outcome(node):
    with node.client() as c:
        with pytest.raises(Exception):
            c.submit(TaskSpec(topic="no.such.topic", delayMs=10))
    m = samples(node)
    assert m[("delayq_thrift_requests_total", (("method", "submit"), ("outcome", "unknown_topic")))] >= 1


def test_health_and_readiness(node):
    status, body = http(node, "/healthz")
    assert status == 200 and json.loads(body)["status"] == "ok"
    status, ready = node.readyz()
    assert status == 200, ready
    assert set(ready["checked"]) >= {"mysql", "rabbitmq", "assignment"}
    assert http(node, "/nope")[0] == 404


def _wait_port(port: int, up: bool, timeout: float) -> None:
    import socket

    def state():
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            return up
        except OSError:
            return not up
    wait_until(state, timeout, 0.2, what=f"port {port} to be {'up' if up else 'down'}")


def test_readiness_names_rabbitmq_while_it_is_stopped(node):
    subprocess.run(["rabbitmqctl", "stop_app"], check=True, capture_output=True, timeout=60)
    try:
        _wait_port(5672, up=False, timeout=30)
        status, ready = wait_until(lambda: (r := node.readyz())[0] == 503 and r, 20,
                                   what="/readyz to fail")
        assert "rabbitmq" in ready["failing"]
    finally:
        subprocess.run(["rabbitmqctl", "start_app"], check=True, capture_output=True, timeout=120)
        _wait_port(5672, up=True, timeout=60)
    wait_until(lambda: http(node, "/readyz")[0] == 200, 30, what="/readyz to recover")


def test_readiness_names_mysql_while_it_is_stopped(node):
    subprocess.run(["mysqladmin", "-h127.0.0.1", "-uroot", "shutdown"], check=True, capture_output=True, timeout=60)
    try:
        _wait_port(3306, up=False, timeout=60)
        status, ready = wait_until(lambda: (r := node.readyz())[0] == 503 and r, 20,
                                   what="/readyz to fail")
        assert "mysql" in ready["failing"]
    finally:
        subprocess.run([str(ROOT / "scripts" / "services.sh"), "--only", "mysql"], check=True,
                       capture_output=True, timeout=180)
    wait_until(lambda: http(node, "/readyz")[0] == 200, 30, what="/readyz to recover")


def test_the_json_log_format_parses(node):
    lines = [line for line in node.log_path.read_text().splitlines() if line.strip()]
    assert lines
    records = [json.loads(line) for line in lines]
    assert all({"ts", "level", "logger", "msg"} <= set(r) for r in records)
    assert any("ready" in r["msg"] for r in records)
