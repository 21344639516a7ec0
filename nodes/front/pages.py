"""Page tokens of findByKey and listTasks: opaque to clients, checked by nodes.

A token is the position after the last task of a page (its sort value and task id) with a
checksum of the position and of the query it pages, so a token is refused (InvalidTask on
`pageToken`) when it was cut or changed, or is given with another query than its own: a client
cannot page one topic with a token of another. The checksum is keyed with a key derived from the
cluster's secret (delayq.store.clusterkey), so only the cluster's nodes make tokens it takes: any
node reads any node's tokens, another cluster's are refused. They do not expire. Pure.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json

from delayq.errors import InvalidTask

_MAC_BYTES = 8
PURPOSE = b"delayq page tokens 1"          # the cluster key's derivation for them


def query_of(*parts: object) -> bytes:
    """The identity of a query (its call and every argument but the token)."""
    return repr(parts).encode()


def _mac(key: bytes, query: bytes, body: bytes) -> bytes:
    return hashlib.blake2b(body, key=key, person=hashlib.blake2b(query, digest_size=16).digest(),
                           digest_size=_MAC_BYTES).digest()


def encode(key: bytes, query: bytes, position: tuple[int, str]) -> str:
    body = json.dumps([position[0], position[1]], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(body + _mac(key, query, body)).decode().rstrip("=")


def decode(key: bytes, query: bytes, token: str | None) -> tuple[int, str] | None:
    """The position a token holds (None: no token, the first page)."""
    if not token:
        return None
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except (binascii.Error, ValueError):
        raise InvalidTask("pageToken", "is not a page token") from None
    body, mac = raw[:-_MAC_BYTES], raw[-_MAC_BYTES:]
    if len(raw) <= _MAC_BYTES or not hmac.compare_digest(_mac(key, query, body), mac):
        raise InvalidTask("pageToken", "is not a token of this query (give the same arguments as for its page)")
    value, task_id = json.loads(body)
    return int(value), str(task_id)
