"""CPU, speed and memory of this machine and its processes: the yardsticks every figure is reported
beside (machine_speed, cpu_window, cpu_note, RssSampler)."""
from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from pathlib import Path
from typing import Iterator


def machine_seconds() -> tuple[float, float, float, float]:
    """(busy, iowait, steal, all) CPU seconds of the whole machine since boot, every core (from
    /proc/stat; busy is user, nice, system, irq and softirq)."""
    try:
        t = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return 0.0, 0.0, 0.0, 0.0
    hz = os.sysconf("SC_CLK_TCK")
    return (t[0] + t[1] + t[2] + t[5] + t[6]) / hz, t[4] / hz, t[7] / hz, sum(t) / hz


SPEED_OPS = 100_000


def _speed_work(ops: int) -> int:
    """A fixed piece of interpreter work, of the kinds the node, producers and consumer do: dict
    updates, integer arithmetic and small strings."""
    counts: dict[int, int] = {}
    total = 0
    for i in range(ops):
        key = i & 1023
        counts[key] = counts.get(key, 0) + 1
        total += len(str(key))
    return total


def machine_speed(reps: int = 5, ops: int = SPEED_OPS) -> tuple[float, float]:
    """How fast this machine runs a fixed piece of Python work on one core, in millions of
    operations per second (the best of `reps` timings, about 0.1 s in all), and the other load on
    the machine meanwhile, in cores (everything busy but this process).

    Taken before and after each scenario, when none of the benchmark's own processes runs, it
    shows the host itself slowing down (a busy neighbour, a lower clock), which the steal share
    does not always show: on one day, with 0% steal, the same code cost 1.6-1.9 times the CPU per
    task from one round to the next. The other load says when MariaDB or RabbitMQ were still busy
    with what the scenario left them."""
    best = math.inf
    machine0, own0, wall0 = machine_seconds()[0], time.process_time(), time.perf_counter()
    for _ in range(reps):
        t0 = time.perf_counter()
        _speed_work(ops)
        best = min(best, time.perf_counter() - t0)
    wall = max(1e-9, time.perf_counter() - wall0)
    other = (machine_seconds()[0] - machine0 - (time.process_time() - own0)) / wall
    return ops / best / 1e6, max(0.0, other)


# The backing services, by the name figures give them.
SERVICES = ("MariaDB", "RabbitMQ", "ZooKeeper")
TOPOLOGY_ENV = "DELAYQ_BENCH_TOPOLOGY"      # "ha": the run is on scripts/services.sh --ha (bench.topologies)


def service_pids(*wanted: str) -> dict[str, int]:
    """The backing services' processes by name ("MariaDB", "RabbitMQ", "ZooKeeper"; all when none
    is named); those not found are left out. On the replicated topology (DELAYQ_BENCH_TOPOLOGY=ha)
    each member by its number: "MariaDB 1" .. "ZooKeeper 3"."""
    wanted = wanted or SERVICES
    if os.environ.get(TOPOLOGY_ENV) == "ha":
        return _ha_pids(wanted)
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                comm = (entry / "comm").read_text().strip()
                name = {"mariadbd": "MariaDB", "mysqld": "MariaDB", "beam.smp": "RabbitMQ"}.get(comm)
                if comm == "java" and b"QuorumPeerMain" in (entry / "cmdline").read_bytes():
                    name = "ZooKeeper"
                if name in wanted and not _ha_member(entry):
                    found.setdefault(name, int(entry.name))
            except OSError:
                continue
    return found


def _ha_member(entry: Path) -> bool:
    """A member of the replicated topology: its command line names its data dir under var/ha."""
    try:
        return b"/var/ha/" in (entry / "cmdline").read_bytes()
    except OSError:
        return False


def _ha_pids(wanted: tuple[str, ...]) -> dict[str, int]:
    from delayq.testing.ha import Member, Topology
    topo = Topology(Path(__file__).resolve().parents[1])
    kinds = {"MariaDB": "galera", "RabbitMQ": "rabbit", "ZooKeeper": "zk"}
    found = {}
    for name in wanted:
        for i in (1, 2, 3):
            pid = topo.pid(Member(kinds[name], i))
            if pid is not None:
                found[f"{name} {i}"] = pid
    return found


def by_service(used: dict[str, float]) -> dict[str, float]:
    """CPU seconds of the service members summed per service ("MariaDB 2" counts as "MariaDB")."""
    out: dict[str, float] = {}
    for name, seconds in used.items():
        service = name.split(" ", 1)[0]
        if service in SERVICES:
            out[service] = out.get(service, 0.0) + seconds
    return out


class CpuWindow:
    """CPU used between mark() (or construction) and read(): by each named process, and the busy
    share of the whole machine. A process that ended inside the window is left out of read()."""

    def __init__(self, pids: dict[str, int]):
        self._pids = dict(pids)
        self.mark()

    def mark(self) -> None:
        self._t0 = time.monotonic()
        self._procs0 = {name: cpu_seconds(pid) for name, pid in self._pids.items()}
        self._machine0 = machine_seconds()

    def read(self) -> tuple[float, dict[str, float], tuple[float, float, float]]:
        """(wall seconds, {name: CPU seconds}, the machine's (busy, iowait, steal) shares of all
        its cores' time, each 0-1)."""
        wall = time.monotonic() - self._t0
        procs = {name: cpu_seconds(pid) - self._procs0[name] for name, pid in self._pids.items()
                 if Path(f"/proc/{pid}").exists()}
        now = machine_seconds()
        total = max(1e-9, now[3] - self._machine0[3])
        return wall, procs, tuple((now[i] - self._machine0[i]) / total for i in range(3))


@contextlib.contextmanager
def cpu_window(pids: dict[str, int], after_s: float) -> Iterator[CpuWindow]:
    """A CpuWindow that opens after_s from now (when the work under measure starts, e.g. the
    producers' start instant), on a timer thread joined when the block ends; read it after."""
    window = CpuWindow(pids)
    opens = threading.Timer(max(0.0, after_s), window.mark)
    opens.start()
    try:
        yield window
    finally:
        opens.cancel()
        opens.join()


def cpu_note(procs: dict[str, float], machine: tuple[float, float, float], per: int | None = None,
             wall: float | None = None) -> str:
    """"node 320 us, clients 300 us, MariaDB 90 us CPU per task; machine 65% busy, iowait 1%,
    steal 2% (2 cores)", or with wall instead of per, each process as a share of a core."""
    if per:
        parts = ", ".join(f"{name} {seconds / per * 1e6:,.0f} us" for name, seconds in procs.items())
        head = f"{parts} CPU per task"
    else:
        parts = ", ".join(f"{name} {100 * seconds / max(wall or 0.0, 1e-9):.0f}%" for name, seconds in procs.items())
        head = f"{parts} of a core"
    busy, iowait, steal = machine
    return (f"{head}; machine {100 * busy:.0f}% busy, iowait {100 * iowait:.0f}%, steal {100 * steal:.0f}% "
            f"({os.cpu_count()} cores)")


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def thread_cpu_seconds(pid: int) -> float:
    """The CPU time of pid's threads now running, to the nanosecond (/proc/<pid>/task/*/schedstat):
    /proc/<pid>/stat counts in clock ticks, 10 ms, too coarse for windows of a second."""
    total = 0
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):
            pass        # the thread ended
    return total / 1e9


class RssSampler:
    """The peak VmRSS of some nodes, sampled every interval on a thread."""

    def __init__(self, nodes, interval: float = 0.25):
        self.nodes, self.peak_kb = nodes, 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        while not self._stop.is_set():
            for n in self.nodes:
                self.peak_kb = max(self.peak_kb, n.rss_kb())
            self._stop.wait(0.25)

    def stop(self) -> float:
        self._stop.set()
        self._t.join(2)
        return self.peak_kb / 1024
