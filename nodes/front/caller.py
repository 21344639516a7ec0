"""Caller: who a connection's calls run as (delayq.nodes.front.access decides what they may do).

The thread serving a call finds its caller with `current()`: the CallPool sets it before each
call; submits carry theirs through the SubmitBatcher.
"""
from __future__ import annotations

import threading
from typing import Any

CERTIFICATE = "certificate"         # Caller.credential of a client known by its certificate


class Caller:
    """Who a connection's calls run as. The I/O thread notes its certificate; the thread serving
    a call sets the rest (one call per connection is served at a time)."""
    __slots__ = ("peer", "name", "credential", "certificate", "refusal")

    def __init__(self, peer: Any) -> None:     # the address as the socket gives it
        self.peer = peer
        self.name: str | None = None
        self.credential: str | None = None      # the token digest it authenticated with, or CERTIFICATE
        self.certificate: str | None = None     # the common name of its verified client certificate, not yet looked up
        self.refusal: str | None = None         # why the call being served was refused, if it was (for the audit log)


_serving = threading.local()


def serving(caller: Caller | None) -> None:
    """The thread now serves a call of this caller (CallPool, before each call)."""
    _serving.caller = caller
    if caller is not None:
        caller.refusal = None


def current() -> Caller | None:
    return getattr(_serving, "caller", None)
