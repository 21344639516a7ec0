"""The test process's own pauses, which a failed timing test reports beside the nodes' logs."""
from __future__ import annotations

import sys
import time

from delayq.testing.stalls import MIN_STALL_MS, StallWatch
from delayq.testing.process import now_ms


def test_a_pause_of_the_process_is_noted_with_its_length_and_only_within_its_test():
    watch = StallWatch()
    watch.start()
    began = now_ms()
    before = sys.getswitchinterval()
    try:
        deadline = time.monotonic() + 5
        while watch.ticks < 1 and time.monotonic() < deadline:     # its loop runs
            time.sleep(0.01)
        sys.setswitchinterval(5.0)         # this thread keeps the interpreter: the watch cannot run
        end = time.monotonic() + 0.4
        while time.monotonic() < end:
            pass
    finally:
        sys.setswitchinterval(before)
    deadline = time.monotonic() + 5
    while not watch.during(began, now_ms()) and time.monotonic() < deadline:
        time.sleep(0.02)
    watch.stop()
    paused = watch.during(began, now_ms())
    assert paused and paused[0].what == "process paused" and MIN_STALL_MS <= paused[0].ms <= 2000, paused
    assert watch.during(0, began - 1) == []


def test_a_full_garbage_collection_is_timed():
    watch = StallWatch()
    watch._on_gc("start", {"generation": 2})
    time.sleep(MIN_STALL_MS / 1000)
    watch._on_gc("stop", {"generation": 2})
    watch._on_gc("start", {"generation": 0})     # the young generations are not news
    watch._on_gc("stop", {"generation": 0})
    got = watch.during(0, now_ms())
    assert len(got) == 1 and got[0].ms >= MIN_STALL_MS and got[0].what.startswith("full garbage collection")
