"""Configuration, read once at start-up and passed down as frozen value objects.

Sources, later ones winning: the defaults below, an optional TOML file (``DELAYQ_CONFIG`` or
``--config``; keys are the setting names without the ``DELAYQ_`` prefix, lower case), then
``DELAYQ_*`` environment variables. Every setting is declared once, in delayq.options; the loader and
``delayq node --help`` are made from that table, and docs/configuration.md is checked against it.
"""
from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass
from typing import Any, Mapping

from delayq import zkauth
from delayq.addresses import parse_addresses
from delayq.errors import ConfigError
from delayq.options import SETTINGS, Setting


@dataclass(frozen=True)
class NodeSettings:
    cluster: str
    node_id: str
    host: str
    port: int
    advertise_host: str
    switch_interval_us: int


@dataclass(frozen=True)
class MySQLSettings:
    url: str
    hosts: str
    timeout_ms: int
    pool_size: int


@dataclass(frozen=True)
class AmqpSettings:
    url: str
    hosts: str
    ca_file: str
    timeout_ms: int
    exchange: str
    max_in_flight: int
    confirm_timeout_ms: int
    exchange_recheck_ms: int


@dataclass(frozen=True)
class ZkSettings:
    hosts: str
    auth: str
    session_timeout_ms: int
    enabled: bool


@dataclass(frozen=True)
class SchedulingSettings:
    shards: int
    window_ms: int
    scan_interval_ms: int
    full_scan_ms: int
    memory_cap: int
    dispatch_batch: int
    write_concurrency: int
    claim_lead_ms: int
    claim_lease_ms: int
    clock_check_ms: int
    outage_grace_ms: int
    hint_poll_ms: int
    max_clock_offset_ms: int
    record_gather_ms: int
    publish_retry_ms: int
    catchup_rate: int
    catchup_grace_ms: int


@dataclass(frozen=True)
class LimitSettings:
    max_payload_bytes: int
    max_horizon_ms: int
    max_batch: int
    max_frame_bytes: int
    thrift_workers: int
    thrift_threads: int
    idle_timeout_ms: int
    frame_timeout_ms: int
    first_frame_timeout_ms: int


@dataclass(frozen=True)
class SecuritySettings:
    insecure: bool
    tls_cert_file: str
    tls_key_file: str
    tls_ca_file: str
    tls_client_cert: str
    clients_poll_ms: int


@dataclass(frozen=True)
class HttpSettings:
    host: str
    port: int
    console: bool
    console_plaintext: bool


@dataclass(frozen=True)
class RetentionSettings:
    days: int
    interval_ms: int
    ahead_days: int
    batch: int


@dataclass(frozen=True)
class BulkSettings:
    rate: int
    batch: int
    lease_ms: int


@dataclass(frozen=True)
class LogSettings:
    level: str
    format: str


@dataclass(frozen=True)
class Settings:
    node: NodeSettings
    mysql: MySQLSettings
    amqp: AmqpSettings
    zk: ZkSettings
    scheduling: SchedulingSettings
    limits: LimitSettings
    security: SecuritySettings
    http: HttpSettings
    log: LogSettings
    retention: RetentionSettings
    bulk: BulkSettings


_GROUPS = {f.name: f.type for f in dataclasses.fields(Settings)}
_CLASSES = {
    "node": NodeSettings, "mysql": MySQLSettings, "amqp": AmqpSettings, "zk": ZkSettings,
    "scheduling": SchedulingSettings, "limits": LimitSettings, "security": SecuritySettings, "http": HttpSettings, "log": LogSettings,
    "retention": RetentionSettings, "bulk": BulkSettings,
}

def load(environ: Mapping[str, str] | None = None, file: str | None = None,
         overrides: Mapping[str, Any] | None = None) -> Settings:
    """Build Settings from defaults, the TOML file, the environment and explicit overrides."""
    environ = os.environ if environ is None else environ
    file = file or environ.get("DELAYQ_CONFIG")
    from_file = _read_file(file) if file else {}
    raw: dict[str, Any] = {}
    derived = []
    for s in SETTINGS:
        key = s.env.removeprefix("DELAYQ_").lower()
        in_file = from_file.pop(key, None)
        if overrides and s.env in overrides:
            raw[s.env] = overrides[s.env]
        elif s.env in environ:
            raw[s.env] = _convert(s, environ[s.env])
        elif s.secret and f"{s.env}_FILE" in environ:
            raw[s.env] = _convert(s, read_secret(f"{s.env}_FILE", environ[f"{s.env}_FILE"]))
        elif in_file is not None:
            raw[s.env] = _convert(s, in_file)
        elif callable(s.default):
            derived.append(s)
        else:
            raw[s.env] = s.default
    for s in derived:
        raw[s.env] = s.default(raw)
    if from_file:
        raise ConfigError(f"unknown setting(s) in {file}: {', '.join(sorted(from_file))}")
    groups: dict[str, dict[str, Any]] = {name: {} for name in _CLASSES}
    for s in SETTINGS:
        groups[s.group][s.field] = raw[s.env]
    settings = Settings(**{name: _CLASSES[name](**values) for name, values in groups.items()})
    _check(settings)
    return settings


def _convert(setting: Setting, value: Any) -> Any:
    if not isinstance(value, str):
        value = str(value).lower() if isinstance(value, bool) else str(value)
    try:
        return setting.kind(value)
    except ValueError as e:
        if setting.secret:
            raise ConfigError(f"{setting.env}: not a valid value") from None
        raise ConfigError(f"{setting.env}={value!r}: {e}") from None


def read_secret(name: str, path: str) -> str:
    """The secret held in the file `path` names (one trailing newline dropped); the error names the
    setting and the file, never what it holds."""
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().removesuffix("\n")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{name}: cannot read {path}: {getattr(e, 'strerror', None) or 'not UTF-8 text'}") from None


def _read_file(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            return dict(tomllib.load(fh))
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config file {path}: {e}") from None


def _check(s: Settings) -> None:
    positive = {
        "DELAYQ_PORT": s.node.port, "DELAYQ_WINDOW_MS": s.scheduling.window_ms,
        "DELAYQ_SCAN_INTERVAL_MS": s.scheduling.scan_interval_ms, "DELAYQ_FULL_SCAN_MS": s.scheduling.full_scan_ms,
        "DELAYQ_MEMORY_CAP": s.scheduling.memory_cap, "DELAYQ_DISPATCH_BATCH": s.scheduling.dispatch_batch,
        "DELAYQ_SHARDS": s.scheduling.shards, "DELAYQ_MAX_BATCH": s.limits.max_batch,
        "DELAYQ_THRIFT_WORKERS": s.limits.thrift_workers, "DELAYQ_THRIFT_THREADS": s.limits.thrift_threads,
        "DELAYQ_MAX_IN_FLIGHT": s.amqp.max_in_flight, "DELAYQ_HINT_POLL_MS": s.scheduling.hint_poll_ms, "DELAYQ_EXCHANGE_RECHECK_MS": s.amqp.exchange_recheck_ms,
        "DELAYQ_MYSQL_TIMEOUT_MS": s.mysql.timeout_ms, "DELAYQ_AMQP_TIMEOUT_MS": s.amqp.timeout_ms,
        "DELAYQ_IDLE_TIMEOUT_MS": s.limits.idle_timeout_ms,
        "DELAYQ_FRAME_TIMEOUT_MS": s.limits.frame_timeout_ms,
        "DELAYQ_FIRST_FRAME_TIMEOUT_MS": s.limits.first_frame_timeout_ms,
        "DELAYQ_MAX_FRAME_BYTES": s.limits.max_frame_bytes,
        "DELAYQ_ZK_SESSION_TIMEOUT_MS": s.zk.session_timeout_ms,
    }
    for env, value in positive.items():
        if value <= 0:
            raise ConfigError(f"{env} must be positive, got {value}")
    if not 0 <= s.scheduling.claim_lead_ms <= 1000:
        raise ConfigError("DELAYQ_CLAIM_LEAD_MS must be between 0 and 1000")
    if s.scheduling.clock_check_ms < 100 or s.scheduling.max_clock_offset_ms < 1:
        raise ConfigError("DELAYQ_CLOCK_CHECK_MS must be at least 100 and DELAYQ_MAX_CLOCK_OFFSET_MS at least 1")
    if not s.scheduling.claim_lead_ms + 100 <= s.scheduling.claim_lease_ms < s.zk.session_timeout_ms:
        raise ConfigError("DELAYQ_CLAIM_LEASE_MS must be at least DELAYQ_CLAIM_LEAD_MS + 100 and below "
                          "DELAYQ_ZK_SESSION_TIMEOUT_MS")
    if not 0 <= s.scheduling.record_gather_ms <= 1000:
        raise ConfigError("DELAYQ_RECORD_GATHER_MS must be between 0 and 1000")
    if s.scheduling.scan_interval_ms >= s.scheduling.window_ms:
        raise ConfigError("DELAYQ_SCAN_INTERVAL_MS must be smaller than DELAYQ_WINDOW_MS")
    if not 50 <= s.node.switch_interval_us <= 5000:
        raise ConfigError("DELAYQ_SWITCH_INTERVAL_US must be between 50 and 5000")
    if not 1 <= s.scheduling.write_concurrency <= 8:
        raise ConfigError("DELAYQ_WRITE_CONCURRENCY must be between 1 and 8")
    r = s.retention
    if r.days < 0 or r.interval_ms < 1000 or not 1 <= r.ahead_days <= 30 or not 1 <= r.batch <= 100_000:
        raise ConfigError("DELAYQ_RETENTION_DAYS must be 0 or more, DELAYQ_RETENTION_INTERVAL_MS 1000 or more, "
                          "DELAYQ_RETENTION_AHEAD_DAYS between 1 and 30 and DELAYQ_RETENTION_BATCH between 1 and 100000")
    b = s.bulk
    if not 1 <= b.rate <= 100_000 or not 1 <= b.batch <= 10_000 or not 2000 <= b.lease_ms <= 600_000:
        raise ConfigError("DELAYQ_BULK_RATE must be between 1 and 100000, DELAYQ_BULK_BATCH between 1 and 10000 "
                          "and DELAYQ_BULK_LEASE_MS between 2000 and 600000")
    if not 1 <= s.scheduling.shards <= 4096:
        raise ConfigError("DELAYQ_SHARDS must be between 1 and 4096")
    if s.log.format not in ("plain", "json"):
        raise ConfigError(f"DELAYQ_LOG_FORMAT must be plain or json, got {s.log.format!r}")
    if s.log.level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ConfigError(f"DELAYQ_LOG_LEVEL must be DEBUG, INFO, WARNING or ERROR, got {s.log.level!r}")
    _check_security(s.security)
    _check_zk_auth(s.zk)
    for env, hosts, port in (("DELAYQ_MYSQL_HOSTS", s.mysql.hosts, 3306), ("DELAYQ_AMQP_HOSTS", s.amqp.hosts, 5672)):
        try:
            parse_addresses(hosts, port)
        except ValueError as e:
            raise ConfigError(f"{env}: {e}") from None
    if s.limits.max_frame_bytes < s.limits.max_payload_bytes + 4096:
        raise ConfigError("DELAYQ_MAX_FRAME_BYTES must exceed DELAYQ_MAX_PAYLOAD_BYTES by 4 KiB at least")


def _check_zk_auth(zk: ZkSettings) -> None:
    if zk.auth:
        try:
            zkauth.check(zk.auth)
        except ValueError as e:
            raise ConfigError(str(e)) from None


def _check_security(sec: SecuritySettings) -> None:
    if sec.tls_client_cert not in ("none", "optional", "required"):
        raise ConfigError(f"DELAYQ_TLS_CLIENT_CERT must be none, optional or required, got {sec.tls_client_cert!r}")
    if sec.tls_client_cert != "none" and not sec.tls_ca_file:
        raise ConfigError("DELAYQ_TLS_CLIENT_CERT needs DELAYQ_TLS_CA_FILE, the CA that signs client certificates")
    if not 50 <= sec.clients_poll_ms <= 1000:
        raise ConfigError("DELAYQ_CLIENTS_POLL_MS must be between 50 and 1000 (changes must hold within a second)")


def check_node(s: Settings) -> None:
    """What only a node needs: its certificate unless it runs insecure."""
    sec = s.security
    if not sec.insecure and not (sec.tls_cert_file and sec.tls_key_file):
        raise ConfigError("security is on: set DELAYQ_TLS_CERT_FILE and DELAYQ_TLS_KEY_FILE (`delayq certs dev` "
                          "makes a development set), or DELAYQ_INSECURE=true for development only")
    if not sec.insecure and s.zk.enabled and not s.zk.auth:
        raise ConfigError("security is on: set DELAYQ_ZK_AUTH (or DELAYQ_ZK_AUTH_FILE), delayq's ZooKeeper "
                          "identity as user:password, or DELAYQ_INSECURE=true for development only")
