"""Access: who each Thrift call runs as, and whether it may do what it asks.

Every connection has a Caller (delayq.nodes.front.caller): nobody when it is accepted; the client
named by a client certificate's common name once the TLS handshake proves it; the token's client
after a successful `authenticate`.

Before each call the caller's client is looked up again, so a revocation or a rotated token also
ends connections authenticated before it: the node re-reads the clients whenever their version in
MySQL moves (delayq.store.clients), which the node's Watch (delayq.nodes.cluster.watch) reads every
few hundred milliseconds and hands to `seen`.

Refusals, each counted in delayq_refusals_total by reason:
- Unauthenticated: no identity (`unauthenticated`), a token that never was a client's (`bad_token`),
  a client revoked (`revoked`) or whose token was rotated since this connection authenticated
  (`rotated`), a certificate naming no client (`unknown_certificate`). A token that was a client's
  and was revoked or replaced by a rotation (its digest is kept: delayq.store.clients) is refused
  at `authenticate` as `revoked` or `rotated` too; any other is `bad_token`, so a guess learns
  nothing about which clients exist.
- Forbidden(permission, topic): a topic the call names itself, or "" when the client holds the
  permission on no topic (`forbidden`);
- NotFound for a task of a topic the client may not touch (`hidden`): the client learns nothing
  about tasks and topics it cannot see.
Results sent through the results queue run as the client named by the message's `user_id`
(`reporter`; `unknown_reporter` when no client has that name).

With security off (DELAYQ_INSECURE) every call runs as the built-in client `insecure`, allowed
everything.
"""
from __future__ import annotations

import functools
import logging
import threading
import time
from typing import Callable

from delayq import errors
from delayq.access import tokens
from delayq.access.grants import Client, Permission
from delayq.nodes.front.caller import CERTIFICATE, Caller, current
from delayq.nodes.metrics import Metrics
from delayq.store.clients import ROTATED, ClientStore

log = logging.getLogger(__name__)

LOOKS_PER_S, LOOKS_BURST = 10, 5
NOT_VALID = "the token is not valid"        # a token that never was a client's (or long retired)
EVERYONE = Client("insecure", None, grants=frozenset((p, "*") for p in Permission))


class Access:
    def __init__(self, clients: ClientStore, metrics: Metrics, *, enabled: bool):
        self._store, self._metrics = clients, metrics
        self.enabled = enabled
        self._version: str | None = None
        self._clients: dict[str, Client] = {}
        self._lock = threading.Lock()
        self._looks, self._looked_at = float(LOOKS_BURST), time.monotonic()

    def load(self) -> None:
        """Read the clients now (at start, inside the node's wait for MySQL)."""
        self._version, self._clients = self._store.load()

    def seen(self, version: str) -> None:
        """The clients' version as it is in MySQL now: re-read them if it moved."""
        with self._lock:
            if version != self._version:
                self.load()
                log.info("clients re-read: %d known", len(self._clients))

    def _fresh_look(self) -> bool:
        """Re-read the clients now if they changed: a client added a moment ago can authenticate
        at once. At most LOOKS_PER_S a second (bursts of LOOKS_BURST), so a flood of bad tokens
        costs MySQL little; during one, a new client may wait for the next poll. True when it
        looked."""
        now = time.monotonic()
        with self._lock:
            self._looks = min(LOOKS_BURST, self._looks + (now - self._looked_at) * LOOKS_PER_S)
            self._looked_at = now
            if self._looks < 1:
                return False
            self._looks -= 1
        try:
            self.seen(self._store.version())
        except errors.DelayqError:
            return False
        return True

    # ---- identity -----------------------------------------------------------------------------

    def authenticate(self, caller: Caller | None, token: str | None) -> str:
        parsed = tokens.parse(token) if token else None
        client = self._valid(parsed)
        if client is None and parsed is not None and self._fresh_look():
            client = self._valid(parsed)
        if caller is None or client is None:
            raise self._refused(self._retired(parsed) or errors.Unauthenticated(NOT_VALID, "bad_token"))
        caller.name, caller.credential = client.name, client.token
        return client.name

    def _valid(self, parsed: tuple[str, str] | None) -> Client | None:
        if not parsed:
            return None
        client = self._clients.get(parsed[0])
        return client if client is not None and not client.revoked and tokens.same(client.token, parsed[1]) else None

    def _retired(self, parsed: tuple[str, str] | None) -> errors.Unauthenticated | None:
        """The refusal of a token its client had and no longer has, or None."""
        client = self._clients.get(parsed[0]) if parsed else None
        if parsed is None or client is None:
            return None
        for digest, why in client.retired:
            if tokens.same(digest, parsed[1]):
                if why == ROTATED:
                    return errors.Unauthenticated("the token was rotated: use the client's new token", "rotated")
                return errors.Unauthenticated("the token was revoked", "revoked")
        return None

    def client(self, caller: Caller | None) -> Client:
        """The caller's client as it stands now, or Unauthenticated."""
        if not self.enabled:
            return EVERYONE
        if caller is not None and caller.name is None and caller.certificate is not None:
            self._certified(caller, caller.certificate)
        if caller is None or caller.name is None:
            raise self._refused(errors.Unauthenticated(
                "call authenticate with a token first, or connect with a client certificate"))
        client = self._clients.get(caller.name)
        if client is None or client.revoked:
            raise self._refused(errors.Unauthenticated("the client was revoked", "revoked"))
        if caller.credential != CERTIFICATE and not tokens.same(client.token, caller.credential):
            raise self._refused(errors.Unauthenticated("the token was rotated: authenticate again", "rotated"))
        return client

    def _certified(self, caller: Caller, name: str) -> None:
        """The connection's verified certificate names a client (`name`): its calls are that client's."""
        caller.certificate = None      # looked up once per connection
        client = self._clients.get(name)
        if client is None and self._fresh_look():
            client = self._clients.get(name)
        if client is None or client.revoked:
            raise self._refused(errors.Unauthenticated(f"no client is named {name!r} as the certificate is",
                                                       "unknown_certificate"))
        caller.name, caller.credential = client.name, CERTIFICATE

    # ---- permissions --------------------------------------------------------------------------

    def require(self, caller: Caller | None, permission: Permission) -> Client:
        """The caller's client when it holds `permission` on some topic; else Forbidden."""
        client = self.client(caller)
        if not client.holds(permission):
            raise self._refused(errors.Forbidden(permission.value))
        return client

    def topics(self, client: Client, permission: Permission, topics) -> None:
        """Forbidden for the first topic, of those the call names, outside the client's grants."""
        for topic in topics:
            if not client.allows(permission, topic):
                raise self._refused(errors.Forbidden(permission.value, topic))

    def task(self, client: Client, permission: Permission, task_id: str,
             topic_of: Callable[[str], str | None]) -> None:
        """NotFound when the task's topic (looked up only when the client's grant is narrower than
        every topic) is outside the client's grants."""
        if client.everywhere(permission):
            return
        topic = topic_of(task_id)
        if topic is not None and not client.allows(permission, topic):
            raise self._refused(errors.NotFound(task_id), "hidden")

    def reporter(self, user: str | None, task_id: str, topic_of: Callable[[str], str | None]) -> None:
        """A result that came through the results queue from RabbitMQ user `user` (its `user_id`,
        which RabbitMQ checks against the publishing connection's user): Unauthenticated unless a
        client of that name holds `report` on the task's topic (Forbidden otherwise). A refused
        result is parked for good, so a client or grant added a moment ago is looked for at once."""
        if not self.enabled:
            return
        if not user:
            raise self._refused(errors.Unauthenticated("the message has no user_id"))
        # The task's topic is read once, and only for a grant narrower than every topic; an unknown
        # task passes here and is parked as such by the apply.
        topic = functools.cache(lambda: topic_of(task_id))

        def refusal(client: Client | None) -> errors.DelayqError | None:
            if client is None:
                return errors.Unauthenticated(f"no client is named {user!r}", "unknown_reporter")
            if client.revoked:
                return errors.Unauthenticated("the client was revoked", "revoked")
            if client.everywhere(Permission.REPORT):
                return None
            named = topic()
            if named is None or client.allows(Permission.REPORT, named):
                return None
            return errors.Forbidden(Permission.REPORT.value, named)

        error = refusal(self._clients.get(user))
        if error is not None and self._fresh_look():
            error = refusal(self._clients.get(user))
        if error is not None:
            raise self._refused(error)

    def _refused(self, error: errors.DelayqError, reason: str | None = None) -> errors.DelayqError:
        reason = reason or getattr(error, "why", "refused")
        self._metrics.refusals.labels(reason).inc()
        caller = current()
        if caller is not None:
            caller.refusal = reason         # the audit log says so, even where the answer is NOT_FOUND
        return error
