"""A node frozen inside a claim's transaction, holding the locks of its shard and task rows: once its
session expires and its shards move, their tasks fire from the new owners within a second, as a
RabbitMQ consumer sees them; none is lost, early, or delivered twice."""
from __future__ import annotations

import signal
import time
import uuid

import pytest

from conftest import Collector, now_ms, wait_until
from delayq.client import CallbackService
from delayq.testing.process import process_state
from test_cluster import balanced, cluster, owners  # noqa: F401  (cluster: fixture)
from test_handover import PRODUCTION, assert_each_attempt_once_and_none_early, first_deliveries, submit_stream

pytestmark = pytest.mark.integration

FROZEN_S = 10           # as long as the pause seen in production, past the 3 s session


def quantile(values: list[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@pytest.mark.timeout(150)
def test_a_node_frozen_inside_a_claim_holds_up_no_task_of_its_shards_once_they_moved(cluster, tmp_path):
    freeze = tmp_path / "freeze-n3"
    # The production window: every task of the stream is due within it, so it goes to the
    # accepting node's own shards and memory.
    nodes = [cluster(**PRODUCTION), cluster(**PRODUCTION),
             cluster(DELAYQ_FREEZE_IN_CLAIM_FILE=str(freeze), **PRODUCTION)]
    wait_until(lambda: balanced(nodes[0], {"n1", "n2", "n3"}), 15, 0.05, what="three balanced nodes")
    frozen, watcher = nodes[2], nodes[0]
    assert watcher.node_id == "n1" and balanced(watcher, {"n1", "n2", "n3"}).master != frozen.node_id
    topic = f"t.{uuid.uuid4().hex[:10]}"
    with watcher.client() as c:
        c.registerService(CallbackService(topic=topic, ttrMs=0))
    collector = Collector("delayq", topic)
    try:
        # One task every 5 ms for 12 s, all on n3's shards and in its memory.
        due = submit_stream(frozen, topic, now_ms() + 1500, 2400, 5)
        wait_until(lambda: len(collector.messages) >= 100, 15, 0.005, what="the stream to flow")
        freeze.touch()
        wait_until(lambda: process_state(frozen.pid) == "T", 5, 0.001, what="n3 to stop inside a claim")
        frozen_at = now_ms()
        try:
            seen_owner_at = now_ms()
            while frozen.node_id in owners(watcher).values():
                seen_owner_at = now_ms()
                assert seen_owner_at - frozen_at < 15_000, "n3's shards never moved"
                time.sleep(0.02)
            # The move happened after the last look that still showed n3 as an owner.
            moved_at = seen_owner_at
            time.sleep(max(0.0, frozen_at / 1000 + FROZEN_S - time.time()))
        finally:
            frozen.kill(signal.SIGCONT)
            thawed_at = now_ms()

        wait_until(lambda: set(due) <= set(collector.task_ids()), 40, 0.1,
                   what=f"every task ({len(set(due) - set(collector.task_ids()))} missing)")
        assert_each_attempt_once_and_none_early(collector, due)
        first = first_deliveries(collector)
        # A task due from a second before the freeze on could be in the frozen claim, or due while
        # n3 held its shards frozen: it could fire no sooner than the move. (Those due after n3
        # went on are the rejoining node's handover, tests/integration/test_handover.py.)
        held = {t: first[t][0] - max(d, moved_at) for t, d in due.items() if frozen_at - 1000 <= d <= thawed_at}
        late = sorted(held.values())
        print(f"n3 frozen {FROZEN_S} s, its shards moved {moved_at - frozen_at} ms after; {len(held)} tasks due "
              f"from a second before the freeze: after the move or their due time p50 {quantile(late, 0.5)} ms, "
              f"p99 {quantile(late, 0.99)} ms, max {late[-1]} ms")
        assert quantile(late, 0.99) <= 1000 and late[-1] <= 2000, \
            f"tasks of the frozen node's shards fired late after the move: p99 {quantile(late, 0.99)} ms, " \
            f"max {late[-1]} ms; the latest (due after the move, ms late, attempt): " \
            f"{[(due[t] - moved_at, ms, first[t][1]) for t, ms in sorted(held.items(), key=lambda kv: -kv[1])[:8]]}"
    finally:
        collector.close()
