"""FeedbackConsumer: results reported over AMQP, for consumers that speak only RabbitMQ.

Every node consumes its cluster's durable queue `delayq.results.<cluster>` (competing consumers). A message is a JSON
object {"taskId": ..., "attempt": n, "status": "SUCCESS" | "RETRY" | "FATAL" | "STARTED",
"message": "..."}; it is applied exactly like Thrift `reportResult` (a stale or duplicate one
changes nothing) and acked after MySQL committed. While MySQL is down the message is requeued; a
malformed one is logged and dropped.

Threads: one, owned here, with its own pika connection; `stop()` ends it.
"""
from __future__ import annotations

import json
import logging
from typing import Callable

import pika
import pika.exceptions

from shared import topology
from shared.errors import DelayqError, InvalidTask, Unavailable
from shared.lifecycle import Result
from shared.validation import check_task_id

from nodes.worker import Worker

log = logging.getLogger(__name__)

ApplyResult = Callable[[str, int, Result, str | None], object]
_STATUSES = {"SUCCESS": Result.SUCCESS, "RETRY": Result.RETRY, "FATAL": Result.FATAL, "STARTED": Result.STARTED}


def parse_result(body: bytes) -> tuple[str, int, Result, str | None]:
    """(taskId, attempt, result, message) from a results-queue message; ValueError when malformed."""
    try:
        raw = json.loads(body)
        task_id, attempt, status = raw["taskId"], raw["attempt"], raw["status"]
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"not a result message: {e}") from None
    if not isinstance(task_id, str) or not isinstance(attempt, int) or attempt < 1 or status not in _STATUSES:
        raise ValueError("taskId must be a string, attempt an integer >= 1, status SUCCESS|RETRY|FATAL|STARTED")
    try:
        check_task_id(task_id)
    except InvalidTask as e:
        raise ValueError(str(e)) from None
    message = raw.get("message")
    return task_id, attempt, _STATUSES[status], message if isinstance(message, str) else None


class FeedbackConsumer(Worker):
    name = "feedback"

    def __init__(self, params: pika.ConnectionParameters, apply: ApplyResult, *, cluster: str, prefetch: int = 200):
        super().__init__()
        self._params, self._apply, self._prefetch = params, apply, prefetch
        self._queue = topology.results_queue(cluster)

    def _run(self) -> None:
        delay = 1.0
        while not self._stop.is_set():
            try:
                conn = pika.BlockingConnection(self._params)
            except pika.exceptions.AMQPError as e:
                log.debug("results queue: cannot connect: %s", e)
                self._stop.wait(delay)
                delay = min(delay * 2, 10.0)
                continue
            delay = 1.0
            try:
                channel = conn.channel()
                channel.queue_declare(self._queue, durable=True)
                channel.basic_qos(prefetch_count=self._prefetch)
                channel.basic_consume(self._queue, self._on_message)
                while not self._stop.is_set():
                    conn.process_data_events(time_limit=0.5)
            except pika.exceptions.AMQPError as e:
                if not self._stop.is_set():
                    log.warning("results queue connection lost: %s", e)
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
            log.warning("dropping a malformed result message: %s", e)
            channel.basic_ack(method.delivery_tag)
            return
        try:
            self._apply(task_id, attempt, result, message)
        except Unavailable as e:
            log.warning("cannot apply result of %s now: %s; requeued", task_id, e)
            channel.basic_nack(method.delivery_tag, requeue=True)
            self._stop.wait(1.0)
            return
        except DelayqError as e:          # NotFound and the like: nothing to apply it to
            log.info("result for %s attempt %d ignored: %s", task_id, attempt, e)
        except Exception:  # noqa: BLE001 - a message that breaks a bug is dropped, not redelivered forever
            log.exception("result for %s attempt %d dropped", task_id, attempt)
        channel.basic_ack(method.delivery_tag)
