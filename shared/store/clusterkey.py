"""ClusterKey: the cluster's secret, one random 256-bit value every node of the cluster shares.

It is the `cluster_key` row of delayq_meta, in the cluster's database beside the digests of the
clients' tokens: only the admin account and the nodes' account can read it, every node of the
cluster reads the same one, and each cluster (each database) has its own. `delayq db init` makes
it; a node that finds none (a cluster made by an older version) makes it, the first insert
winning, so all nodes agree. Never logged, shown or counted.

Each use takes a key of its own derived from it (`derive(purpose)`, HMAC-SHA256), so knowing one
derived key tells nothing of the secret or of the others:

    key = ClusterKey(engine)
    key.derive(b"page tokens")          # the Thrift port's page tokens' MAC key (front.pages)
    key.derive(b"http peers")           # what nodes show each other on their HTTP ports

Read once, on first use (a node asks for it while it waits for MySQL at start); thread-safe.
"""
from __future__ import annotations

import hashlib
import hmac
import secrets
import threading

from sqlalchemy import Connection, Engine, text

from delayq.db import unavailable_on_failure

NAME = "cluster_key"


def create(conn: Connection) -> None:
    """Make the cluster's key unless it has one (`delayq db init`)."""
    conn.execute(text("INSERT IGNORE INTO delayq_meta (name, value) VALUES (:n, :v)"),
                 {"n": NAME, "v": secrets.token_hex(32)})


class ClusterKey:
    def __init__(self, engine: Engine):
        self._engine = engine
        self._lock = threading.Lock()
        self._secret: bytes | None = None

    def derive(self, purpose: bytes) -> bytes:
        """The key for one use; Unavailable while MySQL does not answer."""
        return hmac.new(self._value(), purpose, hashlib.sha256).digest()

    def _value(self) -> bytes:
        with self._lock:
            if self._secret is None:
                with unavailable_on_failure(), self._engine.begin() as conn:
                    create(conn)
                    value = conn.execute(text("SELECT value FROM delayq_meta WHERE name = :n"), {"n": NAME}).scalar()
                self._secret = bytes.fromhex(str(value))
            return self._secret
