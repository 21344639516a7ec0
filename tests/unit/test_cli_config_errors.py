"""What `delayq` says of a setting it cannot use, without a server: a message naming the option or
the variable (never a password it may hold) and exit 2, not a traceback; an account MySQL refuses
is a configuration error, not an outage (exit 3)."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from delayq.client.gen.delayq_thrift import ttypes
from delayq.client.security import ClientSecurity
from delayq.db import checked_url
from delayq.errors import ConfigError, StoreUnavailable
from delayq.ops.cli import main
from delayq.ops.common import EXIT_UNAVAILABLE, EXIT_USAGE, said
from delayq.ops.tasks import over_frame_cap

SECRET = "s3cret-pw"
# No node listens there: a command that got as far as connecting would exit 3.
NOWHERE = "127.0.0.1:1"


@pytest.mark.parametrize("url, says", [
    (f"garbage-{SECRET}", "is not a URL of the form"),
    (f"garbage://u:{SECRET}@h/db", "through PyMySQL, not 'garbage'"),
    (f"mysql://u:{SECRET}@h/db", "through PyMySQL, not 'mysql'"),
    (f"postgresql://u:{SECRET}@h/db", "through PyMySQL, not 'postgresql'"),
    (f"mysql+pymysql://u:{SECRET}@h:3306/db?connect_timeout=abc", "an option in the URL's query is not valid"),
    (f"mysql+pymysql://u:{SECRET}@h:port/db", "is not a URL of the form"),
    (f"mysql+pymysql://u:{SECRET}@h:3306/db?bogus=1&charset=utf8mb4", "takes no option bogus"),
])
def test_a_mysql_url_that_cannot_be_used_is_a_config_error_that_hides_the_password(url, says):
    with pytest.raises(ConfigError) as e:
        checked_url(url)
    assert str(e.value).startswith("DELAYQ_MYSQL_URL") and says in str(e.value)
    assert SECRET not in str(e.value)


def test_a_usable_url_with_driver_options_is_taken():
    url = checked_url(f"mysql+pymysql://u:{SECRET}@h:3306/db?charset=utf8mb4&ssl_ca=/ca.pem")
    assert (url.host, url.port, url.database) == ("h", 3306, "db")


@pytest.mark.parametrize("args", [["clients", "list"], ["clients", "rotate", "demo"], ["tenants", "list"]])
def test_a_command_with_an_unusable_mysql_url_says_so_and_exits_2(args):
    result = CliRunner().invoke(main, args, env={"DELAYQ_MYSQL_URL": f"garbage://u:{SECRET}@h/db"})
    assert result.exit_code == EXIT_USAGE, result.output
    assert isinstance(result.exception, SystemExit)        # not a traceback
    assert "DELAYQ_MYSQL_URL: delayq speaks to MySQL through PyMySQL, not 'garbage'" in result.output and SECRET not in result.output


@pytest.mark.parametrize("args", [["status", "--endpoint", "garbage"], ["tasks", "get", "t-1", "--endpoint", "garbage"],
                                  ["topics", "list", "--endpoint", "h:port"]])
def test_an_endpoint_that_is_not_host_and_port_is_a_usage_error_naming_the_option(args):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == EXIT_USAGE, result.output
    assert isinstance(result.exception, SystemExit)
    assert "Invalid value for '--endpoint'" in result.output and "expected HOST:PORT" in result.output


def test_a_ca_file_that_cannot_be_read_names_the_variable_and_exits_2():
    result = CliRunner().invoke(main, ["tasks", "get", "t-1", "--endpoint", NOWHERE],
                                env={"DELAYQ_TLS_CA_FILE": "/nonexistent/ca.pem", "DELAYQ_INSECURE": None})
    assert result.exit_code == EXIT_USAGE, result.output
    assert "DELAYQ_TLS_CA_FILE /nonexistent/ca.pem: No such file or directory" in result.output


def test_a_client_certificate_that_cannot_be_read_names_the_variables(tmp_path):
    with pytest.raises(ConfigError, match="DELAYQ_TLS_CLIENT_CERT_FILE .*DELAYQ_TLS_CLIENT_KEY_FILE"):
        ClientSecurity(cert_file=str(tmp_path / "missing.pem")).context()


def test_a_payload_over_the_frame_cap_is_refused_before_it_is_sent(tmp_path):
    big = tmp_path / "big"
    big.write_bytes(b"x" * 9_000_000)
    result = CliRunner().invoke(main, ["tasks", "submit", "demo", "--delay", "60s", "--payload-file", str(big),
                                       "--endpoint", NOWHERE])
    assert result.exit_code == EXIT_USAGE, result.output
    assert "payload: 9000000 bytes is larger than a node accepts" in result.output
    assert "DELAYQ_MAX_FRAME_BYTES (8388608 bytes)" in result.output and "DELAYQ_MAX_PAYLOAD_BYTES" in result.output


def test_the_frame_cap_counts_the_whole_call_not_the_payload_alone():
    cap = 100_000
    spec = ttypes.TaskSpec(topic="demo", payload=b"x" * (cap - 200), delayMs=1000)
    assert over_frame_cap(spec, cap) is None
    spec.key = "k" * 255
    spec.tags = ["t" * 64] * 8
    assert over_frame_cap(spec, cap) is not None        # the payload fits alone; the call does not


@pytest.mark.parametrize("error, code, says", [
    (StoreUnavailable("MySQL unavailable: (1142, 'INSERT command denied')", 1142), EXIT_USAGE, "lacks a privilege"),
    (StoreUnavailable("MySQL unavailable: (1045, 'Access denied')", 1045), EXIT_USAGE, "user or password"),
    (StoreUnavailable("MySQL unavailable: (2003, \"Can't connect\")", 2003), EXIT_UNAVAILABLE, "MySQL unavailable"),
    (ConfigError("DELAYQ_ZK_AUTH ..."), EXIT_USAGE, "DELAYQ_ZK_AUTH"),
])
def test_an_account_mysql_refuses_is_a_configuration_error_and_an_outage_is_not(error, code, says):
    message, exit_code = said(error)
    assert exit_code == code and says in message
    if code == EXIT_USAGE and "MySQL" in message:
        assert "DELAYQ_MYSQL_URL" in message and "unavailable" not in message


def test_an_error_the_command_does_not_know_is_not_swallowed():
    assert said(ValueError("a bug")) is None
