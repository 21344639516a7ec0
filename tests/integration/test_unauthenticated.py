"""What a caller with no client identity costs a secured node: its refusals are counted in the
metrics and summarised in the audit log, never one row each; it gives way to authenticated clients
at the connection limit; and what it sends does not hold up the clients working."""
from __future__ import annotations

import pytest

from conftest import now_ms, wait_until
from delayq import config, db as dbm
from delayq.client import DelayqClient
from delayq.client.gen.delayq_thrift import ttypes
from delayq.client.security import ClientSecurity
from delayq.nodes.front.audit import SUMMARY, UNAUTHENTICATED
from delayq.store.audit import AuditLog
from delayq.testing import security

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def audit(database) -> AuditLog:
    return AuditLog(dbm.make_engine(config.load({"DELAYQ_MYSQL_URL": database.url}).mysql))


def tokenless(node) -> DelayqClient:
    return DelayqClient([node.endpoint], timeout_s=5, security=ClientSecurity(ca_file=str(security.ensure() / "ca.pem")))


def refusals(node, reason: str) -> float:
    return node.metrics(labelled=True).get(f'delayq_refusals_total{{reason="{reason}"}}', 0.0)


def test_300_tokenless_cancels_are_counted_and_cost_the_audit_log_two_rows(node_factory, audit):
    node = node_factory(DELAYQ_REFUSAL_AUDIT_MS="2000")
    started, before = now_ms(), refusals(node, "unauthenticated")
    with tokenless(node) as c:
        for i in range(300):
            with pytest.raises(ttypes.Unauthenticated):
                c.cancel(f"task-{i}")
    assert refusals(node, "unauthenticated") == before + 300
    rows = audit.list(actor=UNAUTHENTICATED, since_ms=started)
    assert [(r.action, r.target, r.outcome) for r in rows] == [("cancel", "task-0", "refused: unauthenticated")]
    # The rest, as one row once the interval is over: any later audited call writes it.
    with node.client() as admin:
        def summarised() -> list:
            admin.cancel("no-such-task")
            return [r for r in audit.list(actor=UNAUTHENTICATED, since_ms=started) if r.action == SUMMARY]
        [summary] = wait_until(summarised, 15, 0.2, what="the summary of the refusals")
    assert summary.address == "127.0.0.1"
    assert summary.outcome.startswith("299 unauthenticated calls refused in the last ")
    assert len(audit.list(actor=UNAUTHENTICATED, since_ms=started)) == 2
