"""Unit tests for delayq.nodes.threads.NodeThread: the threads it owns start together and stop together."""
from __future__ import annotations

import threading

from delayq.nodes.threads import NodeThread


class Counting(NodeThread):
    name = "counting"

    def __init__(self, threads: int) -> None:
        super().__init__(threads)
        self.entered = threading.Semaphore(0)

    def _run(self) -> None:
        self.entered.release()
        self._stop.wait()


def test_a_worker_runs_its_loop_on_each_of_its_threads_and_stop_joins_them_all():
    w = Counting(3)
    w.start()
    try:
        assert all(w.entered.acquire(timeout=5) for _ in range(3))
        names = {t.name for t in threading.enumerate()}
        assert {"counting", "counting-2", "counting-3"} <= names
        assert w.alive
    finally:
        w.stop(timeout=5)
    assert not any(t.is_alive() for t in w._threads)
    assert not {"counting", "counting-2", "counting-3"} & {t.name for t in threading.enumerate()}


def test_a_worker_that_never_started_is_not_alive_and_stops_cleanly():
    w = Counting(2)
    assert not w.alive
    w.stop(timeout=1)
    assert not w.alive
