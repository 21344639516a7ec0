"""The rules a loaded configuration must keep, each refused with a ConfigError that names the
setting (and never a secret's value): delayq.config.load applies `check` to every configuration,
and a node applies `check_node` as well."""
from __future__ import annotations

from typing import TYPE_CHECKING

from delayq import zkauth
from delayq.addresses import parse_addresses
from delayq.errors import ConfigError
from delayq.zkpaths import node_id_problem

if TYPE_CHECKING:       # delayq.config imports this module
    from delayq.config import SecuritySettings, Settings, ZkSettings


def check(s: Settings) -> None:
    """Every rule a loaded configuration keeps; the error names the setting."""
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
        "DELAYQ_REFUSAL_AUDIT_MS": s.security.refusal_audit_ms,
        "DELAYQ_TLS_HANDSHAKE_BURST": s.security.tls_handshake_burst,
    }
    for env, value in positive.items():
        if value <= 0:
            raise ConfigError(f"{env} must be positive, got {value}")
    if s.security.tls_handshakes_per_s < 0:
        raise ConfigError(f"DELAYQ_TLS_HANDSHAKES_PER_S must be 0 (no limit) or more, got {s.security.tls_handshakes_per_s}")
    if s.limits.max_unauthenticated_frame_bytes < 1024:
        raise ConfigError("DELAYQ_MAX_UNAUTHENTICATED_FRAME_BYTES must be at least 1024 (an authenticate call "
                          "with its token must fit)")
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
    if not 0 <= r.audit_days <= 3650:      # a day partition each, of MySQL's 8192 a table at most
        raise ConfigError(f"DELAYQ_AUDIT_RETENTION_DAYS must be between 0 (for ever) and 3650, got {r.audit_days}")
    b = s.bulk
    if not 1 <= b.rate <= 100_000 or not 1 <= b.batch <= 10_000 or not 2000 <= b.lease_ms <= 600_000:
        raise ConfigError("DELAYQ_BULK_RATE must be between 1 and 100000, DELAYQ_BULK_BATCH between 1 and 10000 "
                          "and DELAYQ_BULK_LEASE_MS between 2000 and 600000")
    if not 1 <= b.lanes <= 8:        # each lane is a thread and a MySQL connection of the node
        raise ConfigError(f"DELAYQ_BULK_LANES must be between 1 and 8, got {b.lanes}")
    if not 1 <= s.scheduling.shards <= 4096:
        raise ConfigError("DELAYQ_SHARDS must be between 1 and 4096")
    if s.log.format not in ("plain", "json"):
        raise ConfigError(f"DELAYQ_LOG_FORMAT must be plain or json, got {s.log.format!r}")
    if s.log.level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ConfigError(f"DELAYQ_LOG_LEVEL must be DEBUG, INFO, WARNING or ERROR, got {s.log.level!r}")
    _check_security(s.security)
    _check_zk_auth(s.zk)
    for env, hosts, port in (("DELAYQ_MYSQL_HOSTS", s.mysql.hosts, 3306), ("DELAYQ_AMQP_HOSTS", s.amqp.hosts, 5672),
                             ("DELAYQ_SEEDS", s.node.seeds, 9090)):
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
    if bool(zk.cert_file) != bool(zk.key_file):
        raise ConfigError("DELAYQ_ZK_CERT_FILE and DELAYQ_ZK_KEY_FILE go together")
    if not zk.tls and (zk.ca_file or zk.cert_file):
        raise ConfigError("DELAYQ_ZK_CA_FILE and DELAYQ_ZK_CERT_FILE are used over TLS only: set DELAYQ_ZK_TLS=true")


def _check_security(sec: SecuritySettings) -> None:
    if sec.tls_client_cert not in ("none", "optional", "required"):
        raise ConfigError(f"DELAYQ_TLS_CLIENT_CERT must be none, optional or required, got {sec.tls_client_cert!r}")
    if sec.tls_client_cert != "none" and not sec.tls_ca_file:
        raise ConfigError("DELAYQ_TLS_CLIENT_CERT needs DELAYQ_TLS_CA_FILE, the CA that signs client certificates")
    if not 50 <= sec.clients_poll_ms <= 1000:
        raise ConfigError("DELAYQ_CLIENTS_POLL_MS must be between 50 and 1000 (changes must hold within a second)")


def check_node(s: Settings) -> None:
    """What only a node needs: an id it can join as, its certificate unless it runs insecure."""
    problem = node_id_problem(s.node.node_id)
    if problem is not None:
        raise ConfigError(f"DELAYQ_NODE_ID {problem}")
    sec = s.security
    if not sec.insecure and not (sec.tls_cert_file and sec.tls_key_file):
        raise ConfigError("security is on: set DELAYQ_TLS_CERT_FILE and DELAYQ_TLS_KEY_FILE (`delayq certs dev` "
                          "makes a development set), or DELAYQ_INSECURE=true for development only")
    if not sec.insecure and s.zk.enabled and not s.zk.auth:
        raise ConfigError("security is on: set DELAYQ_ZK_AUTH (or DELAYQ_ZK_AUTH_FILE), delayq's ZooKeeper "
                          "identity as user:password, or DELAYQ_INSECURE=true for development only")
