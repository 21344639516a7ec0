"""A client in another language: Node.js code generated from the IDL by the Thrift compiler, with
npm's `thrift` and `amqplib`, submits, pipelines, cancels, reads, consumes and reports against a
real node (tests/node/check.js). Skipped only where Node.js, npm or the Thrift compiler is missing
(scripts/test.sh installs them)."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from delayq.client import CallbackService
from conftest import AMQP_URL

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[2]
NODE_DIR = ROOT / "tests" / "node"
MISSING = [tool for tool in ("node", "npm", "thrift") if shutil.which(tool) is None]


@pytest.fixture(scope="module")
def node_client(tmp_path_factory) -> Path:
    """The generated client code (into a temporary folder) and npm's packages (installed once per
    lock file)."""
    if MISSING:
        pytest.skip(f"not installed: {', '.join(MISSING)} (scripts/test.sh installs nodejs, npm, thrift-compiler)")
    lock = (NODE_DIR / "package-lock.json").read_bytes()
    stamp = NODE_DIR / "node_modules" / ".delayq-lock"
    if not stamp.exists() or stamp.read_text() != hashlib.sha256(lock).hexdigest():
        try:
            r = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=NODE_DIR, capture_output=True,
                               text=True, timeout=180)
        except subprocess.TimeoutExpired:
            pytest.fail("npm ci took more than 180 s (is the npm registry reachable?)")
        assert r.returncode == 0, f"npm ci failed (is the npm registry reachable?):\n{r.stdout}\n{r.stderr}"
        stamp.write_text(hashlib.sha256(lock).hexdigest())
    gen = tmp_path_factory.mktemp("gen-js")
    r = subprocess.run(["thrift", "--gen", "js:node", "-out", str(gen), str(ROOT / "shared" / "client" / "delayq.thrift")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"thrift --gen js:node failed:\n{r.stderr}"
    return gen


def test_a_node_js_client_drives_the_whole_contract(node_client, node):
    topic = f"js.{uuid.uuid4().hex[:10]}"
    with node.client() as c:
        c.registerService(CallbackService(topic=topic, ttrMs=30_000))
    idle_ms = int(node.env["DELAYQ_IDLE_TIMEOUT_MS"])
    r = subprocess.run(["node", str(NODE_DIR / "check.js"), str(node_client), "127.0.0.1", str(node.port), topic,
                        AMQP_URL], cwd=NODE_DIR, capture_output=True, text=True, timeout=120,
                       # The generated code lives outside tests/node: it finds npm thrift through NODE_PATH.
                       env={**os.environ, "NODE_PATH": str(NODE_DIR / "node_modules"),
                            "IDLE_WAIT_MS": str(idle_ms + 3000)})
    lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no output from check.js (exit {r.returncode}):\n{r.stdout}\n{r.stderr}"
    out = json.loads(lines[-1])
    assert "error" not in out, out["error"]

    submitted = out["submitted"]
    assert submitted["created"] is True and len(submitted["batch"]) == 5
    ids = [submitted["taskId"], *submitted["batch"]]
    assert out["pipelined"] == [ids[i % len(ids)] for i in range(20)], "pipelined calls answered out of order"
    assert out["cancel"] == "CANCELLED"
    assert out["oversized"] == {"name": "InvalidTask", "field": "payload"}

    fired = {m["headers"]["x-delayq-task-id"]["value"]: m for m in out["messages"]}
    assert set(fired) == set(ids[:-1]), "every task but the cancelled one fires once"
    one = fired[submitted["taskId"]]
    assert one["payloadHex"] == bytes([0, 1, 2, 250, 251, 252, 10, 13]).hex()
    assert one["routingKey"] == topic and one["persistent"] and one["messageId"] == f"{submitted['taskId']}:1"
    types = {k: v["type"] for k, v in one["headers"].items()}
    assert types == {"x-delayq-task-id": "string", "x-delayq-topic": "string", "x-delayq-attempt": "number",
                     "x-delayq-due-at": "number", "x-delayq-dispatched-at": "number", "x-delayq-ttr": "number"}
    assert one["headers"]["x-delayq-attempt"]["value"] == 1 and one["headers"]["x-delayq-topic"]["value"] == topic
    assert out["statuses"] == ["FINISHED"] * len(fired), "reportResult from Node finished every task"
    assert out["closedWhenIdle"] is True and out["afterReconnect"] == submitted["taskId"]
