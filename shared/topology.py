"""Every RabbitMQ name and message header delayq uses, in one place (the message contract)."""
from __future__ import annotations

DEFAULT_EXCHANGE = "delayq"
EXCHANGE_TYPE = "topic"

HEADER_TASK_ID = "x-delayq-task-id"
HEADER_TOPIC = "x-delayq-topic"
HEADER_ATTEMPT = "x-delayq-attempt"
HEADER_DUE_AT = "x-delayq-due-at"
HEADER_DISPATCHED_AT = "x-delayq-dispatched-at"
HEADER_TTR = "x-delayq-ttr"                # the attempt's time-to-run, ms (what the consumer helper heartbeats by)
HEADER_STATUS = "x-delayq-status"          # on dead letters: FAILED
HEADER_REASON = "x-delayq-reason"          # on dead letters: the last result's message
HEADER_KEY = "x-delayq-key"                # the task's business key, when it has one
HEADER_TAGS = "x-delayq-tags"              # its tags, comma-separated (a tag holds no comma), when it has some
HEADER_TRACEPARENT = "traceparent"         # the W3C trace context given at submit, when one was


# Queues delayq and its consumer helper declare are quorum queues: replicated over a majority of a
# RabbitMQ cluster's nodes, they keep every confirmed message through the loss of a minority (a
# classic queue lives on one node, and its messages are gone while that node is). A queue is
# declared with the same arguments by everyone who declares it, or the broker refuses the second.
QUEUE_ARGUMENTS = {"x-queue-type": "quorum"}


def results_queue(cluster: str) -> str:
    """The durable queue a cluster's nodes take results from (one per cluster: nodes of another
    cluster on the same broker would find no such task and drop the result)."""
    return f"delayq.results.{cluster}"


def parked_results_queue(cluster: str) -> str:
    """Where result messages that cannot be applied go, with the reason (x-delayq-reason)."""
    return f"{results_queue(cluster)}.parked"


def queue_name(topic: str) -> str:
    """The queue the consumer helper declares for a topic."""
    return f"delayq.{topic}"


def message_id(task_id: str, attempt: int) -> str:
    """Unique per dispatch attempt: a consumer drops a second delivery of the same id."""
    return f"{task_id}:{attempt}"


def parse_message_id(mid: str) -> tuple[str, int]:
    task_id, _, attempt = mid.rpartition(":")
    return task_id, int(attempt)
