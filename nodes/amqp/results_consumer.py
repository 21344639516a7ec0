"""ResultsConsumer: results reported over AMQP, for consumers that speak only RabbitMQ.

Every node consumes its cluster's durable queue `delayq.results.<cluster>` (competing consumers). A message is a JSON
object {"taskId": ..., "attempt": n, "status": "SUCCESS" | "RETRY" | "FATAL" | "STARTED",
"message": "..."}; it is applied exactly like Thrift `reportResult` (a stale or duplicate one
changes nothing) and acked after MySQL committed; `attempt` may also be a string of digits
("2"). While MySQL is down the message is requeued. A message that cannot be applied is never
dropped silently: it goes to the durable parking queue `delayq.results.<cluster>.parked` with the
reason in its `x-delayq-reason` header, counted in delayq_results_parked_total{reason}
(malformed, unknown_task, error, and the refusals below), for an operator to look at.

Heartbeats (`touch`) are not taken here, only over Thrift: a heartbeat needs its answer (the task
was cancelled, the attempt is stale), and one that waited in this queue behind an outage would
extend the deadline of a consumer that may have died meanwhile.

Who sent a result: RabbitMQ checks a message's `user_id` property against the user of the
connection that published it (its "validated user-ID"; only a user tagged `impersonator` may set
another). A result with delayq's own RabbitMQ user is delayq's (that user can publish tasks
anyway); any other runs as the delayq client of the same name and needs `report` on the task's
topic (`authorize`, delayq.nodes.front.access.Access.reporter). Refused ones are parked as
unauthenticated, unknown_reporter, revoked or forbidden.

Threads: one, owned here, with its own pika connection; `stop()` ends it.
"""
from __future__ import annotations

import json
import logging
from typing import Callable, Sequence

import pika
import pika.exceptions

from delayq.client.amqp import declare_queue

from delayq import topology
from delayq.errors import DelayqError, Forbidden, InvalidTask, Unauthenticated, Unavailable
from delayq.lifecycle import Result
from delayq.nodes.amqp.params import connect_error
from delayq.nodes.metrics import Metrics
from delayq.nodes.threads import NodeThread
from delayq.nodes.validation import check_task_id

log = logging.getLogger(__name__)

ApplyResult = Callable[[str, int, Result, str | None], object]
Authorize = Callable[[str | None, str], None]       # (user_id, task id): raises Unauthenticated or Forbidden
_STATUSES = {"SUCCESS": Result.SUCCESS, "RETRY": Result.RETRY, "FATAL": Result.FATAL, "STARTED": Result.STARTED}


def parse_result(body: bytes) -> tuple[str, int, Result, str | None]:
    """(taskId, attempt, result, message) from a results-queue message; ValueError when malformed."""
    try:
        raw = json.loads(body)
        task_id, attempt, status = raw["taskId"], raw["attempt"], raw["status"]
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"not a result message: {e}") from None
    if isinstance(attempt, str) and attempt.isascii() and attempt.isdigit() and len(attempt) <= 9:
        attempt = int(attempt)          # "2": what a JSON encoder of a string-typed field sends
    if not isinstance(task_id, str) or not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1 \
            or status not in _STATUSES:
        raise ValueError("taskId must be a string, attempt an integer >= 1, status SUCCESS|RETRY|FATAL|STARTED")
    try:
        check_task_id(task_id)
    except InvalidTask as e:
        raise ValueError(str(e)) from None
    message = raw.get("message")
    return task_id, attempt, _STATUSES[status], message if isinstance(message, str) else None


class ResultsConsumer(NodeThread):
    name = "results-consumer"

    def __init__(self, params: pika.ConnectionParameters | Sequence[pika.ConnectionParameters], apply: ApplyResult, metrics: Metrics, *, cluster: str,
                 authorize: Authorize = lambda user, task_id: None, prefetch: int = 200):
        super().__init__()
        self._params, self._apply, self._metrics, self._prefetch = params, apply, metrics, prefetch
        self._authorize = authorize
        first = params if isinstance(params, pika.ConnectionParameters) else params[0]
        self._own_user = getattr(first.credentials, "username", None)
        self._queue = topology.results_queue(cluster)
        self._parked = topology.parked_results_queue(cluster)

    def _run(self) -> None:
        delay = 1.0
        while not self._stop.is_set():
            try:
                conn = pika.BlockingConnection(self._params)
            except pika.exceptions.AMQPError as e:
                log.debug("results queue: cannot connect: %s", connect_error(e))
                self._stop.wait(delay)
                delay = min(delay * 2, 2.0)     # results wait: reconnect soon after RabbitMQ is back
                continue
            delay = 1.0
            try:
                channel = declare_queue(conn, conn.channel(), self._queue)
                channel = declare_queue(conn, channel, self._parked)
                channel.basic_qos(prefetch_count=self._prefetch)
                channel.basic_consume(self._queue, self._on_message)
                while not self._stop.is_set():
                    conn.process_data_events(time_limit=0.5)
            except pika.exceptions.AMQPError as e:
                if not self._stop.is_set():
                    log.warning("results queue connection lost: %s", connect_error(e))
            except Exception:  # noqa: BLE001 - reconnect rather than stop consuming results
                log.exception("results queue consumer failed; reconnecting")
                self._stop.wait(delay)
            finally:
                if conn.is_open:
                    try:
                        conn.close()
                    except pika.exceptions.AMQPError:
                        pass

    def _on_message(self, channel, method, properties, body) -> None:
        try:
            task_id, attempt, result, message = parse_result(body)
        except ValueError as e:
            self._park(channel, method, body, "malformed", str(e))
            return
        try:
            if properties.user_id is None or properties.user_id != self._own_user:
                self._authorize(properties.user_id, task_id)
            self._apply(task_id, attempt, result, message)
        except (Unauthenticated, Forbidden) as e:
            self._park(channel, method, body, e.why, str(e))
            return
        except Unavailable as e:
            log.warning("cannot apply result of %s now: %s; requeued", task_id, e)
            channel.basic_nack(method.delivery_tag, requeue=True)
            self._stop.wait(1.0)
            return
        except DelayqError as e:          # NotFound and the like: nothing to apply it to
            self._park(channel, method, body, "unknown_task", str(e))
            return
        except Exception as e:  # noqa: BLE001 - parked, not redelivered forever
            log.exception("result for %s attempt %d cannot be applied", task_id, attempt)
            self._park(channel, method, body, "error", repr(e))
            return
        channel.basic_ack(method.delivery_tag)

    def _park(self, channel, method, body: bytes, kind: str, reason: str) -> None:
        """Into the parking queue, then acked: a failed publish leaves it unacked, so redelivered."""
        channel.basic_publish("", self._parked, body, properties=pika.BasicProperties(
            delivery_mode=2, headers={topology.HEADER_REASON: f"{kind}: {reason}"[:1024]}))
        channel.basic_ack(method.delivery_tag)
        self._metrics.results_parked.labels(kind).inc()
        log.warning("result message parked in %s (%s): %s", self._parked, kind, reason)
