"""A node on a machine whose clock is wrong: due times follow MySQL's clock, so nothing fires early.

The node runs under libfaketime (Debian `faketime`), its clock 30 s ahead of the real one; the
test's own clock and MySQL's are right.
"""
from __future__ import annotations

import glob

import pytest

from delayq.client import CallbackService, TaskSpec
from conftest import Collector, now_ms

pytestmark = pytest.mark.integration

LIBFAKETIME = next(iter(sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))), None)


@pytest.fixture
def skewed(node_factory):
    if LIBFAKETIME is None:
        pytest.skip("libfaketime is not installed (Debian package faketime; scripts/test.sh installs it)")
    # Only the wall clock is wrong (as on a real machine): a faked monotonic clock would also move
    # the deadlines of timed waits, which the kernel measures on the real one.
    node = node_factory(LD_PRELOAD=LIBFAKETIME, FAKETIME="+30s", FAKETIME_DONT_FAKE_MONOTONIC="1",
                        DELAYQ_CLOCK_CHECK_MS="1000")
    yield node
    node.stop()


def test_a_node_whose_clock_runs_30s_ahead_fires_nothing_early(skewed):
    topic = f"t.skew.{now_ms()}"
    with skewed.client() as c:
        c.registerService(CallbackService(topic=topic, ttrMs=0))
    collector = Collector("delayq", topic)
    try:
        start = now_ms()
        with skewed.client() as c:
            absolute = c.submitBatch([TaskSpec(topic=topic, dueAtMs=start + 2000 + i * 100, payload=b"a")
                                      for i in range(10)])
            relative = c.submitBatch([TaskSpec(topic=topic, delayMs=2500, payload=b"r") for _ in range(10)])
        # The acknowledged due time of a delay is the real clock's now plus the delay.
        assert all(abs(r.dueAtMs - (start + 2500)) < 1000 for r in relative), [r.dueAtMs - start for r in relative]
        due = {r.taskId: r.dueAtMs for r in absolute + relative}
        got = collector.wait_for(len(due), 20)
        early = {m.headers["x-delayq-task-id"]: due[m.headers["x-delayq-task-id"]] - m.at_ms
                 for m in got if m.at_ms < due[m.headers["x-delayq-task-id"]]}
        assert not early, f"fired early by (ms): {sorted(early.values())}"
        late = sorted(m.at_ms - due[m.headers["x-delayq-task-id"]] for m in got)
        assert late[-1] < 1000, late
    finally:
        collector.close()

    _, ready = skewed.readyz()
    assert ready["status"] == "ok", ready
    assert 29_000 < ready["detail"]["clock_offset_ms"] < 31_000, ready
    assert "30.0 s ahead of MySQL's" in ready["detail"]["clock"], ready
    assert 29 < skewed.metrics()["delayq_clock_offset_seconds"] < 31
    with skewed.client() as c:
        node = c.cluster().nodes[0]
    assert 29_000 < node.clockOffsetMs < 31_000

    # And it stops as cleanly as any node: every thread ends without an error (its releaser once
    # died here, in time.sleep under libfaketime, leaving its last claims unpublished).
    skewed.stop()
    assert skewed.proc.returncode == 0
    assert "Traceback" not in skewed.log_path.read_text(), skewed.log_tail(40)
