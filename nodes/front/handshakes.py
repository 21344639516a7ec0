"""HandshakeBudget: how many TLS handshakes each peer address may start on the Thrift port, so that
a peer connecting, handshaking and closing in a tight loop (no token needed) costs the server's I/O
thread a bounded share of its time. Pure: the caller gives the time (monotonic seconds).

Each address has a bucket of `burst` handshakes, refilled at `per_s` a second up to `burst`; a new
connection takes one, and one that finds the bucket empty is refused: closed as it is accepted,
before its handshake (delayq.nodes.front.server). A refused connection takes nothing from the
bucket, so an address that slows down to `per_s` is served again at once.

    burst 200, 20 a second; 10.0.0.7 opens 1,000 connections in one second, then 100 a second
    admitted: the first 200 at once (a client pool reconnecting after a node restart), ~20 more
          in that second; then 20 a second of the 100 it tries, the other 80 refused

Buckets are kept for at most `max_addresses` addresses, the one used least recently forgotten
first (it comes back with a full bucket); an address refused keeps its place, so a peer looping
on the port stays known while it loops.

Why a budget rather than handshakes on a pool of threads: a pool moves a handshake's CPU off the
I/O thread but does not bound it (a peer looping takes as many handshakes as the pool can do, and
on a small node that is a core the clients' calls also need), and it hands each socket between
threads, where the connection limit, the eviction order and the time-outs are kept by the I/O
thread alone (delayq.nodes.front.openconns). The budget bounds the cost per address and leaves
those rules where they are. Its price: clients behind one proxy or NAT address share one bucket
(docs/security.md, "TLS").
"""
from __future__ import annotations

import collections
import ssl
from dataclasses import dataclass, field
from typing import Callable


@dataclass
class _Bucket:
    tokens: float
    at: float           # when `tokens` was last brought up to date


class HandshakeBudget:
    """Not thread-safe: the server's I/O thread alone uses it."""

    def __init__(self, burst: int, per_s: float, max_addresses: int = 4096):
        self._burst, self._per_s, self._max = float(burst), per_s, max_addresses
        self._buckets: collections.OrderedDict[str, _Bucket] = collections.OrderedDict()

    def __len__(self) -> int:
        """Addresses told apart now."""
        return len(self._buckets)

    def admit(self, address: str, now: float) -> bool:
        """Whether a new connection from address may start its handshake now."""
        bucket = self._buckets.pop(address, None)
        if bucket is None:
            bucket = _Bucket(self._burst, now)
            if len(self._buckets) >= self._max:
                self._buckets.popitem(last=False)
        else:
            bucket.tokens = min(self._burst, bucket.tokens + max(0.0, now - bucket.at) * self._per_s)
            bucket.at = now
        self._buckets[address] = bucket         # the most recently used, last
        if bucket.tokens < 1:
            return False
        bucket.tokens -= 1
        return True


@dataclass(frozen=True)
class TlsPort:
    """What the Thrift server needs to speak TLS: the context its sockets are wrapped with, the
    budget of handshakes per address (None: no budget), and whom to tell of an address refused
    for want of one (the audit's refusal summary)."""
    context: ssl.SSLContext
    budget: HandshakeBudget | None = None
    refused: Callable[[str], None] = field(default=lambda address: None)
