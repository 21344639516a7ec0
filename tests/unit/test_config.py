"""Unit tests for delayq.config: defaults, environment, TOML file, checks and the reference text."""
from __future__ import annotations

import re
import socket

import pytest

from delayq import config
from delayq.config import Settings, load
from delayq.errors import ConfigError
from delayq.options import ENV_NAMES, SETTINGS, reference


def toml(tmp_path, text: str) -> str:
    path = tmp_path / "delayq.toml"
    path.write_text(text)
    return str(path)


def config_error(**kwargs) -> str:
    with pytest.raises(ConfigError) as info:
        load(**kwargs)
    return str(info.value)


# ---------------------------------------------------------------- defaults


def test_defaults_with_empty_environ():
    s = load({})
    assert isinstance(s, Settings)
    assert s.node.cluster == "default"
    assert s.node.host == "127.0.0.1"
    assert s.node.port == 9090
    assert s.node.node_id == f"{socket.gethostname()}-9090"
    assert s.node.advertise_host == "127.0.0.1"
    assert s.mysql.url == "mysql+pymysql://root@127.0.0.1:3306/delayq"
    assert (s.mysql.timeout_ms, s.mysql.pool_size) == (5000, 16)
    assert s.amqp.exchange == "delayq"
    assert (s.amqp.max_in_flight, s.amqp.confirm_timeout_ms) == (10000, 30000)
    assert s.zk.hosts == "127.0.0.1:2181"
    assert s.zk.enabled is True
    assert (s.scheduling.shards, s.scheduling.window_ms, s.scheduling.scan_interval_ms) == (64, 60000, 5000)
    assert s.limits.max_payload_bytes == 65536
    assert s.limits.max_horizon_ms == 30 * 24 * 3600 * 1000
    assert s.limits.max_frame_bytes == 8 * 1024 * 1024
    assert (s.log.level, s.log.format) == ("INFO", "plain")


def test_every_setting_lands_in_its_group_field():
    s = load({})
    for setting in SETTINGS:
        group = getattr(s, setting.group)
        assert hasattr(group, setting.field), setting.env
        if not callable(setting.default):
            assert getattr(group, setting.field) == setting.default, setting.env


def test_settings_are_frozen():
    s = load({})
    with pytest.raises(AttributeError):
        s.node.port = 1  # type: ignore[misc]


def test_env_names_are_unique_and_prefixed():
    assert len(ENV_NAMES) == len(SETTINGS)
    assert all(name.startswith("DELAYQ_") for name in ENV_NAMES)


# ---------------------------------------------------------------- environment


def test_env_overrides_with_type_conversion():
    s = load({"DELAYQ_PORT": "9191", "DELAYQ_CLUSTER": "prod", "DELAYQ_ZK_ENABLED": "off",
              "DELAYQ_WINDOW_MS": "120000", "DELAYQ_LOG_FORMAT": "json", "DELAYQ_LOG_LEVEL": "debug"})
    assert s.node.port == 9191 and isinstance(s.node.port, int)
    assert s.node.cluster == "prod"
    assert s.zk.enabled is False
    assert s.scheduling.window_ms == 120000
    assert s.log.format == "json"
    assert s.log.level == "debug"                # level is checked case-insensitively, kept as given


def test_derived_defaults_follow_overrides():
    s = load({"DELAYQ_PORT": "9191"})
    assert s.node.node_id == f"{socket.gethostname()}-9191"
    s = load({"DELAYQ_HOST": "10.1.2.3"})
    assert s.node.advertise_host == "10.1.2.3"
    s = load({"DELAYQ_HOST": "0.0.0.0"})
    assert s.node.advertise_host == socket.gethostname()
    s = load({"DELAYQ_NODE_ID": "n1", "DELAYQ_ADVERTISE_HOST": "dq.example"})
    assert (s.node.node_id, s.node.advertise_host) == ("n1", "dq.example")


@pytest.mark.parametrize("text, value", [("1", True), ("true", True), ("YES", True), (" on ", True),
                                         ("0", False), ("False", False), ("no", False), ("off", False)])
def test_bool_conversion(text, value):
    assert load({"DELAYQ_ZK_ENABLED": text}).zk.enabled is value


@pytest.mark.parametrize("env, value", [("DELAYQ_PORT", "abc"), ("DELAYQ_MEMORY_CAP", "1.5"),
                                        ("DELAYQ_WINDOW_MS", ""), ("DELAYQ_ZK_ENABLED", "maybe")])
def test_bad_value_names_the_variable(env, value):
    message = config_error(environ={env: value})
    assert env in message
    assert repr(value) in message


def test_unrelated_environment_is_ignored():
    assert load({"PATH": "/bin", "DELAYQ_UNKNOWN": "x"}).node.port == 9090


def test_explicit_overrides_beat_environment():
    s = load({"DELAYQ_PORT": "9191"}, overrides={"DELAYQ_PORT": 9292})
    assert s.node.port == 9292


# ---------------------------------------------------------------- TOML file


def test_file_keys_are_lower_case_without_prefix(tmp_path):
    path = toml(tmp_path, 'cluster = "c1"\nport = 9300\nzk_enabled = false\nlog_level = "WARNING"\n'
                          'mysql_url = "mysql+pymysql://u@db/x"\nmemory_cap = 1234\n')
    s = load({}, file=path)
    assert s.node.cluster == "c1"
    assert s.node.port == 9300
    assert s.node.node_id == f"{socket.gethostname()}-9300"
    assert s.zk.enabled is False
    assert s.log.level == "WARNING"
    assert s.mysql.url == "mysql+pymysql://u@db/x"
    assert s.scheduling.memory_cap == 1234


def test_file_named_by_delayq_config(tmp_path):
    path = toml(tmp_path, "port = 9400\n")
    assert load({"DELAYQ_CONFIG": path}).node.port == 9400


def test_file_argument_beats_delayq_config(tmp_path):
    a = toml(tmp_path, "port = 9400\n")
    b = tmp_path / "other.toml"
    b.write_text("port = 9500\n")
    assert load({"DELAYQ_CONFIG": a}, file=str(b)).node.port == 9500


def test_file_string_values_are_converted(tmp_path):
    path = toml(tmp_path, 'port = "9600"\nzk_enabled = "no"\n')
    s = load({}, file=path)
    assert s.node.port == 9600
    assert s.zk.enabled is False


def test_file_bad_value_names_the_setting(tmp_path):
    path = toml(tmp_path, 'port = "not-a-port"\n')
    assert "DELAYQ_PORT" in config_error(environ={}, file=path)


@pytest.mark.parametrize("text, key", [("prot = 1\n", "prot"), ("PORT = 9090\n", "PORT"),
                                       ("delayq_port = 9090\n", "delayq_port"), ("config = 'x'\n", "config")])
def test_unknown_key_in_file_is_an_error(tmp_path, text, key):
    path = toml(tmp_path, text)
    message = config_error(environ={}, file=path)
    assert key in message
    assert path in message


def test_missing_file_is_an_error(tmp_path):
    message = config_error(environ={}, file=str(tmp_path / "nope.toml"))
    assert "nope.toml" in message


def test_malformed_file_is_an_error(tmp_path):
    path = toml(tmp_path, "port = = 1\n")
    assert path in config_error(environ={}, file=path)


def test_env_beats_file(tmp_path):
    path = toml(tmp_path, "port = 9300\ncluster = \"from-file\"\n")
    s = load({"DELAYQ_PORT": "9200"}, file=path)
    assert s.node.port == 9200
    assert s.node.cluster == "from-file"


def test_overrides_beat_file(tmp_path):
    path = toml(tmp_path, "port = 9300\n")
    assert load({}, file=path, overrides={"DELAYQ_PORT": 9292}).node.port == 9292


def test_env_and_file_together_on_different_keys(tmp_path):
    path = toml(tmp_path, "port = 9300\n")
    s = load({"DELAYQ_CLUSTER": "from-env"}, file=path)
    assert (s.node.port, s.node.cluster) == (9300, "from-env")


# ---------------------------------------------------------------- _check rules


def test_scan_interval_must_be_below_window():
    assert "DELAYQ_SCAN_INTERVAL_MS" in config_error(
        environ={"DELAYQ_SCAN_INTERVAL_MS": "60000", "DELAYQ_WINDOW_MS": "60000"})
    assert "DELAYQ_SCAN_INTERVAL_MS" in config_error(
        environ={"DELAYQ_SCAN_INTERVAL_MS": "70000", "DELAYQ_WINDOW_MS": "60000"})
    s = load({"DELAYQ_SCAN_INTERVAL_MS": "59999", "DELAYQ_WINDOW_MS": "60000"})
    assert s.scheduling.scan_interval_ms == 59999


@pytest.mark.parametrize("fmt", ["xml", "", "JSON", "text"])
def test_log_format(fmt):
    assert "DELAYQ_LOG_FORMAT" in config_error(environ={"DELAYQ_LOG_FORMAT": fmt})


@pytest.mark.parametrize("level", ["TRACE", "", "critical"])
def test_log_level(level):
    assert "DELAYQ_LOG_LEVEL" in config_error(environ={"DELAYQ_LOG_LEVEL": level})


def test_frame_must_exceed_payload_by_4k():
    ok = load({"DELAYQ_MAX_PAYLOAD_BYTES": "1000", "DELAYQ_MAX_FRAME_BYTES": str(1000 + 4096)})
    assert ok.limits.max_frame_bytes == 5096
    message = config_error(environ={"DELAYQ_MAX_PAYLOAD_BYTES": "1000", "DELAYQ_MAX_FRAME_BYTES": str(1000 + 4095)})
    assert "DELAYQ_MAX_FRAME_BYTES" in message
    # The default frame is too small for a 16 MiB payload.
    assert "DELAYQ_MAX_FRAME_BYTES" in config_error(environ={"DELAYQ_MAX_PAYLOAD_BYTES": str(16 * 1024 * 1024)})


@pytest.mark.parametrize("env", ["DELAYQ_PORT", "DELAYQ_MEMORY_CAP", "DELAYQ_DISPATCH_BATCH", "DELAYQ_MAX_BATCH",
                                 "DELAYQ_THRIFT_WORKERS", "DELAYQ_MAX_IN_FLIGHT", "DELAYQ_MYSQL_TIMEOUT_MS",
                                 "DELAYQ_AMQP_TIMEOUT_MS", "DELAYQ_IDLE_TIMEOUT_MS",
                                 "DELAYQ_ZK_SESSION_TIMEOUT_MS", "DELAYQ_SHARDS"])
@pytest.mark.parametrize("value", ["0", "-1"])
def test_positive_settings(env, value):
    message = config_error(environ={env: value})
    assert env in message


def test_shards_range():
    assert load({"DELAYQ_SHARDS": "1"}).scheduling.shards == 1
    assert load({"DELAYQ_SHARDS": "4096"}).scheduling.shards == 4096
    assert "DELAYQ_SHARDS" in config_error(environ={"DELAYQ_SHARDS": "4097"})


def test_record_gather_range():
    assert load({"DELAYQ_RECORD_GATHER_MS": "0"}).scheduling.record_gather_ms == 0
    assert load({}).scheduling.record_gather_ms == 10
    for bad in ("-1", "1001"):
        assert "DELAYQ_RECORD_GATHER_MS" in config_error(environ={"DELAYQ_RECORD_GATHER_MS": bad})


def test_checks_apply_to_file_values_too(tmp_path):
    path = toml(tmp_path, 'log_format = "xml"\n')
    assert "DELAYQ_LOG_FORMAT" in config_error(environ={}, file=path)


# ---------------------------------------------------------------- reference


def test_reference_mentions_every_env_name():
    text = "\n".join(reference())
    for name in ENV_NAMES:
        assert name in text, name
    assert len(reference()) == len(SETTINGS)


def test_reference_paragraphs():
    paragraphs = dict(zip((s.env for s in SETTINGS), reference()))
    assert paragraphs["DELAYQ_PORT"].startswith("DELAYQ_PORT = 9090\n")
    assert paragraphs["DELAYQ_NODE_ID"].startswith("DELAYQ_NODE_ID = (derived)\n")
    assert paragraphs["DELAYQ_ADVERTISE_HOST"].startswith("DELAYQ_ADVERTISE_HOST = (derived)\n")
    for s in SETTINGS:
        assert s.help in paragraphs[s.env]


def test_groups_cover_settings_fields():
    # Every dataclass field of every group is fed by exactly one setting.
    import dataclasses
    fed = {(s.group, s.field) for s in SETTINGS}
    assert len(fed) == len(SETTINGS)
    declared = {(g.name, f.name) for g in dataclasses.fields(Settings)
                for f in dataclasses.fields(config._CLASSES[g.name])}
    assert fed == declared


def test_zookeeper_over_tls_is_verified_host_name_included_and_plaintext_by_default():
    from delayq import zkauth
    plain = zkauth.connection_args(load({"DELAYQ_ZK_HOSTS": "zk1:2281"}).zk)
    assert plain["hosts"] == "zk1:2281" and "use_ssl" not in plain
    s = load({"DELAYQ_ZK_HOSTS": "zk1:2281", "DELAYQ_ZK_TLS": "true", "DELAYQ_ZK_CA_FILE": "ca.pem",
              "DELAYQ_ZK_CERT_FILE": "node.pem", "DELAYQ_ZK_KEY_FILE": "node.key"})
    args = zkauth.connection_args(s.zk)
    assert {k: args[k] for k in ("use_ssl", "verify_certs", "check_hostname", "ca", "certfile", "keyfile")} == {
        "use_ssl": True, "verify_certs": True, "check_hostname": True, "ca": "ca.pem", "certfile": "node.pem",
        "keyfile": "node.key"}
    assert zkauth.connection_args(load({"DELAYQ_ZK_TLS": "on"}).zk)["ca"] is None     # the system's CAs


@pytest.mark.parametrize("env, says", [
    ({"DELAYQ_ZK_TLS": "true", "DELAYQ_ZK_CERT_FILE": "node.pem"}, "DELAYQ_ZK_CERT_FILE and DELAYQ_ZK_KEY_FILE go together"),
    ({"DELAYQ_ZK_CA_FILE": "ca.pem"}, "set DELAYQ_ZK_TLS=true"),
    ({"DELAYQ_ZK_TLS": "maybe"}, "DELAYQ_ZK_TLS='maybe'"),
])
def test_zookeeper_tls_settings_that_do_not_fit_are_refused(env, says):
    with pytest.raises(ConfigError, match=re.escape(says)):
        load(env)


@pytest.mark.parametrize("env, value", [("DELAYQ_TLS_HANDSHAKES_PER_S", "-1"), ("DELAYQ_TLS_HANDSHAKE_BURST", "0")])
def test_a_negative_handshake_rate_or_an_empty_burst_is_refused(env, value):
    assert env in config_error(environ={env: value})
