"""Reporter: where the consumer helper's results go (docs/consumers.md, "Messages").

    results=DelayqClient([...])   Thrift reportResult; while no node takes it (unreachable, or
                                  its MySQL down) retried for report_timeout_s, then sent to the
                                  cluster's durable results queue (with the broker's confirm),
                                  which the nodes apply once they can: a result is not lost to
                                  an outage of delayq's own, and the consumer moves on
    results="amqp"                the results queue only, for consumers that speak only RabbitMQ

Used on the consumer's thread only, on the connection it is opened on.
"""
from __future__ import annotations

import json
import logging
import time
from typing import Any

import pika
from thrift.Thrift import TException

from delayq import topology
from delayq.client import amqp
from delayq.client.gen.delayq_thrift.ttypes import ResultStatus

log = logging.getLogger(__name__)


class Reporter:
    def __init__(self, results: Any, user: str | None, *, report_timeout_s: float, cluster: str | None):
        """results: a DelayqClient or "amqp"; user: the AMQP user, vouched for by RabbitMQ as the
        reporter (the nodes check it for `report`); cluster: whose results queue (None: asked of a
        node when first opened, which takes the `admin` grant; DELAYQ_CLUSTER spares asking)."""
        self._results, self._user = results, user
        self._timeout_s = report_timeout_s
        self._cluster = cluster
        self._conn: pika.BlockingConnection | None = None
        self._channel: Any = None           # pika's (untyped)

    def open(self, conn: pika.BlockingConnection) -> None:
        """A channel on this connection for the results queue (also a Thrift report's fallback)."""
        self._cluster = self._cluster or self._cluster_name()
        self._conn = conn
        self._channel = amqp.declare_queue(conn, conn.channel(), topology.results_queue(self._cluster))
        self._channel.confirm_delivery()

    def report(self, task_id: str, attempt: int, message_id: str, status: int, message: str) -> None:
        if self._results == "amqp":
            self._publish(task_id, attempt, status, message)
            return
        deadline = time.monotonic() + self._timeout_s
        delay = 0.1
        while True:
            try:
                self._results.reportResult(task_id, attempt, status, message)
                return
            except (TException, OSError) as e:
                if time.monotonic() + delay > deadline:
                    log.warning("could not report %s for %s to a node (%s): sent to %s instead",
                                ResultStatus._VALUES_TO_NAMES.get(status), message_id, e, self._queue())
                    self._publish(task_id, attempt, status, message)
                    return
                log.warning("reporting %s failed (%s); retrying in %.1f s", message_id, e, delay)
                assert self._conn is not None     # reports come only from deliveries on an open connection
                self._conn.sleep(delay)
                delay = min(delay * 2, 2.0)

    def _queue(self) -> str:
        assert self._cluster is not None      # open() settles it before the first delivery
        return topology.results_queue(self._cluster)

    def _cluster_name(self) -> str:
        """Whose results queue: the cluster the Thrift client reaches (asked once), else "default"."""
        if self._results == "amqp":
            return "default"
        try:
            return self._results.cluster().cluster
        except (TException, OSError) as e:
            log.warning("cannot ask a node for its cluster's name (%s): results fall back to "
                        "delayq.results.default; set DELAYQ_CLUSTER (or pass cluster=) to the cluster's name", e)
            return "default"

    def _publish(self, task_id: str, attempt: int, status: int, message: str) -> None:
        body = json.dumps({"taskId": task_id, "attempt": attempt, "message": message,
                           "status": ResultStatus._VALUES_TO_NAMES[status]}).encode()
        # user_id: RabbitMQ vouches that it is this connection's user, whom the nodes check for `report`.
        self._channel.basic_publish("", self._queue(), body,
                                    properties=pika.BasicProperties(delivery_mode=2, user_id=self._user))
