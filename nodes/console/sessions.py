"""Sessions: who is logged in to this node's console, and each session's CSRF token.

A session holds the client's name and the credential it authenticated with (the digest of its
token), exactly what a Thrift connection's Caller holds after `authenticate`, so each request is
checked as a call on that connection would be: a revoked client or a rotated token ends it.
Sessions live in this node's memory: a restart, or another node, asks for the token again. The
session id (the cookie) and the CSRF token are 256-bit random values, never logged.

A session ends IDLE_S after its person last did something (a page opened, a form sent): the pages'
own refreshing (`get(..., acted=False)`) reads it without keeping it alive, so a tab left open
ends like any other. Each client holds at most PER_CLIENT sessions (its next login ends its own
oldest), and the node at most MAX_SESSIONS: a login beyond that is refused (`Full`), so no client,
however often it logs in, ends another client's session.

Thread-safe: the HTTP server serves each request on a thread of its own.
"""
from __future__ import annotations

import hmac
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

IDLE_S = 30 * 60            # a session its person left alone this long ends
MAX_AGE_S = 12 * 3600       # and any session after this long
PER_CLIENT = 20             # one client's sessions: its browsers and tabs, not a flood
MAX_SESSIONS = 10_000       # bounded memory whatever logs in


class Full(Exception):
    """The node holds MAX_SESSIONS live sessions: the login is refused (none is ended for it)."""


@dataclass
class Session:
    id: str
    client: str
    credential: str | None          # as delayq.nodes.front.caller.Caller.credential
    csrf: str
    opened: float
    acted: float = field(default=0.0)       # when its person last did something
    flash: tuple[str, str] | None = None     # ("ok" or "error", what the last action did), shown once


class Sessions:
    def __init__(self, now: Callable[[], float] = time.monotonic):
        self._now = now
        self._lock = threading.Lock()
        self._by_id: dict[str, Session] = {}

    def open(self, client: str, credential: str | None) -> Session:
        """A new session of `client`; Full when the node holds MAX_SESSIONS live ones."""
        now = self._now()
        s = Session(secrets.token_urlsafe(32), client, credential, secrets.token_urlsafe(32), now, now)
        with self._lock:
            own = sorted((x for x in self._by_id.values() if x.client == client), key=lambda x: x.acted)
            for old in own[:max(0, len(own) - PER_CLIENT + 1)]:
                del self._by_id[old.id]
            if len(self._by_id) >= MAX_SESSIONS:
                self._drop_ended(now)
            if len(self._by_id) >= MAX_SESSIONS:
                raise Full()
            self._by_id[s.id] = s
        return s

    def get(self, session_id: str | None, acted: bool = True) -> Session | None:
        """The live session of this id, or None. `acted`: its person did something (its idle
        clock restarts); a page refreshing itself passes False."""
        if not session_id:
            return None
        now = self._now()
        with self._lock:
            s = self._by_id.get(session_id)
            if s is None:
                return None
            if _ended(s, now):
                del self._by_id[session_id]
                return None
            if acted:
                s.acted = now
            return s

    def _drop_ended(self, now: float) -> None:
        for s in [s for s in self._by_id.values() if _ended(s, now)]:
            del self._by_id[s.id]

    def close(self, session_id: str | None) -> None:
        with self._lock:
            self._by_id.pop(session_id or "", None)

    def __len__(self) -> int:
        return len(self._by_id)


def _ended(s: Session, now: float) -> bool:
    return now - s.acted > IDLE_S or now - s.opened > MAX_AGE_S


def csrf_ok(session: Session, submitted: str | None) -> bool:
    """The form carried the session's CSRF token (compared in constant time)."""
    return bool(submitted) and hmac.compare_digest(session.csrf.encode(), (submitted or "").encode())


def same_origin(origin: str | None, host: str | None, secure: bool) -> bool:
    """A browser's Origin header (sent with every POST) names this console's own address. No
    Origin (an old browser, a script) passes here; the CSRF token still has to match."""
    if not origin:
        return True
    return bool(host) and origin == f"{'https' if secure else 'http'}://{host}"


def local_path(url: str | None) -> str | None:
    """A redirect target inside the console only: no open redirect to another site, and printable
    ASCII only (a CR or LF would end the Location header and start one of the sender's)."""
    if not url or not url.startswith("/ui/") or url.startswith("//") or "\\" in url:
        return None
    if any(not 0x21 <= ord(ch) <= 0x7e for ch in url):
        return None
    return url
