"""The audit log as an auditor reads it (`delayq audit`): who did what, to what, from where, when,
and how it ended, for the nodes' admin calls, cancels and reschedules and for operators' changes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from conftest import now_ms
from delayq.client import CallbackService, CancelResult, DelayqClient, TaskSpec
from delayq.client.gen.delayq_thrift import ttypes
from delayq.client.security import ClientSecurity
from delayq.testing import security

pytestmark = pytest.mark.integration


def delayq(database, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "delayq", *args], env={**os.environ, "DELAYQ_MYSQL_URL": database.url},
                          capture_output=True, text=True, timeout=60)


def log(database, *filters: str) -> list[dict]:
    out = delayq(database, "audit", "--json", *filters)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def as_client(node, token: str) -> DelayqClient:
    return DelayqClient([node.endpoint], timeout_s=5,
                        security=ClientSecurity(ca_file=str(security.ensure() / "ca.pem"), token=token))


def test_admin_calls_cancels_and_reschedules_are_recorded_with_who_and_how_they_ended(node, database, clients):
    started = now_ms()
    topic, other = f"au-{uuid.uuid4().hex[:6]}", f"au-other-{uuid.uuid4().hex[:6]}"
    with node.client() as admin:
        admin.registerService(CallbackService(topic=topic, ttrMs=60_000))
        admin.registerService(CallbackService(topic=other, ttrMs=60_000))
        mine = admin.submit(TaskSpec(topic=topic, delayMs=600_000)).taskId
        theirs = admin.submit(TaskSpec(topic=other, delayMs=600_000)).taskId
    name = f"au-{uuid.uuid4().hex[:6]}"
    token = clients.add(name, grants=(("cancel", topic), ("submit", topic)))
    with as_client(node, token) as c:
        c.reschedule(mine, now_ms() + 900_000)
        assert c.cancel(mine) == CancelResult.CANCELLED
        assert c.cancel(theirs) == CancelResult.NOT_FOUND
        with pytest.raises(ttypes.Forbidden):
            c.registerService(CallbackService(topic=topic, exchange="elsewhere"))
    rows = [(r["actor"], r["action"], r["target"], r["outcome"]) for r in log(database, "--since", str(started))]
    assert (security.ADMIN, "registerService", topic, "ok") in rows
    assert (name, "reschedule", mine, "ok") in rows
    assert (name, "cancel", mine, "CANCELLED") in rows
    assert (name, "cancel", theirs, "refused: hidden") in rows
    assert (name, "registerService", topic, "refused: forbidden") in rows
    mine_only = log(database, "--actor", name)
    assert {r["actor"] for r in mine_only} == {name} and len(mine_only) == 4
    assert all(r["address"] == "127.0.0.1" and r["atMs"] >= started for r in mine_only)


def test_operators_changes_are_recorded_as_the_operator(database, clients):
    name = f"op-{uuid.uuid4().hex[:6]}"
    assert delayq(database, "clients", "add", name, "--grant", "read:*").returncode == 0
    assert delayq(database, "clients", "grant", name, "submit:x.*").returncode == 0
    assert delayq(database, "clients", "grant", "nobody-at-all", "submit:x.*").returncode == 2
    assert delayq(database, "clients", "revoke", name).returncode == 0
    rows = log(database, "--action", "clients.grant")
    targets = {(r["target"], r["outcome"]) for r in rows}
    assert (f"{name} submit:x.*", "ok") in targets and ("nobody-at-all submit:x.*", "refused") in targets
    assert all(r["actor"].startswith("operator:") for r in rows)
    assert [r["action"] for r in log(database, "--limit", "1")] == ["clients.revoke"]


def test_audit_refuses_a_bad_time_with_exit_2(database):
    out = delayq(database, "audit", "--since", "yesterday-ish")
    assert out.returncode == 2 and "ISO 8601" in out.stderr


def test_what_a_read_only_client_sent_is_printed_escaped(node, database, clients):
    name = f"au-ro-{uuid.uuid4().hex[:6]}"
    token = clients.add(name, grants=(("read", "*"),))
    with as_client(node, token) as c:
        for made_up in ("\x1b]0;pwned\x07zz", "ab\rXX"):
            with pytest.raises(ttypes.InvalidTask):
                c.cancel(made_up)
    assert sorted(r["target"] for r in log(database, "--actor", name)) == ["\x1b]0;pwned\x07zz", "ab\rXX"]
    out = delayq(database, "audit", "--actor", name)
    assert out.returncode == 0, out.stderr
    assert "\x1b" not in out.stdout and "\r" not in out.stdout and "\x07" not in out.stdout
    assert "\\x1b]0;pwned\\x07zz" in out.stdout and "ab\\rXX" in out.stdout
