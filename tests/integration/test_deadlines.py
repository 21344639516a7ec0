"""Time-to-run is enforced on time: an attempt with no result is timed out within a few
milliseconds of its deadline by the node that dispatched it, not at the next window scan."""
from __future__ import annotations

import uuid

import pytest
from sqlalchemy import bindparam, create_engine, text

from delayq.client import CallbackService, TaskSpec
from conftest import Collector, wait_until

pytestmark = pytest.mark.integration


def test_an_attempt_without_a_result_times_out_at_its_time_to_run(node_factory):
    # Production scan settings: the sweep would see the expiry up to 5 s late.
    node = node_factory(DELAYQ_SCAN_INTERVAL_MS="5000", DELAYQ_FULL_SCAN_MS="15000", DELAYQ_WINDOW_MS="60000")
    topic = f"t.{uuid.uuid4().hex[:10]}"
    with node.client() as c:
        c.registerService(CallbackService(topic=topic, ttrMs=1500, maxRetries=1, backoff="fixed", retryBackoffMs=100))
    collector = Collector("delayq", topic)          # receives, never reports
    engine = create_engine(node.env["DELAYQ_MYSQL_URL"])
    try:
        with node.client() as c:
            refs = c.submitBatch([TaskSpec(topic=topic, delayMs=200 + 50 * i, payload=b"p") for i in range(10)])
        ids = [r.taskId for r in refs]

        def timed_out():
            with engine.connect() as conn:
                rows = conn.execute(text(
                    "SELECT task_id, dispatched_ms, result_ms FROM job_delay_task_execlog "
                    "WHERE attempt = 1 AND result = 'TIMEOUT' AND task_id IN :ids").bindparams(
                    bindparam("ids", expanding=True)), {"ids": ids}).all()
            return rows if len(rows) == len(ids) else None
        rows = wait_until(timed_out, 15, 0.05, what="every first attempt to time out")
        late = sorted(result - dispatched - 1500 for _, dispatched, result in rows)
        # The time-to-run runs from the claim, made up to DELAYQ_CLAIM_LEAD_MS (20 ms) before the publish.
        assert late[0] >= -50, f"timed out before the time-to-run: {late}"
        assert late[-1] <= 300, f"timed out this long (ms) after the time-to-run: {late}"
        # ... and the retry went out as attempt 2.
        wait_until(lambda: sum(1 for m in collector.snapshot() if m.headers["x-delayq-attempt"] == 2) == len(ids),
                   10, what="the second attempts")
        assert node.metrics()["delayq_deadline_timeouts_total"] >= len(ids)
    finally:
        collector.close()
        engine.dispose()
        node.stop()
