"""Heartbeats of a running handler: when the consumer helper touches its attempt, and what the
answers mean (docs/consumers.md, "Long tasks").

An attempt's deadline is its claim's time plus its time-to-run (ttr); past it, delayq dispatches
the task again, even while the first handler still runs. So once the attempt is half its ttr old,
the helper touches it every quarter of the extension it asks for (twice the ttr, at most
MAX_EXTEND_MS): a touch that succeeds moves the deadline out of reach of the next three.

ATF's executor rule: after three failed heartbeats in a row the helper gives up on the attempt
(`lost`): it tells the handler to stop, and the consumer neither reports nor acks it. The retries
after a failure are spaced so that the three fall before the deadline the last successful touch
gave (as far as this process's clock can tell), so the helper stops before delayq could dispatch
the task again — provided each touch's own timeout (the DelayqClient's) is short beside the ttr.

What a touch answers:
- cancelled: a cancel was asked while the attempt ran: the handler is told (`cancelled` is set);
  heartbeats go on so that its report still counts (anything but SUCCESS ends the task CANCELLED);
- StaleAttempt or NotFound: the attempt is over for delayq (timed out, ended): the handler is told,
  heartbeats stop;
- Unavailable (every node's MySQL, RabbitMQ or ZooKeeper is down): asked again in a second; not a
  failure, since no attempt is timed out during delayq's own outages nor for a grace after;
- anything else that fails (no node reachable, a refusal, ...): a failed heartbeat.

Pure but for the `touch` it is given: times are passed in (seconds, any monotonic clock), so tests
drive them. Not thread-safe: the consumer's own thread calls `beat`.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable

from thrift.Thrift import TException

from delayq.client.gen.delayq_thrift import ttypes

log = logging.getLogger(__name__)

MAX_EXTEND_MS = 3_600_000        # the nodes' bound on one touch's extendMs
MAX_PROGRESS_BYTES = 1024
GIVE_UP_AFTER = 3                # failed heartbeats in a row
MIN_GAP_S = 0.1                  # between two tries, however near the deadline
UNAVAILABLE_RETRY_S = 1.0        # after a node answered Unavailable

# taskId, attempt, extendMs, progress -> the node's answer
Touch = Callable[[str, int, int, bytes | None], ttypes.TouchResult]


class AttemptState:
    """What the handler and the helper share about one running attempt: the handler reads
    `cancelled` and sets progress; the helper sets `cancelled` and sends the progress.

    States: running, told (`cancelled` set, `why` says why), returned (`returned()` was called).
    The one lock orders a cancel and the handler's return: either the helper told the handler
    before it returned (`returned()` answers why), or the handler returned first (it answers None)
    and its result stands, whatever the helper learns after."""

    def __init__(self) -> None:
        self.cancelled = threading.Event()
        self.why: str | None = None          # why cancelled was set
        self._progress: bytes | None = None
        self._returned = False
        self._lock = threading.Lock()

    def set_progress(self, progress: bytes) -> None:
        if len(progress) > MAX_PROGRESS_BYTES:
            raise ValueError(f"progress is {len(progress)} bytes, at most {MAX_PROGRESS_BYTES} allowed")
        with self._lock:
            self._progress = bytes(progress)

    def take_progress(self) -> bytes | None:
        """The progress set since the last heartbeat took it (None: none new)."""
        with self._lock:
            progress, self._progress = self._progress, None
            return progress

    def keep_progress(self, progress: bytes) -> None:
        """Progress a touch did not store goes with the next one, unless the handler set newer."""
        with self._lock:
            if self._progress is None:
                self._progress = progress

    def cancel(self, why: str) -> None:
        with self._lock:
            if not self.cancelled.is_set() and not self._returned:
                self.why = why
                self.cancelled.set()

    def returned(self) -> str | None:
        """The handler returned: why it had been told to stop by then (None: it had not been)."""
        with self._lock:
            self._returned = True
            return self.why


class Heartbeat:
    """The heartbeats of one attempt, from its handler's start to its end.

    started: when the handler began; waited_ms: how long the attempt had been out by then (from
    its dispatch; a message may wait in the prefetch). States: beating (`next_at` set), done
    (`next_at` None: the attempt is over for delayq, or no ttr), `lost` (three failed in a row)."""

    def __init__(self, task_id: str, attempt: int, ttr_ms: int, touch: Touch, state: AttemptState,
                 started: float, waited_ms: int = 0):
        self.task_id, self.attempt, self._touch, self._state = task_id, attempt, touch, state
        self.extend_ms = min(2 * ttr_ms, MAX_EXTEND_MS)
        self.period_s = self.extend_ms / 4000.0
        waited = max(0, waited_ms) / 1000.0
        # As far as this process can tell, when the attempt's time-to-run runs out.
        self.deadline = started + ttr_ms / 1000.0 - waited
        self.next_at: float | None = started + max(0.0, ttr_ms / 2000.0 - waited) if ttr_ms > 0 else None
        self.failures = 0
        self.lost = False

    def beat(self, now: float) -> None:
        """Touch the attempt if a heartbeat is due at `now`; the caller calls again at `next_at`."""
        if self.next_at is None or now < self.next_at:
            return
        progress = self._state.take_progress()
        try:
            answer = self._touch(self.task_id, self.attempt, self.extend_ms, progress)
        except (ttypes.StaleAttempt, ttypes.NotFound) as e:
            log.warning("%s attempt %d is over for delayq (%s): telling its handler to stop", self.task_id,
                        self.attempt, getattr(e, "reason", "no such task"))
            self._state.cancel("stale")
            self.next_at = None
            return
        except ttypes.Unavailable as e:
            # delayq's own outage: no attempt is timed out during it or for a grace after
            # (docs/faults.md), so it does not count against the consumer. Asked again soon.
            log.warning("%s attempt %d: heartbeat not taken (%s); trying again", self.task_id, self.attempt, e.reason)
            self._keep(progress)
            self.next_at = now + min(self.period_s, UNAVAILABLE_RETRY_S)
            return
        except (TException, OSError) as e:
            self._failed(now, progress, e)
            return
        self.failures = 0
        self.deadline = now + self.extend_ms / 1000.0      # from when it was sent: the node's "now" is later
        self.next_at = now + self.period_s
        if answer.cancelled and not self._state.cancelled.is_set():
            log.info("%s was cancelled while attempt %d ran: telling its handler", self.task_id, self.attempt)
            self._state.cancel("cancelled")

    def _failed(self, now: float, progress: bytes | None, error: Exception) -> None:
        self.failures += 1
        self._keep(progress)
        if self.failures >= GIVE_UP_AFTER:
            log.error("%s attempt %d: %d heartbeats failed in a row (last: %s): giving it up (not reported, not "
                      "acked) and telling its handler to stop, before delayq dispatches it again",
                      self.task_id, self.attempt, self.failures, error)
            self.lost = True
            self.next_at = None
            self._state.cancel("heartbeats failed")
            return
        left = GIVE_UP_AFTER - self.failures + 1        # tries left, this one's gap included
        gap = min(self.period_s, (self.deadline - now) / left)
        log.warning("%s attempt %d: heartbeat failed (%s); trying again in %.1f s", self.task_id, self.attempt,
                    error, max(MIN_GAP_S, gap))
        self.next_at = now + max(MIN_GAP_S, gap)

    def _keep(self, progress: bytes | None) -> None:
        if progress is not None:
            self._state.keep_progress(progress)
