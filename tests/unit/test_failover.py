"""delayq.addresses and delayq.failover.Members: which member of a replicated MySQL connections go to."""
from __future__ import annotations

import pytest

from delayq import config
from delayq.addresses import Address, parse_addresses
from delayq.errors import ConfigError
from delayq.failover import Members, not_ready
from delayq.nodes.amqp.params import amqp_parameters

A, B, C = Address("db1", 3306), Address("db2", 3307), Address("db3", 3306)


def test_addresses_are_host_port_lists_with_a_default_port():
    assert parse_addresses("db1, db2:3307 db3:3306", 3306) == (A, B, C)
    assert parse_addresses("", 3306) == ()


@pytest.mark.parametrize("bad", ["db1:x", "db1:0", "db1:70000", ":3306", "user@db1:3306", "db1/x"])
def test_a_bad_address_is_refused_by_name(bad):
    with pytest.raises(ValueError, match="db1|:3306"):
        parse_addresses(f"db2:3306,{bad}", 3306)


def test_the_settings_refuse_a_bad_host_list_naming_the_setting():
    with pytest.raises(ConfigError, match="DELAYQ_MYSQL_HOSTS"):
        config.load({"DELAYQ_MYSQL_HOSTS": "db1:nope"})
    with pytest.raises(ConfigError, match="DELAYQ_AMQP_HOSTS"):
        config.load({"DELAYQ_AMQP_HOSTS": "mq1:99999"})


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_connections_stay_on_the_current_member_until_it_fails():
    m = Members([A, B, C], clock=Clock())
    assert m.current == A and m.candidates() == [A, B, C]
    m.chose(A)
    assert m.candidates() == [A, B, C]


def test_a_failed_member_goes_last_and_the_next_one_becomes_current():
    clock = Clock()
    m = Members([A, B, C], retry_after_s=10, clock=clock)
    m.failed(A, "refused")
    assert m.candidates() == [B, C, A]
    m.chose(B)
    assert m.current == B
    # No move back once A answers again: B stays current while it works.
    clock.now += 60
    assert m.candidates() == [B, C, A]


def test_a_member_marked_down_is_tried_first_again_after_the_retry_time():
    clock = Clock()
    m = Members([A, B, C], retry_after_s=10, clock=clock)
    m.failed(A, "not primary")
    m.failed(B, "refused")
    assert m.candidates() == [C, A, B]
    clock.now += 10
    assert m.candidates() == [A, B, C]


def test_every_member_down_still_tries_them_all():
    m = Members([A, B], clock=Clock())
    m.failed(A, "x")
    m.failed(B, "y")
    assert sorted(m.candidates(), key=str) == [A, B]


def test_amqp_hosts_keep_the_urls_user_vhost_and_tls():
    params = amqp_parameters("amqps://u:p@mq:5671/v", 4000, "", "mq1:5681, mq2")
    assert [(p.host, p.port) for p in params] == [("mq1", 5681), ("mq2", 5671)]
    assert {(p.credentials.username, p.virtual_host, p.ssl_options.server_hostname) for p in params} \
        == {("u", "v", "mq1"), ("u", "v", "mq2")}
    assert all(p.socket_timeout == 4.0 and p.connection_attempts == 1 for p in params)
    one = amqp_parameters("amqp://guest:guest@127.0.0.1:5672/%2F", 5000)
    assert [(p.host, p.port) for p in one] == [("127.0.0.1", 5672)]


class FakeCursor:
    def __init__(self, conn: "FakeConn"):
        self.conn = conn
        self.row: tuple | None = None

    def __enter__(self) -> "FakeCursor":
        return self

    def __exit__(self, *exc) -> None:
        pass

    def execute(self, sql: str) -> None:
        self.conn.statements.append(sql)
        self.row = self.conn.status if "wsrep_ready" in sql else (1,)

    def fetchone(self) -> tuple | None:
        return self.row


class FakeConn:
    """A DB-API connection answering SHOW STATUS LIKE 'wsrep_ready' with `status`."""

    def __init__(self, status: tuple | None):
        self.status = status
        self.statements: list[str] = []

    def cursor(self) -> FakeCursor:
        return FakeCursor(self)


def test_a_plain_mysql_is_always_ready():
    conn = FakeConn(None)
    assert not_ready(conn) is None
    assert conn.statements == ["SHOW STATUS LIKE 'wsrep_ready'"]


def test_a_galera_member_outside_the_primary_component_is_not_used():
    assert "primary component" in (not_ready(FakeConn(("wsrep_ready", "OFF"))) or "")


def test_a_synced_galera_member_is_used_after_catching_up_with_the_cluster():
    conn = FakeConn(("wsrep_ready", "ON"))
    assert not_ready(conn) is None
    assert conn.statements[1:] == ["SET SESSION wsrep_sync_wait = 1", "SELECT 1",
                                   "SET SESSION wsrep_sync_wait = DEFAULT"]
