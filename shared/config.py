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
from dataclasses import dataclass, field
from typing import Any, Mapping

from delayq.configrules import check, check_node  # noqa: F401 - check_node: the node's own rules, public here
from delayq.errors import ConfigError
from delayq.options import SETTINGS, Setting


@dataclass(frozen=True)
class NodeSettings:
    cluster: str
    node_id: str
    host: str
    port: int
    advertise_host: str
    seeds: str
    switch_interval_us: int
    freeze_in_claim_file: str


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
    auth: str = field(repr=False)
    tls: bool
    ca_file: str
    cert_file: str
    key_file: str
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
    max_unauthenticated_frame_bytes: int
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
    refusal_audit_ms: int
    tls_handshakes_per_s: int
    tls_handshake_burst: int


@dataclass(frozen=True)
class HttpSettings:
    host: str
    port: int
    console: bool
    console_plaintext: bool
    console_hosts: str
    console_insecure: bool


@dataclass(frozen=True)
class RetentionSettings:
    days: int
    audit_days: int
    interval_ms: int
    ahead_days: int
    batch: int


@dataclass(frozen=True)
class BulkSettings:
    rate: int
    batch: int
    lease_ms: int
    lanes: int


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
    check(settings)
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
