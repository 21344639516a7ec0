"""Client changes hold on every node of a cluster within a second, without a restart."""
from __future__ import annotations

import time
import uuid

import pytest

from conftest import wait_until
from delayq.client import DelayqClient
from delayq.client.gen.delayq_thrift import ttypes
from delayq.client.security import ClientSecurity
from delayq.testing import security

pytestmark = pytest.mark.integration


def test_a_revocation_holds_on_every_node_of_a_cluster_within_a_second(node_factory, clients):
    nodes = [node_factory(DELAYQ_ZK_ENABLED="true") for _ in range(3)]
    name = f"everywhere-{uuid.uuid4().hex[:6]}"
    token = clients.add(name, grants=(("read", "*"),))
    ca = str(security.ensure() / "ca.pem")
    connected = [DelayqClient([n.endpoint], timeout_s=5, security=ClientSecurity(ca_file=ca, token=token))
                 for n in nodes]
    try:
        for c in connected:
            c.listServices()                # authenticated on each node
        clients.revoke(name)
        revoked_at = time.monotonic()
        refused_after: dict[int, float] = {}

        def all_refused() -> bool:
            for i, c in enumerate(connected):
                if i not in refused_after:
                    try:
                        c.listServices()
                    except ttypes.Unauthenticated:
                        refused_after[i] = time.monotonic() - revoked_at
            return len(refused_after) == len(connected)
        wait_until(all_refused, 2.0, 0.01, what="every node to refuse the revoked client")
        assert max(refused_after.values()) < 1.0, refused_after
    finally:
        for c in connected:
            c.close()
