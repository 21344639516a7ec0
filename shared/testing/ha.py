"""The replicated topology of `scripts/services.sh --ha`, as the fault tests use it: its members'
ports and processes, killing and restarting one, and cutting one off the network.

    topo = Topology(repo_root)
    topo.up()                                    # services.sh --ha (idempotent); False if it cannot start
    with Cuts() as cuts:                         # an iptables chain of its own, removed on exit
        cuts.isolate(topo.cgroup("galera", 1), keep_port=3311)
    topo.kill("rabbit", 1); topo.up()            # SIGKILL one member, then bring it back

Cuts are iptables rules in the chain DELAYQ-HA, jumped to from OUTPUT, matching the cgroup (v2)
each member runs in (services-ha.sh puts it there): only loopback traffic of processes this
harness or services-ha.sh started is ever dropped. The chain is flushed and deleted on exit, and
on entry in case an earlier run died before its exit.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from delayq.testing.process import process_state

# cgroup v2: the whole hierarchy (systemd's unified layout), or its part beside v1's (hybrid).
CGROUP_ROOT = Path("/sys/fs/cgroup") if Path("/sys/fs/cgroup/cgroup.controllers").exists() \
    else Path("/sys/fs/cgroup/unified")
CGROUP_PARENT = "delayq-ha"
CHAIN = "DELAYQ-HA"

ZK_PORTS = (2281, 2282, 2283)
AMQP_PORTS = (5681, 5682, 5683)
AMQPS_PORTS = (5691, 5692, 5693)      # TLS, with the single-instance listener's certificate
SQL_PORTS = (3311, 3312, 3313)
ZK_HOSTS = ",".join(f"127.0.0.1:{p}" for p in ZK_PORTS)
AMQP_URL = f"amqp://guest:guest@127.0.0.1:{AMQP_PORTS[0]}/%2F"
AMQP_HOSTS = ",".join(f"127.0.0.1:{p}" for p in AMQP_PORTS)
MYSQL_SERVER = f"mysql+pymysql://root@127.0.0.1:{SQL_PORTS[0]}"
MYSQL_HOSTS = ",".join(f"127.0.0.1:{p}" for p in SQL_PORTS)

PID_FILES = {"zk": "zk{}/pid", "rabbit": "rabbit{}/pid", "galera": "galera{}/pid"}


@dataclass(frozen=True)
class Member:
    kind: str       # zk, rabbit or galera
    index: int      # 1..3

    @property
    def cgroup(self) -> str:
        return f"{CGROUP_PARENT}/{self.kind}{self.index}"


class Topology:
    def __init__(self, root: Path, timeout_s: float = 300.0):
        self.root = root
        self.dir = Path(os.environ.get("DELAYQ_HA_DIR", root / "var" / "ha"))
        self.timeout_s = timeout_s
        self.log = ""

    def _script(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.root / "scripts" / "services.sh"), "--ha", *args],
                              capture_output=True, text=True, timeout=self.timeout_s)

    def up(self) -> bool:
        """Start what is not running; False (with self.log) when the topology cannot come up."""
        try:
            r = self._script("up")
        except subprocess.TimeoutExpired:
            self.log = f"scripts/services.sh --ha did not finish within {self.timeout_s:.0f} s"
            return False
        self.log = r.stdout + r.stderr
        return r.returncode == 0

    def running(self) -> bool:
        """Every member's process is alive (whoever started it)."""
        return all(self.pid(Member(k, i)) for k in PID_FILES for i in (1, 2, 3))

    def stop(self) -> None:
        self._script("stop")

    def pid(self, member: Member) -> int | None:
        try:
            pid = int((self.dir / PID_FILES[member.kind].format(member.index)).read_text().strip())
            os.kill(pid, 0)
            return pid
        except (OSError, ValueError):
            return None

    def kill(self, member: Member) -> None:
        """SIGKILL the member and wait until it is gone."""
        pid = self.pid(member)
        if pid is None:
            raise RuntimeError(f"{member} is not running")
        os.kill(pid, signal.SIGKILL)
        wait(lambda: not _alive(pid), 30, f"{member} to die")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    # A killed child of ours lingers as a zombie until reaped: dead all the same.
    return process_state(pid) not in ("", "Z")


def wait(predicate: Callable[[], object], timeout: float, what: str, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def zk_mode(port: int) -> str:
    """leader, follower, standalone, or '' when the member does not serve."""
    import socket
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(b"srvr")
            s.settimeout(2)
            data = b""
            while chunk := s.recv(4096):
                data += chunk
    except OSError:
        return ""
    m = re.search(rb"^Mode: (\w+)", data, re.M)
    return m.group(1).decode() if m else ""


def peers_of(pids: list[int], ports: tuple[int, ...]) -> dict[int, int]:
    """How many established TCP connections the processes `pids` hold to each of `ports` on
    loopback (from `ss`): which broker or Galera member the nodes use."""
    out = subprocess.run(["ss", "-Htnp", "state", "established"], capture_output=True, text=True, timeout=10).stdout
    counts = {p: 0 for p in ports}
    wanted = {str(p) for p in pids}
    for line in out.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        peer = fields[3].rpartition(":")[2]
        owners = set(re.findall(r"pid=(\d+)", line))
        if peer.isdigit() and int(peer) in counts and owners & wanted:
            counts[int(peer)] += 1
    return counts


def cgroups_available() -> bool:
    return (CGROUP_ROOT / CGROUP_PARENT).is_dir() and _iptables("-L", "OUTPUT", "-n").returncode == 0


def node_cgroup(name: str) -> str:
    """A cgroup of its own for a test's delayq node; returns its cgroup.procs file."""
    path = CGROUP_ROOT / CGROUP_PARENT / name
    path.mkdir(parents=True, exist_ok=True)
    return str(path / "cgroup.procs")


def _iptables(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["iptables", "-w", "5", *args], capture_output=True, text=True, timeout=30)


class Cuts:
    """iptables rules of one chain that cut members off (see the module docstring)."""

    def __enter__(self) -> "Cuts":
        self.clear_all()
        r = _iptables("-N", CHAIN)
        if r.returncode != 0:
            raise RuntimeError(f"iptables -N {CHAIN}: {r.stderr.strip()}")
        r = _iptables("-I", "OUTPUT", "-o", "lo", "-j", CHAIN)
        if r.returncode != 0:
            raise RuntimeError(f"iptables -I OUTPUT: {r.stderr.strip()}")
        return self

    def __exit__(self, *exc: object) -> None:
        self.clear_all()

    @staticmethod
    def clear_all() -> None:
        """Remove the chain and the jump to it, whatever is left of them."""
        for _ in range(10):         # one jump per entry made, at most a few
            if _iptables("-D", "OUTPUT", "-o", "lo", "-j", CHAIN).returncode != 0:
                break
        _iptables("-F", CHAIN)
        _iptables("-X", CHAIN)

    def heal(self) -> None:
        r = _iptables("-F", CHAIN)
        if r.returncode != 0:
            raise RuntimeError(f"iptables -F {CHAIN}: {r.stderr.strip()}")

    def isolate(self, cgroup: str, keep_port: int) -> None:
        """Drop every TCP packet the cgroup's processes send on loopback, except those from
        `keep_port` (its clients' connections): cut from its peers, still answering its clients."""
        self._add("-p", "tcp", "-m", "cgroup", "--path", cgroup, "-m", "tcp", "!", "--sport", str(keep_port), "-j", "DROP")

    def block(self, cgroup: str, ports: tuple[int, ...]) -> None:
        """Drop the cgroup's TCP packets to these ports (its connections to them die)."""
        self._add("-p", "tcp", "-m", "cgroup", "--path", cgroup, "-m", "multiport",
                  "--dports", ",".join(map(str, ports)), "-j", "DROP")

    def _add(self, *rule: str) -> None:
        r = _iptables("-A", CHAIN, *rule)
        if r.returncode != 0:
            raise RuntimeError(f"iptables -A {CHAIN} {' '.join(rule)}: {r.stderr.strip()}")
