"""Real delayq node processes, one `delayq node` each, for the tests and the benchmark
(delayq.testing.cluster starts them against a database of their own), and the polling helper
they wait with.

    node = Node(env, log_path).start()      # `python -m delayq node`, waits until it serves
    node.rss_kb(); node.metrics(); node.kill(); node.start()
    node.stop()
"""
from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable

from delayq.client import DelayqClient, connect
from delayq.client.security import ClientSecurity


def process_state(pid: int) -> str:
    """The process's state letter in /proc/PID/stat (R, S, T: stopped, Z: a zombie not yet
    reaped); "" when there is no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""


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


STARTED: list["Node"] = []      # every start, in order: a failed test reports what its nodes logged


class Node:
    """One `delayq node` process with the settings `env`, its output appended to log_path.

    on_start(pid, name) is called each time the process starts (the benchmark attaches its
    profiler there)."""

    def __init__(self, env: dict[str, str], log_path: Path, on_start: Callable[[int, str], None] | None = None):
        self.env, self.log_path, self.on_start = env, log_path, on_start
        # A cgroup (v2) file cgroup.procs the process joins before it runs delayq, so that every
        # socket it opens is matched by iptables' cgroup match (a test cutting it off the network).
        self.cgroup_procs = ""
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
        STARTED.append(self)
        log = open(self.log_path, "ab")
        self.spawned_ms = now_ms()
        command = [sys.executable, "-m", "delayq", "node"]
        if self.cgroup_procs:
            command = ["sh", "-c", 'echo $$ >"$0" && exec "$@"', self.cgroup_procs, *command]
        self.proc = subprocess.Popen(command, env=self.env,
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

    def readyz(self) -> tuple[int, dict]:
        """/readyz as an admin reads it (the test-admin's token): its status code and whole answer
        (anonymous callers get only ready or not: delayq.nodes.httpgate)."""
        url = f"http://127.0.0.1:{self.env['DELAYQ_HTTP_PORT']}/readyz"
        token = self.env.get("DELAYQ_TOKEN")
        asked = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
        try:
            with urllib.request.urlopen(asked, timeout=5) as r:
                return r.status, json.load(r)
        except urllib.error.HTTPError as e:
            return e.code, json.load(e)

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

    def status(self) -> str:
        """running, or how it ended: for a report."""
        if self.proc is None:
            return "not started"
        code = self.proc.poll()
        return f"running (pid {self.proc.pid})" if code is None else f"exited with {code}"

    def troubles(self, since_ms: int, lines: int = 40) -> list[str]:
        """Its log's WARNING, ERROR and CRITICAL lines (with a traceback's lines) from since_ms on,
        the last `lines` of them."""
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return []
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since_ms / 1000))
        picked, in_trace, recent = [], False, False
        for line in text:
            if line[:4].isdigit():
                recent = line[:19] >= since
                in_trace = recent and any(f" {lv} " in line for lv in ("WARNING", "ERROR", "CRITICAL"))
            elif line.startswith(("Traceback", "Exception in thread")):
                in_trace = recent              # an uncaught error, printed without a stamp: as recent as the line before
            if in_trace:
                picked.append(line)
        return picked[-lines:]

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
