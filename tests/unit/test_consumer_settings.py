"""Where the consumer helper connects (delayq.client.consumersettings): the environment the nodes
read (DELAYQ_AMQP_URL or its _FILE, DELAYQ_AMQP_CA_FILE, DELAYQ_CLUSTER), arguments over it; and
whose results queue it reports to, asking a node only when DELAYQ_CLUSTER does not say."""
from __future__ import annotations

import logging

import pytest

from delayq.client.consumer import TaskConsumer
from delayq.client.consumersettings import DEFAULT_AMQP_URL, ConsumerSettings
from delayq.client.gen.delayq_thrift import ttypes
from delayq.client.reporting import Reporter
from delayq.config import ConfigError

URL = "amqps://billing:s3cret@rabbit.example:5671/delayq"


def test_the_url_comes_from_the_environment_or_the_file_it_names(tmp_path):
    assert ConsumerSettings.from_env({"DELAYQ_AMQP_URL": URL}).amqp_url == URL
    path = tmp_path / "amqp.url"
    path.write_text(URL + "\n")
    from_file = ConsumerSettings.from_env({"DELAYQ_AMQP_URL_FILE": str(path), "DELAYQ_AMQP_CA_FILE": "/ca.pem",
                                           "DELAYQ_CLUSTER": "prod"})
    assert from_file == ConsumerSettings(amqp_url=URL, amqp_ca_file="/ca.pem", cluster="prod")
    # The variable itself wins over its file, as for the nodes.
    assert ConsumerSettings.from_env({"DELAYQ_AMQP_URL": "amqp://a:b@h/v",
                                      "DELAYQ_AMQP_URL_FILE": str(path)}).amqp_url == "amqp://a:b@h/v"


def test_nothing_set_is_the_nodes_default_and_no_cluster():
    assert ConsumerSettings.from_env({}) == ConsumerSettings(DEFAULT_AMQP_URL, "", None)
    assert DEFAULT_AMQP_URL == "amqp://guest:guest@127.0.0.1:5672/%2F"


def test_an_unreadable_url_file_names_the_variable_and_the_file_never_a_password(tmp_path):
    missing = str(tmp_path / "nope.url")
    with pytest.raises(ConfigError) as e:
        ConsumerSettings.from_env({"DELAYQ_AMQP_URL_FILE": missing})
    assert "DELAYQ_AMQP_URL_FILE" in str(e.value) and missing in str(e.value)
    assert "s3cret" not in repr(ConsumerSettings(amqp_url=URL))


def test_arguments_win_over_the_environment(monkeypatch):
    monkeypatch.setenv("DELAYQ_AMQP_URL", URL)
    monkeypatch.setenv("DELAYQ_CLUSTER", "prod")
    monkeypatch.delenv("DELAYQ_AMQP_URL_FILE", raising=False)
    from_env = TaskConsumer("t", lambda task: None)
    assert (from_env.settings.amqp_url, from_env.settings.cluster) == (URL, "prod")
    given = TaskConsumer("t", lambda task: None, amqp_url="amqp://guest:guest@localhost:5673/x", cluster="c",
                         amqp_ca_file="")
    assert (given.settings.amqp_url, given.settings.cluster) == ("amqp://guest:guest@localhost:5673/x", "c")


class Results:
    """A DelayqClient as a client without the admin grant finds it: cluster() is refused."""

    def __init__(self) -> None:
        self.asked = 0

    def cluster(self):
        self.asked += 1
        raise ttypes.Forbidden(permission="admin")


class Channel:
    def __init__(self) -> None:
        self.declared: list[str] = []

    def queue_declare(self, name, **_):
        self.declared.append(name)

    def confirm_delivery(self):
        pass


class Connection:
    def __init__(self) -> None:
        self.opened = Channel()

    def channel(self):
        return self.opened


def test_a_cluster_named_in_the_environment_spares_asking_a_node(monkeypatch, caplog):
    monkeypatch.setenv("DELAYQ_CLUSTER", "prod")
    results, conn = Results(), Connection()
    consumer = TaskConsumer("t", lambda task: None, results=results)
    assert consumer.settings.cluster == "prod"
    reporter = Reporter(results, "billing", report_timeout_s=1.0, cluster=consumer.settings.cluster)
    with caplog.at_level(logging.WARNING):
        reporter.open(conn)        # type: ignore[arg-type]
    assert conn.opened.declared == ["delayq.results.prod"] and results.asked == 0 and not caplog.records


def test_without_it_a_refused_question_falls_back_to_the_default_queue_saying_how_to_fix_it(caplog):
    results, conn = Results(), Connection()
    with caplog.at_level(logging.WARNING):
        Reporter(results, "billing", report_timeout_s=1.0, cluster=None).open(conn)    # type: ignore[arg-type]
    assert conn.opened.declared == ["delayq.results.default"] and results.asked == 1
    assert "DELAYQ_CLUSTER" in caplog.text
