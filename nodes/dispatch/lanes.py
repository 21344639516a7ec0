"""Two dispatch lanes, so that no topic's backlog delays another topic's tasks.

Tasks wait in three places between memory and their consumer: in memory, until a take gives
their topic its turn (fair share, delayq.nodes.memory.fairshare); claimed and not yet published, in due
order behind everything claimed before them; and published and not yet taken by the broker, behind
every earlier message of the connection. Fair share covers only the first: with one pipeline, a
quiet topic's task taken during another topic's burst of 100,000 still waits behind up to two
claimed batches of the burst and a publish window of 10,000 of its messages (measured by
`python -m bench --scenario noisy`: B's p50 213 ms, with 114 ms before the publish and 78-92 ms
after it).

So each node dispatches in two lanes, each a Dispatcher with its own claiming threads, releaser and
RabbitMQ connection:
    prompt   one claiming thread, claims of at most PROMPT_BATCH tasks up to the claim lead ahead
             of their due time, a publish window of PROMPT_WINDOW: every topic that is on time,
             and the first tasks of a burst (they are taken before they are due)
    bulk     DELAYQ_WRITE_CONCURRENCY claiming threads, full batches of tasks already due, the
             DELAYQ_MAX_IN_FLIGHT window: topics with a backlog (more than BACKLOG tasks due)
             and topics the prompt lane has fallen BEHIND_MS behind on.
A topic moves between the lanes as its backlog grows and drains; each take looks at it again.
"""
from __future__ import annotations

import time

from delayq.nodes.amqp.publisher import ConfirmedPublisher
from delayq.nodes.dispatch.dispatcher import Dispatcher
from delayq.nodes.dispatch.pauses import PauseWatch
from delayq.nodes.dispatch.wiring import DispatchSettings
from delayq.nodes.memory.fairshare import BULK, PROMPT

PROMPT_BATCH = 100       # a claim of the prompt lane: its first tasks are claimed in milliseconds
PROMPT_WINDOW = 1000     # unconfirmed publishes on the prompt lane's connection


def prompt_settings(settings: DispatchSettings) -> DispatchSettings:
    return settings.for_lane(PROMPT, max_batch=PROMPT_BATCH, claimers=1)


def bulk_settings(settings: DispatchSettings) -> DispatchSettings:
    return settings.for_lane(BULK, max_batch=settings.batch)


class Lanes:
    """Both lanes (built with prompt_settings and bulk_settings), the prompt lane's publisher (the
    bulk lane's is the node's, shared with the dead letters) and the watch their claim leases ask
    whether the node was paused; owns their threads."""

    def __init__(self, prompt: Dispatcher, bulk: Dispatcher, prompt_publisher: ConfirmedPublisher,
                 pauses: PauseWatch | None = None):
        self.prompt, self.bulk, self.publisher, self.pauses = prompt, bulk, prompt_publisher, pauses

    def start(self) -> None:
        if self.pauses is not None:
            self.pauses.start()
        self.publisher.start()
        self.prompt.start()
        self.bulk.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Both lanes publish what they claimed; the prompt lane's publisher then waits for its
        confirms (until the timeout) and closes."""
        deadline = time.monotonic() + timeout
        self.prompt.stop(timeout / 2)
        self.bulk.stop(timeout / 2)
        self.publisher.settle(max(0.0, deadline - time.monotonic()))
        self.publisher.stop()
        if self.pauses is not None:
            self.pauses.stop()

    @property
    def alive(self) -> bool:
        return self.prompt.alive and self.bulk.alive

    @property
    def ready(self) -> bool:
        return self.publisher.ready

    @property
    def held_topics(self) -> dict[str, str]:
        return {**self.prompt.held_topics, **self.bulk.held_topics}
