"""HttpGate: who may read more than a health check on the node's HTTP port.

Anonymous callers (probes, orchestrators, anyone who reaches the port) learn from /readyz only
ready or not (its status code) and nothing of /history. The whole of /readyz (the failing parts,
the detail) and /history go to a request with `Authorization: Bearer <credential>` where the
credential is

- a client token whose client holds `admin` (operators: `curl -H "Authorization: Bearer $(cat
  admin.token)" https://node:10090/readyz`), checked by Access as `authenticate` checks it;
- or the cluster's node credential, which every node derives from the cluster's secret
  (delayq.store.clusterkey) and sends to the others for their history and readiness
  (delayq.nodes.console.peers). It opens these two paths and nothing else, and tells nothing
  of the secret it comes from.

On a node without security (DELAYQ_INSECURE), where every call is allowed, everyone may.
Thread-safe; a look-up costs what an `authenticate` does.
"""
from __future__ import annotations

import hmac
import logging
from typing import Callable

from delayq import errors
from delayq.access.grants import Permission
from delayq.nodes.front.access import Access
from delayq.nodes.front.caller import Caller

log = logging.getLogger(__name__)

PURPOSE = b"delayq http peers 1"       # the cluster key's derivation for the node credential
NODE = "delayq-node"                   # the credential's name part (no client may have it: a token's is a name)


class HttpGate:
    def __init__(self, access: Access, node_key: Callable[[], bytes]):
        """`node_key`: the cluster key derived for PURPOSE (Unavailable while MySQL is away)."""
        self._access, self._node_key = access, node_key

    def credential(self) -> str | None:
        """What this node sends to the others' HTTP ports; None until it has the cluster key."""
        try:
            return f"{NODE}.{self._node_key().hex()}"
        except errors.DelayqError:
            return None

    def admits(self, authorization: str | None, peer: tuple) -> bool:
        """The request may read the whole of /readyz and /history."""
        if not self._access.enabled:
            return True
        scheme, _, given = (authorization or "").partition(" ")
        given = given.strip()
        if scheme.lower() != "bearer" or not given:
            return False
        if given.startswith(NODE + "."):
            mine = self.credential()
            return mine is not None and hmac.compare_digest(mine.encode(), given.encode())
        caller = Caller(peer)
        try:
            self._access.authenticate(caller, given)
            return self._access.client(caller).holds(Permission.ADMIN)
        except errors.Unauthenticated:
            return False
