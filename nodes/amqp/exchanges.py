"""ExchangeGuard: which exchanges the node may publish to, checked away from the publishing channel.

RabbitMQ closes the channel on which a declare conflicts with an existing exchange (406) or a
message goes to an exchange that does not exist (404). On the node's one publishing channel that
would stop every topic, over and over. So the publisher never declares, and the dispatcher and the
dead-letterer publish only to exchanges this guard has found usable:

    usable      a durable topic or direct exchange (delayq routes by routing key), existing or
                created here as a durable topic exchange when missing
    unusable    another type or other settings (reported with RabbitMQ's words, e.g. "current is
                'fanout'"), access refused, or a name RabbitMQ rejects

delayq never changes an exchange that exists. Verdicts are cached: a usable exchange is checked
again every `recheck_s`, an unusable one after a backoff (2 s doubling to `recheck_s`), and at once
after the publishing channel was closed because of it (`forget`). While RabbitMQ cannot be reached
the last verdicts stand, re-checked every 2 s, with one WARNING when it goes and one INFO when it is
back. Tasks of a topic whose exchange
is unusable are held back (delayq.nodes.dispatch.dispatcher); `unusable()` says which and why.

Thread: one, owned here: it checks the exchanges of every known service at start, then each check
that is due. `check()` and `verdict()` run on the caller's thread (`verdict()` checks only an
exchange never seen). Checks run one at a time, each on a short-lived connection of its own (the
node's AMQP timeouts), with a fresh channel per declare.
"""
from __future__ import annotations

import logging
import re
import threading
import time
from typing import Callable, Sequence

import pika
import pika.exceptions

from delayq.nodes.threads import NodeThread

log = logging.getLogger(__name__)

TYPES = ("topic", "direct")
_FIRST_BACKOFF_S = 2.0
_NO_EXCHANGE = re.compile(r"no exchange '([^']*)'")


class ExchangeGuard(NodeThread):
    name = "exchange-guard"

    def __init__(self, params: pika.ConnectionParameters | Sequence[pika.ConnectionParameters], *, recheck_s: float = 30.0,
                 monotonic: Callable[[], float] | None = None, known: Callable[[], set[str]] = set,
                 examine: Callable[[str], str | None] | None = None):
        super().__init__()
        self._examine = examine or self._examine_on_own_connection
        self._unreachable = False               # last check could not reach RabbitMQ
        self._known = known
        self._params, self._recheck_s = params, recheck_s
        self._monotonic = monotonic or time.monotonic
        self._lock = threading.Lock()           # one check at a time
        # name -> (reason or None when usable, monotonic time of the next check, backoff)
        self._verdicts: dict[str, tuple[str | None, float, float]] = {}

    def _run(self) -> None:
        """Checks every exchange the services name, then keeps the verdicts fresh."""
        for name in sorted(self._known()):
            if self._stop.is_set():
                return
            if name not in self._verdicts:
                self.check(name)
        while not self._stop.wait(1.0):
            self.refresh()

    # ---- verdicts -------------------------------------------------------------------------------

    def verdict(self, exchange: str) -> str | None:
        """None when the exchange is usable, else why not. Checks it now if it was never checked
        or was forgotten; otherwise the cached verdict (however old: refresh() renews them)."""
        cached = self._verdicts.get(exchange)
        if cached is not None:
            return cached[0]
        return self.check(exchange)

    def check(self, exchange: str) -> str | None:
        """Check now and cache the verdict (None: usable)."""
        with self._lock:
            try:
                reason = self._examine(exchange)
            except (pika.exceptions.AMQPConnectionError, pika.exceptions.ConnectionClosed, OSError) as e:
                if not self._unreachable:
                    log.warning("cannot check exchanges: RabbitMQ unreachable (%s)", e)
                self._unreachable = True
                cached = self._verdicts.get(exchange)
                # Keep the last verdict (unknown: as good as any while nothing can be published)
                # and try again after the first backoff, not at every refresh.
                self._verdicts[exchange] = (cached[0] if cached else None,
                                            self._monotonic() + _FIRST_BACKOFF_S, cached[2] if cached else 0.0)
                return cached[0] if cached else None
            if self._unreachable:
                log.info("RabbitMQ reachable again: checking exchanges")
            self._unreachable = False
            before = self._verdicts.get(exchange)
            backoff = 0.0 if reason is None else min(self._recheck_s, (before[2] * 2) if before and before[2]
                                                      else _FIRST_BACKOFF_S)
            self._verdicts[exchange] = (reason, self._monotonic() + (backoff or self._recheck_s), backoff)
        if reason is not None and (before is None or before[0] != reason):
            log.warning("exchange %r is not usable: %s; its tasks are held back until it is", exchange, reason)
        elif reason is None and before is not None and before[0] is not None:
            log.info("exchange %r is usable again", exchange)
        return reason

    def forget(self, close_reason: str) -> None:
        """The publishing channel was closed: if RabbitMQ named a missing exchange, check it again."""
        m = _NO_EXCHANGE.search(close_reason)
        if m:
            self._verdicts.pop(m.group(1), None)

    def refresh(self) -> None:
        """Re-check every exchange whose check is due."""
        now = self._monotonic()
        for name, (_, due, _) in list(self._verdicts.items()):
            if due <= now:
                self.check(name)

    def retry_in(self, exchange: str) -> float:
        """Seconds until the exchange is checked again (0 when unknown)."""
        cached = self._verdicts.get(exchange)
        return max(0.0, cached[1] - self._monotonic()) if cached else 0.0

    def unusable(self) -> dict[str, str]:
        return {name: reason for name, (reason, _, _) in self._verdicts.items() if reason is not None}

    # ---- the check ------------------------------------------------------------------------------

    def _examine_on_own_connection(self, exchange: str) -> str | None:
        conn = pika.BlockingConnection(self._params)
        try:
            return self._probe(conn, exchange)
        finally:
            if conn.is_open:
                conn.close()

    def _probe(self, conn: pika.BlockingConnection, exchange: str) -> str | None:
        if not exchange:
            return "the default exchange ('') cannot be used: delayq routes by routing key"
        try:
            _declare(conn, exchange, passive=True)
        except pika.exceptions.ChannelClosedByBroker as e:
            if e.reply_code != 404:
                return f"{e.reply_code} {e.reply_text}"
            try:     # missing: delayq creates it, as the durable topic exchange it would have used
                _declare(conn, exchange, exchange_type="topic", durable=True)
                log.info("created exchange %r (durable, topic)", exchange)
                return None
            except pika.exceptions.ChannelClosedByBroker as e2:
                return f"missing, and it could not be created: {e2.reply_code} {e2.reply_text}"
        # It exists: a declare that matches it changes nothing; one that does not is refused (406)
        # on this throwaway channel, naming what the exchange is.
        refusals = []
        for kind in TYPES:
            try:
                _declare(conn, exchange, exchange_type=kind, durable=True)
                return None
            except pika.exceptions.ChannelClosedByBroker as e:
                if e.reply_code != 406:
                    return f"{e.reply_code} {e.reply_text}"
                refusals.append(e.reply_text)
        current = re.search(r"current is '([^']*)'", refusals[0])
        if current and "arg 'type'" in refusals[0] and "arg 'type'" in refusals[-1]:
            return (f"it is a {current.group(1)} exchange; delayq publishes with a routing key and needs a "
                    f"durable topic or direct exchange")
        return f"not a durable topic or direct exchange ({refusals[-1]})"


def _declare(conn: pika.BlockingConnection, exchange: str, **how) -> None:
    """exchange_declare on a channel of its own; raises ChannelClosedByBroker when refused."""
    channel = conn.channel()
    channel.exchange_declare(exchange, **how)
    channel.close()
