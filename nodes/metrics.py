"""Metrics: delayq's Prometheus metrics, on a registry of their own (one per node process).

Event counters and the lateness histogram are incremented where the events happen; gauges (queue
size, shards, epoch, master, ZooKeeper state, publishes awaiting confirms, overdue attempts) are read
from the components when Prometheus scrapes, through `gauges`. Labels are bounded: topic (one per
registered service), tenant (one per tenant), Thrift method and outcome, dependency, the reason the
node closed a connection.
"""
from __future__ import annotations

from typing import Callable, Iterable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

LATENESS_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
THRIFT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        task = lambda name, doc: Counter(f"delayq_tasks_{name}_total", doc, ["topic"], registry=r)  # noqa: E731
        self.submitted = task("submitted", "Tasks accepted by submit and submitBatch (new ones only).")
        self.dispatched = task("dispatched", "Attempts claimed and handed to the publisher.")
        self.confirmed = task("confirmed", "Attempts the broker confirmed.")
        self.finished = task("finished", "Tasks that ended FINISHED.")
        self.failed = task("failed", "Tasks that ended FAILED.")
        self.retried = task("retried", "Attempts that failed and were scheduled again (RETRY, time-out, unroutable).")
        self.cancelled = task("cancelled", "Tasks cancelled before they fired.")
        self.held = task("held", "Claimed tasks held back because their service's exchange is unusable "
                                 "(back to DELAY, not an attempt).")
        self.lateness = Histogram("delayq_fire_lateness_seconds",
                                  "From a task's due time to the broker's confirm of its publish.",
                                  ["topic"], buckets=LATENESS_BUCKETS, registry=r)
        self.thrift_requests = Counter("delayq_thrift_requests_total", "Thrift calls by method and outcome.",
                                       ["method", "outcome"], registry=r)
        self.thrift_seconds = Histogram("delayq_thrift_request_duration_seconds", "Thrift call latency.",
                                        ["method"], buckets=THRIFT_BUCKETS, registry=r)
        self.thrift_closed = Counter("delayq_thrift_connections_closed_total",
                                     "Thrift connections the node closed, by reason (idle, first_frame_timeout, "
                                     "frame_timeout, reply_not_read, evicted, refused, frame_too_large, "
                                     "unreadable, tls_handshake, tls_handshake_timeout, handshake_budget, internal_error, error, "
                                     "stopping).", ["reason"], registry=r)
        self.refusals = Counter("delayq_refusals_total",
                                "Calls refused for want of an identity or a permission, by reason (unauthenticated, "
                                "bad_token, revoked, rotated, unknown_certificate, unknown_reporter, forbidden, hidden). Failed TLS "
                                "handshakes are in delayq_thrift_connections_closed_total{reason=\"tls_handshake\"}.",
                                ["reason"], registry=r)
        self.quota_refusals = Counter("delayq_quota_refusals_total",
                                      "Submit calls refused over a tenant's quota, by tenant and quota (pending, "
                                      "submitRate, horizon, payloadSize).", ["tenant", "quota"], registry=r)
        self.errors = Counter("delayq_dependency_errors_total",
                              "Failed calls to MySQL, RabbitMQ or ZooKeeper.", ["dependency"], registry=r)
        self.clock_offset = Gauge("delayq_clock_offset_seconds",
                                  "This machine's clock minus MySQL's at the last check (due times follow "
                                  "MySQL's).", registry=r)
        self.dead_letters = Counter("delayq_dead_letter_publishes_total",
                                    "Dead letters published, by outcome (confirmed, unroutable, failed, not_sent).",
                                    ["outcome"], registry=r)
        self.bulk_tasks = Counter("delayq_bulk_tasks_total",
                                  "Tasks changed by the bulk jobs this node ran, by action (cancel, reschedule, "
                                  "redrive).", ["action"], registry=r)
        self.deadline_timeouts = Counter("delayq_deadline_timeouts_total",
                                         "Attempts timed out by the dispatching node at their deadline.", registry=r)
        self.results_parked = Counter("delayq_results_parked_total",
                                      "Result messages from the results queue that could not be applied, parked "
                                      "in delayq.results.<cluster>.parked, by reason (malformed, unknown_task, "
                                      "error; refused: unauthenticated, unknown_reporter, revoked, forbidden).",
                                      ["reason"], registry=r)
        self.claims_expired = Counter("delayq_claims_expired_total",
                                      "Claimed attempts not published because the claim was no longer provably "
                                      "current (past the claim lease: paused, or behind the node's own backlog; a ZooKeeper "
                                      "session break; its shard moved); "
                                      "they went back to DELAY unsent.", registry=r)
        self.throttled = Counter("delayq_topic_throttled_total",
                                 "Due tasks a claim left unclaimed to keep to their topic's maxInFlight "
                                 "(reason in_flight); they stay DELAY and wait for a slot.",
                                 ["topic", "reason"], registry=r)
        self.publish_failures = Counter("delayq_publish_failures_total",
                                        "Publishes not confirmed (broker down, nack, timeout) or returned.",
                                        ["reason"], registry=r)

    def topic_gauges(self, read: Callable[[], dict[str, dict[str, float]]]) -> None:
        """Per-topic gauges read at scrape time: `read()` -> topic -> name -> value (delayq_topic_<name>)."""
        self.registry.register(_PerTopic(read))

    def gauges(self, read: Callable[[], dict[str, float]], counters: Callable[[], dict[str, float]]) -> None:
        """Expose values read at scrape time: `read()` -> gauges, `counters()` -> counters (name -> value,
        names without the delayq_ prefix)."""
        self.registry.register(_Snapshot(read, counters))


_HELP = {
    "queue_size": "Tasks in this node's in-memory DelayQueue.",
    "shards_owned": "Shards this node owns.",
    "assignment_epoch": "Epoch of the assignment this node follows.",
    "is_master": "1 on the master node.",
    "zookeeper_connected": "1 while the ZooKeeper session is connected.",
    "unconfirmed_publishes": "Publishes waiting for the broker's confirm.",
    "in_flight_attempts": "READY/RUNNING tasks of this node's shards (dispatched, no result yet).",
    "overdue_attempts": "READY/RUNNING tasks of this node's shards past their time-to-run.",
    "recorder_backlog": "Publish outcomes waiting to be written to MySQL.",
    "key_waiting_tasks": "KEEP_IF_ACTIVE tasks due that wait for the attempt of their key in flight to end.",
    "catchup_tasks_total": "Late tasks paced by the catch-up rate limit.",
    "window_scans_total": "Window scans of MySQL.",
}


class _Snapshot(Collector):
    def __init__(self, read, counters):
        self._read, self._counters = read, counters

    def collect(self) -> Iterable:
        for name, value in self._read().items():
            yield GaugeMetricFamily(f"delayq_{name}", _HELP.get(name, name), value=value)
        for name, value in self._counters().items():
            yield CounterMetricFamily(f"delayq_{name.removesuffix('_total')}", _HELP.get(name, name), value=value)


_TOPIC_HELP = {
    "paused": "1 while the topic is paused (none of its tasks fire).",
    "in_flight": "The topic's attempts in flight across the cluster (READY/RUNNING), as this node's last claim counted them.",
    "max_in_flight": "The topic's maxInFlight (0: none).",
    "fire_rate": "Tasks of the topic this node took to fire in the last whole second.",
    "max_fire_rate": "The topic's maxFireRate across the cluster (0: none).",
    "held_back": "Tasks of the topic due now that this node holds back for its rate or maxInFlight.",
}


class _PerTopic(Collector):
    def __init__(self, read):
        self._read = read

    def collect(self) -> Iterable:
        figures = self._read()
        for name, doc in _TOPIC_HELP.items():
            family = GaugeMetricFamily(f"delayq_topic_{name}", doc, labels=["topic"])
            for topic, values in sorted(figures.items()):
                if name in values:
                    family.add_metric([topic], values[name])
            yield family
