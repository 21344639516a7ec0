"""The console's history: deltas per 10 s slot from cumulative metrics, merged across nodes, and
quantiles from histogram buckets as Prometheus computes them."""
import math

from delayq.clock import Clock
from delayq.nodes.console import history
from delayq.nodes.console.history import BOUNDS, HistoryThread, Ring, Totals
from delayq.nodes.metrics import Metrics


def cumulative(per_bucket: dict[float, int]) -> tuple[float, ...]:
    out, total = [], 0
    for b in BOUNDS:
        total += per_bucket.get(b, 0)
        out.append(float(total))
    return tuple(out)


def test_the_first_record_is_the_baseline_then_deltas():
    ring = Ring(slots=3)
    ring.record(0, {"a": Totals(cumulative({0.01: 5}), retried=1)})
    ring.record(10_000, {"a": Totals(cumulative({0.01: 7, 1.0: 1}), retried=3)})
    snap = ring.snapshot()
    assert snap["slot_ms"] == 10_000 and len(snap["slots"]) == 1
    t, topics = snap["slots"][0]
    slot = history.TopicSlot.from_list(topics["a"])
    assert t == 10_000 and slot.fired == 3 and slot.retried == 2
    for i in range(5):                           # bounded: the oldest slots go
        ring.record(20_000 + i * 10_000, {"a": Totals(cumulative({0.01: 7, 1.0: 1}), retried=3)})
    assert len(ring.snapshot()["slots"]) == 3


def test_a_counter_reset_counts_nothing_rather_than_negative():
    ring = Ring()
    ring.record(0, {"a": Totals(cumulative({0.01: 50}))})
    ring.record(10_000, {"a": Totals(cumulative({0.01: 2}))})
    assert ring.snapshot()["slots"] == [[10_000, {}]]


def test_merge_sums_nodes_by_slot_and_topic():
    one = {"slots": [[10_000, {"a": [1, 0, list(cumulative({0.01: 2}))]}]]}
    two = {"slots": [[10_000, {"a": [0, 1, list(cumulative({0.5: 3}))], "b": [0, 0, list(cumulative({0.01: 1}))]}],
                     [20_000, {"b": [0, 0, list(cumulative({0.01: 4}))]}]]}
    merged = history.merge([one, two])
    assert list(merged) == [10_000, 20_000]
    assert merged[10_000]["a"].fired == 5 and merged[10_000]["a"].retried == 1 and merged[10_000]["a"].failed == 1
    s = history.series(merged)
    assert s.times_s == [10, 20] and s.rate == [0.6, 0.4]
    only_b = history.series(merged, visible=lambda t: t == "b")
    assert only_b.rate == [0.1, 0.4]
    assert history.totals(merged, "b").fired == 5


def test_quantile_interpolates_within_the_bucket():
    buckets = list(cumulative({0.01: 50, 0.025: 50}))
    assert math.isclose(history.quantile(0.5, buckets), 0.01)
    assert math.isclose(history.quantile(0.99, buckets), 0.01 + 0.015 * 0.98)
    assert history.quantile(0.5, [0] * len(BOUNDS)) is None
    past_the_last = list(cumulative({math.inf: 10}))
    assert history.quantile(0.99, past_the_last) == BOUNDS[-2]


class FixedClock(Clock):
    def __init__(self, ms):
        self.ms = ms

    def now_ms(self):
        return self.ms

    def monotonic(self):
        return self.ms / 1000


def test_the_thread_samples_the_node_metrics():
    m = Metrics()
    clock = FixedClock(1_000_005)
    h = HistoryThread(m, clock)
    h.sample()
    m.lateness.labels("orders").observe(0.003)
    m.lateness.labels("orders").observe(0.2)
    m.retried.labels("orders").inc()
    clock.ms += 10_000
    h.sample()
    (t, topics), = h.snapshot()["slots"]
    assert t == 1_000_000
    slot = history.TopicSlot.from_list(topics["orders"])
    assert slot.fired == 2 and slot.retried == 1 and slot.failed == 0
