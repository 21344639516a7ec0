"""What the audit and layout commands show and refuse without a cluster: text any client could have
put in the audit log, or a node name in the intents, printed with its control characters escaped;
node names no node can have, and waits that are not a number of seconds 0 or more, refused as
usage errors (exit 2) before anything is asked of the cluster or recorded."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from delayq import config
from delayq.errors import ConfigError
from delayq.ops.audit import line
from delayq.ops.cli import main
from delayq.ops.cluster import intents_text
from delayq.ops.status import render
from delayq.store.audit import Entry
from delayq.zkpaths import node_id_problem

OSC_TITLE, CR = "\x1b]0;pwned\x07zz", "ab\rXX"


def test_an_audit_row_prints_its_clients_control_characters_escaped():
    printed = line(Entry(0, "reader\x1b[2J", "10.0.0.1", "cancel", OSC_TITLE, "refused: forbidden"))
    assert printed.isprintable()
    assert "reader\\x1b[2J" in printed and "\\x1b]0;pwned\\x07zz" in printed
    assert line(Entry(0, "operator:ann", "host", "tenants.create", "x\x1by", "ok")).split()[-2:] == ["x\\x1by", "ok"]
    assert "ab\\rXX" in line(Entry(0, "reader", "10.0.0.1", "cancel", CR, "refused: hidden"))


def test_the_intents_print_node_names_escaped():
    text = intents_text({"drained": ["n1", "x\x1by"], "pinned": {"3": "a\rb"}, "reshardTo": None})
    assert text.splitlines() == ["drained: n1, x\\x1by", "pinned: 3->a\\rb", "reshard in progress: no"]


def test_status_prints_the_names_operators_asked_for_escaped():
    report = {"cluster": "c", "master": "n1", "epoch": 3, "shards": 4, "maxClockOffsetMs": 100,
              "nodes": [{"node": "n1", "endpoint": "h:9090", "shards": 4, "queue": 0, "master": True,
                         "drained": False}],
              "drained": ["gone\x1b]0;x\x07"], "pinned": {"2": "a\rb"}, "tasks": {"DELAY": 0},
              "oldestOverdueMs": None}
    text = render(report)
    assert all(line.isprintable() for line in text.splitlines())
    assert "drained, not a member now: gone\\x1b]0;x\\x07" in text and "pinned shards: 2 -> a\\rb" in text


@pytest.mark.parametrize("name", ["node2", "host-9090", "db.example.org-9091", "n_1:a", "узел-1", "a@b"])
def test_a_name_a_node_can_have_is_taken(name):
    assert node_id_problem(name) is None


@pytest.mark.parametrize("name, reason", [
    ("", "is required"), (None, "is required"), ("x" * 129, "at most 128"), (".", "must not be '.'"),
    ("..", "must not be '..'"), ("a/b", "'/'"), ("x\x1by", "U+001B"), ("a\u2028b", "U+2028"),
    ("a\x85b", "U+0085"), ("emoji\U0001F600", "U+1F600"), ("private\ue000", "U+E000")])
def test_a_name_no_node_can_have_is_refused_saying_why(name, reason):
    problem = node_id_problem(name)
    assert problem is not None and reason in problem


def test_a_node_does_not_start_with_an_id_it_could_not_join_as():
    with pytest.raises(ConfigError, match="DELAYQ_NODE_ID must not hold '/'"):
        config.check_node(config.load({"DELAYQ_INSECURE": "true", "DELAYQ_NODE_ID": "rack1/node2"}))
    config.check_node(config.load({"DELAYQ_INSECURE": "true", "DELAYQ_NODE_ID": "rack1-node2"}))


@pytest.mark.parametrize("args, says", [
    (["drain", "", "--force"], "nodeId '' is required"),
    (["drain", "x\x1by", "--force"], "nodeId 'x\\x1by' must not hold '\\x1b'"),
    (["drain", "a/b", "--force"], "nodeId 'a/b' must not hold '/'"),
    (["pin", "3", "a/b", "--force"], "nodeId 'a/b' must not hold '/'"),
    (["drain", "--timeout", "-5", "node2"], "Invalid value for '--timeout': -5.0 is not in the range x>=0"),
    (["drain", "--timeout", "nan", "node2"], "'nan' is not a number of seconds"),
    (["undrain", "--timeout", "-1", "node2"], "--timeout"),
    (["rebalance", "--timeout", "inf"], "'inf' is not a number of seconds"),
    (["reshard", "--shards", "4", "--timeout", "-1"], "--timeout"),
    (["demo", "--timeout", "-1"], "--timeout")])
def test_an_impossible_node_or_wait_is_a_usage_error(args, says):
    # No MySQL, ZooKeeper or node is reachable here: the refusal comes before any of them is asked.
    out = CliRunner().invoke(main, args, env={"DELAYQ_MYSQL_URL": "mysql+pymysql://nobody@127.0.0.1:1/none",
                                              "DELAYQ_ZK_HOSTS": "127.0.0.1:1"})
    assert out.exit_code == 2, out.output
    assert says in out.output
