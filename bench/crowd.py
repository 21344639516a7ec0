"""Crowd: many client processes calling two nodes at once, for the security scenario's
many-callers kind (bench.security).

Each process holds a connection to both nodes of a pair; in round r the even processes call one
side and the odd ones the other, swapping every round, so each node has half of them at once and
every process calls each side as often. A process reports its calls, their wall seconds and its
own CPU seconds; it stops when told, or when the scenario's process is gone.
"""
from __future__ import annotations

import multiprocessing
import queue
import time

from delayq.client import DelayqClient, TaskSpec
from delayq.client.security import ClientSecurity

SIDES = ("secured", "insecure")


class Crowd:
    """Client processes, started once (the harness runs threads: spawned, not forked), each holding
    a connection to both nodes of a pair. In round r, the even processes call one side and the odd
    ones the other, swapping sides every round, so each node has half of them at once."""

    def __init__(self, processes: int):
        mp = multiprocessing.get_context("spawn")
        self._results = mp.Queue()
        self._commands = [mp.Queue() for _ in range(processes)]
        self._procs = [mp.Process(target=_crowd_client, args=(commands, self._results), daemon=True)
                       for commands in self._commands]

    def __enter__(self) -> Crowd:
        try:
            for proc in self._procs:
                proc.start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for commands in self._commands:
            commands.put(("stop", None))
        deadline = time.monotonic() + 10.0
        for proc in self._procs:
            if proc.pid is not None:
                proc.join(max(0.0, deadline - time.monotonic()))
                if proc.is_alive():
                    proc.kill()
                    proc.join()
        for q in (*self._commands, self._results):
            q.close()
            q.cancel_join_thread()

    def connect(self, where: dict[str, tuple[str, ClientSecurity]], spec: TaskSpec) -> None:
        """Connect every process to both nodes ({side: (endpoint, security)}) and warm it up."""
        self._tell_all(("connect", (where, spec)))

    def round(self, r: int, seconds: float) -> dict[str, tuple[int, float, float]]:
        """Every process calls its side for `seconds`: {side: (calls, wall seconds of them, the
        client processes' CPU seconds)}."""
        for k, commands in enumerate(self._commands):
            commands.put(("round", (SIDES[(k + r) % 2], seconds)))
        done = dict.fromkeys(SIDES, (0, 0.0, 0.0))
        for side, calls, wall, cpu in self._collect(seconds + 60.0):
            done[side] = (done[side][0] + calls, done[side][1] + wall, done[side][2] + cpu)
        return done

    def wake(self) -> None:
        """One call from every process to each node: connections idle through the other kinds'
        calls (and closed by a node's idle timeout on a slow host) are open again before a round
        is measured, so no side pays for a handshake inside it."""
        self._tell_all(("wake", None))

    def _tell_all(self, command: tuple) -> None:
        for commands in self._commands:
            commands.put(command)
        self._collect(60.0)

    def _collect(self, timeout: float) -> list:
        deadline = time.monotonic() + timeout
        got = []
        for _ in self._procs:
            try:
                answer = self._results.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                raise RuntimeError("a client process of the security scenario did not answer in time") from None
            if isinstance(answer, str):
                raise RuntimeError(f"a client process of the security scenario failed: {answer}")
            got.append(answer)
        return got


def _crowd_client(commands, results) -> None:
    """One process of a Crowd, obeying its commands until told to stop."""
    clients: dict[str, DelayqClient] = {}
    spec = None
    try:
        while True:
            try:
                command, arg = commands.get(timeout=1.0)
            except queue.Empty:
                if multiprocessing.parent_process().is_alive():
                    continue
                return          # the scenario's process is gone: nobody will say stop
            if command == "stop":
                return
            if command == "connect":
                for client in clients.values():
                    client.close()
                where, spec = arg
                clients = {side: DelayqClient([endpoint], timeout_s=10, security=security)
                           for side, (endpoint, security) in where.items()}
                for client in clients.values():
                    for _ in range(20):
                        client.submit(spec)
                results.put(())
            elif command == "wake":
                for client in clients.values():
                    client.submit(spec)
                results.put(())
            elif command == "round":
                side, seconds = arg
                calls, wall, cpu0 = 0, 0.0, time.process_time()
                end = time.perf_counter() + seconds
                while True:
                    t0 = time.perf_counter()
                    clients[side].submit(spec)
                    t1 = time.perf_counter()
                    calls, wall = calls + 1, wall + (t1 - t0)
                    if t1 >= end:
                        break
                results.put((side, calls, wall, time.process_time() - cpu0))
    except Exception as e:  # noqa: BLE001 - reported to the parent, which fails the scenario
        results.put(f"{type(e).__name__}: {e}")
    finally:
        for client in clients.values():
            client.close()
