"""The disaster-recovery drill at small scale: `scripts/dr.sh drill` on a second site of two MariaDB
servers of its own (3321, 3322; the machine's own is left alone). The primary site (its MariaDB and
its node) is killed under submits, the replica promoted and a node started on it.

What must hold whatever the replication lag: the drill's steps work (kill, promote, repoint), the
second site fires again, every acknowledged task the replica has arrives, none early. The RPO and
RTO are reported (bench/RESULTS.md), not asserted: an asynchronous replica may lose the last
acknowledged submits, which is what the drill is there to measure.

A drill ended from outside (SIGTERM: a time limit, an operator's ^C) stops what it started: its
node and both servers.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from delayq.testing.ports import free_port
from delayq.testing.process import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]


def _env(tmp_path) -> dict[str, str]:
    # Ports and data of its own: another suite on this machine may be drilling too.
    return {**os.environ, "PYTHON": sys.executable, "DELAYQ_DR_DIR": str(tmp_path / "dr"),
            "DELAYQ_DR_PRIMARY_PORT": str(free_port()), "DELAYQ_DR_REPLICA_PORT": str(free_port())}


def _nodes_on(port: str) -> list[int]:
    """The delayq node processes whose MySQL URL names this port."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and b"delayq" in (proc / "cmdline").read_bytes() and \
                    f":{port}/".encode() in (proc / "environ").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue        # gone meanwhile, or not ours to read
    return found


def test_the_drill_promotes_the_replica_and_fires_again(tmp_path):
    env = _env(tmp_path)
    proc = subprocess.Popen([str(ROOT / "scripts" / "dr.sh"), "drill", "--rate", "40", "--seconds", "10",
                             "--kill-after-s", "4"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=100)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=30)
        pytest.fail(f"the drill did not end within 100 s:\n{stderr[-3000:]}")
    assert proc.returncode == 0, stderr[-3000:]
    out = json.loads(stdout.strip().splitlines()[-1])
    assert out["acknowledged"] > 50, out
    assert out["refused_during_outage"] > 0, out            # the site was down for a while, and callers were told
    assert out["rto_s"] is not None and out["rto_s"] < 30, out
    assert out["not_fired"] == 0, out
    assert out["early"] == 0, out
    assert 0 <= out["rpo_lost_acknowledged"] < out["acknowledged"], out
    # The nodes reached both sites over TLS (a URL with ?ssl_ca=, as for a managed MySQL service).
    if Path("/var/tmp/delayq/rabbitmq-tls/ca.pem").exists():
        assert (out["mysql_tls"] or "").startswith("TLSv1."), out
    status = subprocess.run([str(ROOT / "scripts" / "dr.sh"), "status"], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=30)
    assert "primary: down" in status.stdout and "replica: down" in status.stdout, status.stdout


def test_a_drill_ended_by_sigterm_leaves_no_node_and_no_server_running(tmp_path):
    env = _env(tmp_path)
    proc = subprocess.Popen([str(ROOT / "scripts" / "dr.sh"), "drill", "--rate", "20", "--seconds", "60",
                             "--kill-after-s", "50"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        port = env["DELAYQ_DR_PRIMARY_PORT"]
        wait_for(lambda: _nodes_on(port), 60, 0.2, "the drill's node to start")
        os.killpg(proc.pid, signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
        left, status = _nodes_on(port), _dr(env, "status")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for pid in _nodes_on(env["DELAYQ_DR_PRIMARY_PORT"]):     # what a failed drill left: not for the next test
            os.kill(pid, signal.SIGKILL)
        _dr(env, "down")
    assert left == [], stderr[-2000:]
    assert "primary: down" in status and "replica: down" in status, status


def _dr(env: dict[str, str], *args: str) -> str:
    return subprocess.run([str(ROOT / "scripts" / "dr.sh"), *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60).stdout
