"""Tenants and quotas as a client and an operator see them, on a secured node in ZooKeeper mode:
each quota refuses with QuotaExceeded naming it and writes nothing, a topic without a tenant is
unaffected, `delayq tenants` changes hold on the node within a second, and a second node halves
the first one's share of a submit rate."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import pytest
from sqlalchemy import text

from conftest import wait_until
from delayq import config, db as dbm
from delayq.client import CallbackService, TaskSpec
from delayq.client.gen.delayq_thrift import ttypes
from delayq.store.clients import ClientStore
from delayq.store.tenants import TenantStore

pytestmark = pytest.mark.integration

PROBE = 1000        # every tenant here refuses payloads over this: how a test sees its quotas hold


@pytest.fixture(scope="module")
def node(node_factory):
    """Alone in its cluster until the last test adds a second member."""
    return node_factory(DELAYQ_ZK_ENABLED="true")


@pytest.fixture(scope="module")
def engine(database):
    e = dbm.make_engine(config.load({"DELAYQ_MYSQL_URL": database.url}).mysql)
    yield e
    e.dispose()


@pytest.fixture(scope="module")
def tenants(engine) -> TenantStore:
    return TenantStore(engine)


@pytest.fixture(scope="module")
def admin(node):
    with node.client() as c:
        yield c


def fresh_topic(admin) -> str:
    topic = f"q.{uuid.uuid4().hex[:8]}"
    admin.registerService(CallbackService(topic=topic, ttrMs=60_000))
    return topic


def refusal(admin, *specs: TaskSpec) -> ttypes.QuotaExceeded | None:
    try:
        admin.submitBatch(list(specs)) if len(specs) > 1 else admin.submit(specs[0])
    except ttypes.QuotaExceeded as e:
        return e
    return None


def later(topic: str, payload: bytes = b"x", **kw) -> TaskSpec:
    return TaskSpec(topic=topic, delayMs=kw.pop("delayMs", 600_000), payload=payload, **kw)


def probe(admin, topic: str, size: int) -> ttypes.QuotaExceeded | None:
    """Whether a payload of `size` bytes is over the topic's quota, writing nothing either way:
    the batch's second task is malformed (InvalidTask) and the quotas are checked first."""
    try:
        admin.submitBatch([later(topic, b"p" * size), TaskSpec(topic=topic)])
    except ttypes.QuotaExceeded as e:
        return e
    except ttypes.InvalidTask:
        return None
    raise AssertionError("a malformed batch was accepted")


def limited(admin, tenants, **quotas) -> str:
    """A fresh topic in a fresh tenant with these quotas, once the node applies them."""
    topic, name = fresh_topic(admin), f"t-{uuid.uuid4().hex[:8]}"
    tenants.create(name, {"max_payload_bytes": PROBE, **quotas})
    tenants.assign(name, topics=[topic])
    wait_until(lambda: probe(admin, topic, PROBE + 1), 2, what="the tenant's quotas to hold")
    return topic


def rows(engine, topic: str) -> int:
    with engine.connect() as conn:
        return conn.execute(text("SELECT COUNT(*) FROM job_delay_task WHERE topic = :t"), {"t": topic}).scalar()


def quota_refusals(node, tenant: str, quota: str) -> float:
    return node.metrics(labelled=True).get(f'delayq_quota_refusals_total{{quota="{quota}",tenant="{tenant}"}}', 0.0)


def delayq(database, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "delayq", *args], env={**os.environ, "DELAYQ_MYSQL_URL": database.url},
                          capture_output=True, text=True, timeout=60)


# ---- each quota ----------------------------------------------------------------------------------

def test_payload_size_and_horizon_refuse_naming_the_quota_and_the_task_of_a_batch(node, admin, tenants, engine,
                                                                                  database):
    topic = limited(admin, tenants, max_payload_bytes=8, max_horizon_ms=60_000)
    e = refusal(admin, later(topic, b"123456789", delayMs=1000))
    assert (e.quota, e.limit, e.index) == ("payloadSize", 8, None) and e.tenant.startswith("t-")
    assert quota_refusals(node, e.tenant, "payloadSize") >= 1
    out = delayq(database, "tasks", "submit", topic, "--delay", "1s", "--payload", "123456789",
                 "--endpoint", node.endpoint)
    assert out.returncode == 1 and "over its payloadSize quota of 8" in out.stderr, out.stderr
    e = refusal(admin, later(topic, delayMs=1000), later(topic, delayMs=60_001), later(topic, delayMs=1000))
    assert (e.quota, e.limit, e.index) == ("horizon", 60_000, 1)
    e = refusal(admin, later(topic, delayMs=None, dueAtMs=int(time.time() * 1000) + 3_600_000))
    assert e.quota == "horizon"
    assert rows(engine, topic) == 0
    assert admin.submitBatch([later(topic, b"12345678", delayMs=60_000)] * 3)
    assert rows(engine, topic) == 3


def test_pending_refuses_a_batch_over_it_whole_and_writes_nothing(node, admin, tenants, engine):
    topic = limited(admin, tenants, max_pending=5)
    admin.submitBatch([later(topic)] * 4)
    e = refusal(admin, *[later(topic)] * 2)
    assert (e.quota, e.limit, e.index) == ("pending", 5, None)
    assert rows(engine, topic) == 4
    assert admin.submit(later(topic)).created
    assert refusal(admin, later(topic)).quota == "pending"
    before = node.metrics(labelled=True).get('delayq_thrift_requests_total{method="submit",outcome="quota"}', 0)
    assert refusal(admin, later(topic)).quota == "pending"
    after = node.metrics(labelled=True)['delayq_thrift_requests_total{method="submit",outcome="quota"}']
    assert after == before + 1
    # A cancelled task leaves the count: the next count (within a second or so) makes room.
    with engine.connect() as conn:
        victim = conn.execute(text("SELECT task_id FROM job_delay_task WHERE topic = :t LIMIT 1"), {"t": topic}).scalar()
    assert admin.cancel(victim) == ttypes.CancelResult.CANCELLED
    wait_until(lambda: refusal(admin, later(topic)) is None, 5, what="room for one task after a cancel")
    assert rows(engine, topic) == 5


def test_submit_rate_refuses_past_its_burst_and_lets_through_again_as_it_refills(admin, tenants, engine):
    topic = limited(admin, tenants, max_submit_rate=5)      # the only node: its share is all 5/s
    assert len(admin.submitBatch([later(topic)] * 5)) == 5
    e = refusal(admin, later(topic))
    assert (e.quota, e.limit) == ("submitRate", 5)
    started = time.monotonic()
    wait_until(lambda: refusal(admin, later(topic)) is None, 2, what="the bucket to refill")
    assert time.monotonic() - started >= 0.1         # one token takes 0.2 s at 5/s
    assert rows(engine, topic) == 6


def test_a_topic_without_a_tenant_is_unaffected(admin, tenants, engine):
    limited(admin, tenants, max_pending=1, max_submit_rate=1, max_horizon_ms=1000, max_payload_bytes=1)
    free = fresh_topic(admin)
    for _ in range(3):
        assert admin.submitBatch([later(free, b"p" * 5000, delayMs=3_600_000)] * 100)
    assert rows(engine, free) == 300


# ---- the command ---------------------------------------------------------------------------------

def test_a_change_made_with_the_command_holds_on_the_node_within_a_second(node, admin, database, engine):
    topic, name = fresh_topic(admin), f"cli-{uuid.uuid4().hex[:6]}"
    client = f"cl-{uuid.uuid4().hex[:6]}"
    ClientStore(engine).add(client, token=False)
    for args in (("create", name, "--max-payload-bytes", "64", "--max-horizon", "1h"),
                 ("assign", name, "--topic", topic, "--client", client)):
        out = delayq(database, "tenants", *args)
        assert out.returncode == 0, out.stderr
    changed = time.monotonic()
    e = wait_until(lambda: probe(admin, topic, 65), 1.0, what="the new quota to hold")
    assert time.monotonic() - changed < 1.0 and (e.tenant, e.quota, e.limit) == (name, "payloadSize", 64)
    admin.submit(later(topic))
    shown = json.loads(delayq(database, "tenants", "show", name, "--json").stdout)
    assert shown == {"name": name, "topics": [topic], "clients": [client], "pending": 1,
                     "quotas": {"pending": None, "submitRate": None, "horizon": 3_600_000, "payloadSize": 64}}
    assert "max horizon:      1h" in delayq(database, "tenants", "show", name).stdout
    assert name in [t["name"] for t in json.loads(delayq(database, "tenants", "list", "--json").stdout)]
    listed = json.loads(delayq(database, "clients", "list", "--json").stdout)
    assert next(c for c in listed if c["name"] == client)["tenant"] == name

    assert delayq(database, "tenants", "update", name, "--max-payload-bytes", "none").returncode == 0
    changed = time.monotonic()
    wait_until(lambda: probe(admin, topic, 65) is None, 1.0, what="the quota to be cleared")
    assert time.monotonic() - changed < 1.0
    assert delayq(database, "tenants", "unassign", name, "--topic", topic, "--client", client).returncode == 0
    assert delayq(database, "tenants", "delete", name).returncode == 0
    audit = json.loads(delayq(database, "audit", "--json", "--limit", "5").stdout)
    assert [(r["action"], r["outcome"]) for r in audit][:2] == [("tenants.delete", "ok"), ("tenants.unassign", "ok")]
    assert all(r["actor"].startswith("operator:") for r in audit)


@pytest.mark.parametrize("args, says", [
    (("create", "Bad Name"), "tenant name"),
    (("create", "ok-name", "--max-pending", "0"), "pending quota"),
    (("create", "ok-name", "--max-horizon", "5y"), "duration"),
    (("update", "nobody-here", "--max-pending", "5"), "no tenant"),
    (("assign", "nobody-here", "--topic", "x"), "no tenant"),
    (("show", "nobody-here"), "no tenant"),
])
def test_the_command_refuses_bad_input_with_exit_2(database, args, says):
    out = delayq(database, "tenants", *args)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert says in out.stderr and "Traceback" not in out.stderr


def test_the_command_refuses_unknown_topics_and_deleting_a_tenant_in_use(admin, tenants, database):
    topic, name = fresh_topic(admin), f"use-{uuid.uuid4().hex[:6]}"
    tenants.create(name)
    out = delayq(database, "tenants", "assign", name, "--topic", "no.such.topic")
    assert out.returncode == 2 and "unknown topic 'no.such.topic'" in out.stderr
    tenants.assign(name, topics=[topic])
    out = delayq(database, "tenants", "delete", name)
    assert out.returncode == 2 and f"still has topics {topic}" in out.stderr and "Traceback" not in out.stderr


# ---- the split between nodes (last: it adds a member) ------------------------------------------

def test_a_second_live_node_halves_the_first_ones_share_of_a_submit_rate(node, node_factory, admin, tenants):
    topic = limited(admin, tenants, max_submit_rate=20)
    second = node_factory(DELAYQ_ZK_ENABLED="true")
    wait_until(lambda: len(admin.cluster().nodes) == 2, 10, what="two members")

    def share_is_half() -> bool:
        # With the bucket full (called a second apart): 10 at once, then nothing more, is a share of
        # 10/s with a burst of 10; alone, the node would have 20 to give.
        if refusal(admin, *[later(topic)] * 10) is not None:
            return False
        e = refusal(admin, later(topic))
        return e is not None and (e.quota, e.limit) == ("submitRate", 20)
    wait_until(share_is_half, 8, interval=1.1, what="the first node to see the second")
    second.stop()
