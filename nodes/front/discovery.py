"""DiscoveryCalls: `endpoints`, the one call that tells a client where the cluster's live nodes
are, so a client given one or a few seed endpoints learns the rest (and finds them again after a
failover) through a node, with its own token, and never needs ZooKeeper or the nodes' identity
there (docs/clients.md). Any authenticated client may make it: it names the cluster and each live
node's advertised Thrift endpoint, nothing else (`cluster()`, admin's only, says the rest).

Runs on the CallPool's threads, like delayq.nodes.front.handler.Handler.
"""
from __future__ import annotations

from typing import Callable

from delayq.client.gen.delayq_thrift import ttypes
from delayq.nodes.front.access import Access
from delayq.nodes.front.caller import current
from delayq.nodes.front.errors import CallAnswers, declared


class DiscoveryCalls:
    def __init__(self, access: Access, answers: CallAnswers, cluster: str, live: Callable[[], list[str]]):
        self._access, self.answers = access, answers
        self._cluster, self._live = cluster, live     # live: the members' endpoints as ZooKeeper has them now

    @declared
    def endpoints(self) -> ttypes.Endpoints:
        self._access.client(current())
        return ttypes.Endpoints(cluster=self._cluster, endpoints=sorted(set(self._live())))
