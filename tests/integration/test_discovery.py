"""Discovery as a business client sees it: given one node's endpoint and its own token (the
documented client settings, no ZooKeeper identity), it learns every live node through the
`endpoints` call and keeps working through the others when the one it was given stops."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest

from conftest import ZK_HOSTS, wait_until
from delayq.client import CallbackService, DelayqClient, TaskSpec, live_endpoints
from delayq.client.gen.delayq_thrift import ttypes
from delayq.client.security import ClientSecurity
from delayq.testing import security

pytestmark = pytest.mark.integration

# A business system's process: the client settings docs/clients.md names, nothing else of delayq's.
CLIENT = """
import json, sys
from delayq.client import DelayqClient, TaskSpec
with DelayqClient.from_seeds([sys.argv[1]]) as dq:
    found = sorted(dq.endpoints().endpoints)
    dq.submit(TaskSpec(topic=sys.argv[2], taskId=sys.argv[3], delayMs=600_000, payload=b"x"))
print(json.dumps({"found": found, "kazoo": "kazoo" in sys.modules}))
"""


@pytest.fixture(scope="module")
def nodes(node_factory):
    made = [node_factory(DELAYQ_ZK_ENABLED="true") for _ in range(2)]
    wait_until(lambda: len(made[0].client().cluster().nodes) == 2, 20, 0.1, what="both nodes registered")
    return made


@pytest.fixture(scope="module")
def topic(nodes) -> str:
    name = f"disc-{uuid.uuid4().hex[:6]}"
    with nodes[0].client() as admin:
        admin.registerService(CallbackService(topic=name, ttrMs=60_000))
    return name


@pytest.fixture(scope="module")
def submit_token(clients, topic) -> str:
    return clients.add(f"submitter-{uuid.uuid4().hex[:6]}", grants=(("submit", topic),))


def test_a_submit_only_client_finds_every_node_from_one_seed_without_zookeeper(nodes, topic, submit_token):
    env = {"PATH": os.environ["PATH"], "DELAYQ_TLS_CA_FILE": str(security.ensure() / "ca.pem"),
           "DELAYQ_TOKEN": submit_token}
    out = subprocess.run([sys.executable, "-c", CLIENT, nodes[0].endpoint, topic, f"t-{uuid.uuid4().hex[:8]}"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert seen == {"found": sorted(n.endpoint for n in nodes), "kazoo": False}


def test_endpoints_is_refused_without_a_token(nodes):
    with DelayqClient([nodes[0].endpoint], security=ClientSecurity(ca_file=str(security.ensure() / "ca.pem"))) as c:
        with pytest.raises(ttypes.Unauthenticated):
            c.endpoints()


def test_a_client_from_seeds_fails_over_to_a_node_it_learned_when_its_seed_stops(node_factory, nodes, topic,
                                                                                 submit_token):
    seed = node_factory(DELAYQ_ZK_ENABLED="true")
    sec = ClientSecurity(ca_file=str(security.ensure() / "ca.pem"), token=submit_token)
    wait_until(lambda: seed.endpoint in live_endpoints([seed.endpoint], security=sec), 20, 0.1,
               what="the seed registered")
    with DelayqClient.from_seeds([seed.endpoint], security=sec) as dq:
        seed.stop()
        ref = dq.submit(TaskSpec(topic=topic, taskId=f"t-{uuid.uuid4().hex[:8]}", delayMs=600_000, payload=b"x"))
        assert ref.created


def test_from_zookeeper_still_finds_the_nodes_with_the_operators_identity_and_warns_it_is_deprecated(nodes, database):
    with pytest.warns(DeprecationWarning, match="from_seeds"):
        dq = DelayqClient.from_zookeeper(ZK_HOSTS, cluster=database.name)
    with dq:
        assert sorted(dq.endpoints().endpoints) == sorted(n.endpoint for n in nodes)


def test_the_command_with_a_submit_only_token_and_a_seed_submits_without_zookeeper(nodes, topic, submit_token):
    # The README's command-line settings for a business client: a CA, its token, a seed node;
    # ZooKeeper is named unreachable so that a command still reading it would fail.
    env = {"PATH": os.environ["PATH"], "DELAYQ_TLS_CA_FILE": str(security.ensure() / "ca.pem"),
           "DELAYQ_TOKEN": submit_token, "DELAYQ_SEEDS": nodes[1].endpoint, "DELAYQ_ZK_HOSTS": "127.0.0.1:1",
           "DELAYQ_CLUSTER": "no-such-cluster"}
    task_id = f"cli-{uuid.uuid4().hex[:8]}"
    out = subprocess.run([sys.executable, "-m", "delayq", "tasks", "submit", topic, "--delay", "10m",
                          "--payload", "x", "--id", task_id], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert task_id in out.stdout
    with nodes[0].client() as admin:
        assert admin.get(task_id).status == ttypes.TaskStatus.DELAY

    env["DELAYQ_SEEDS"] = "127.0.0.1:1"         # a seed that answers nothing: said, exit 3
    out = subprocess.run([sys.executable, "-m", "delayq", "tasks", "get", task_id], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 3 and "127.0.0.1:1" in out.stderr, (out.returncode, out.stderr)
