"""Every setting a node and the `delayq` command read, declared once: its DELAYQ_* name, where it
goes in delayq.config.Settings, its type, default and help. The loader (delayq.config.load)
and `delayq node --help` are made from SETTINGS; tests/unit/test_readme.py holds the reference in
docs/configuration.md to it.
"""
from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any, Callable, Mapping


@dataclass(frozen=True)
class Setting:
    env: str            # DELAYQ_<NAME>
    group: str          # field of Settings
    field: str          # field of the group's dataclass
    kind: Callable[[str], Any]
    default: Any        # a value, or a callable taking the partly built raw dict
    help: str
    secret: bool = False    # may hold a password: its value is never shown; <ENV>_FILE may name a file holding it


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"not a boolean: {text!r}")


def _default_node_id(raw: Mapping[str, Any]) -> str:
    return f"{socket.gethostname()}-{raw['DELAYQ_PORT']}"


SETTINGS: tuple[Setting, ...] = (
    Setting("DELAYQ_CLUSTER", "node", "cluster", str, "default",
            "Cluster name: nodes of one cluster share shards and ZooKeeper paths."),
    Setting("DELAYQ_NODE_ID", "node", "node_id", str, _default_node_id,
            "This node's id, unique in the cluster (default: <hostname>-<port>): 1 to 128 characters, "
            "without / or control characters (it names its ZooKeeper node; docs/operations.md)."),
    Setting("DELAYQ_HOST", "node", "host", str, "127.0.0.1",
            "Address the Thrift server binds to (0.0.0.0 to accept remote clients)."),
    Setting("DELAYQ_PORT", "node", "port", int, 9090, "Thrift server port."),
    Setting("DELAYQ_ADVERTISE_HOST", "node", "advertise_host", str,
            lambda raw: raw["DELAYQ_HOST"] if raw["DELAYQ_HOST"] != "0.0.0.0" else socket.gethostname(),
            "Host clients should use to reach this node (published in ZooKeeper)."),
    Setting("DELAYQ_SEEDS", "node", "seeds", str, "",
            "HOST:PORT of one or a few nodes, comma-separated, that the delayq command asks for the cluster's "
            "live nodes (the endpoints call, which any client may make) instead of reading ZooKeeper: "
            "a business client's settings need no ZooKeeper identity. --endpoint names nodes directly."),
    Setting("DELAYQ_SWITCH_INTERVAL_US", "node", "switch_interval_us", int, 200,
            "How long a Python thread may keep the interpreter while another waits for it "
            "(sys.setswitchinterval; Python's own default is 5000). The node's dispatching threads "
            "wait for it after every MySQL and RabbitMQ round trip, so it bounds their lateness."),
    Setting("DELAYQ_FREEZE_IN_CLAIM_FILE", "node", "freeze_in_claim_file", str, "",
            "For fault tests only (default: off): whenever this file exists, the node's next claim of a task "
            "removes it and stops the node (SIGSTOP) inside the claim's transaction, holding its locks, as a "
            "GC pause or a frozen VM would (docs/faults.md)."),
    Setting("DELAYQ_MYSQL_URL", "mysql", "url", str, "mysql+pymysql://root@127.0.0.1:3306/delayq",
            "SQLAlchemy URL of the MySQL/MariaDB database (default: root on 127.0.0.1:3306, database delayq). "
            "Connections use TLS only when its query asks for it (?ssl_ca=FILE, ?ssl_verify_cert=true).",
            secret=True),
    Setting("DELAYQ_MYSQL_HOSTS", "mysql", "hosts", str, "",
            "Members of a replicated MySQL (a Galera cluster) as host:port, comma-separated, with the database, "
            "account and options of DELAYQ_MYSQL_URL (whose own host is then not used): the node writes to "
            "one member at a time, the first that answers and is part of the primary component, and moves "
            "to the next when it fails (docs/topology.md)."),
    Setting("DELAYQ_MYSQL_TIMEOUT_MS", "mysql", "timeout_ms", int, 5000,
            "Connect, read and write timeout of every MySQL call."),
    Setting("DELAYQ_MYSQL_POOL_SIZE", "mysql", "pool_size", int, 16,
            "MySQL connections this node keeps open at most for its work, plus 2 for writing submits and 3 "
            "for polling (hints, changed clients, changed services)."),
    Setting("DELAYQ_AMQP_URL", "amqp", "url", str, "amqp://guest:guest@127.0.0.1:5672/%2F",
            "AMQP URL of RabbitMQ (default: guest on 127.0.0.1:5672, vhost /).", secret=True),
    Setting("DELAYQ_AMQP_HOSTS", "amqp", "hosts", str, "",
            "Nodes of a RabbitMQ cluster as host:port, comma-separated, with the user, vhost and TLS of "
            "DELAYQ_AMQP_URL (whose own host is then not used): a connection goes to the first that "
            "answers, and one that fails moves to the next; what was not confirmed on it is dispatched "
            "again as a further attempt (docs/topology.md)."),
    Setting("DELAYQ_AMQP_CA_FILE", "amqp", "ca_file", str, "",
            "PEM file of the CA of RabbitMQ's certificate, for an amqps:// DELAYQ_AMQP_URL (default: the system's CAs)."),
    Setting("DELAYQ_AMQP_TIMEOUT_MS", "amqp", "timeout_ms", int, 5000,
            "Connect and socket timeout of RabbitMQ connections."),
    Setting("DELAYQ_EXCHANGE", "amqp", "exchange", str, "delayq",
            "Default exchange (durable, topic) for services that name none."),
    Setting("DELAYQ_MAX_IN_FLIGHT", "amqp", "max_in_flight", int, 10000,
            "Published messages waiting for the broker's confirm, at most."),
    Setting("DELAYQ_CONFIRM_TIMEOUT_MS", "amqp", "confirm_timeout_ms", int, 30000,
            "A publish not confirmed within this time counts as failed and is dispatched again."),
    Setting("DELAYQ_EXCHANGE_RECHECK_MS", "amqp", "exchange_recheck_ms", int, 30000,
            "How often the node checks again that each service's exchange is usable (an unusable one: "
            "after 2 s, doubling up to this)."),
    Setting("DELAYQ_ZK_HOSTS", "zk", "hosts", str, "127.0.0.1:2181", "ZooKeeper connect string."),
    Setting("DELAYQ_ZK_AUTH", "zk", "auth", str, "",
            "user:password of delayq's ZooKeeper identity (digest): every session authenticates as it and "
            "every znode delayq creates is readable and writable by it alone. Required with ZooKeeper unless "
            "DELAYQ_INSECURE.", secret=True),
    Setting("DELAYQ_ZK_TLS", "zk", "tls", _bool, False,
            "Reach ZooKeeper over TLS (its secureClientPort, named in DELAYQ_ZK_HOSTS), its certificate "
            "verified against DELAYQ_ZK_CA_FILE, host name included."),
    Setting("DELAYQ_ZK_CA_FILE", "zk", "ca_file", str, "",
            "PEM file of the CA of ZooKeeper's certificate, with DELAYQ_ZK_TLS (default: the system's CAs)."),
    Setting("DELAYQ_ZK_CERT_FILE", "zk", "cert_file", str, "",
            "PEM certificate this node shows ZooKeeper over TLS, when ZooKeeper asks for one "
            "(ssl.clientAuth), with DELAYQ_ZK_KEY_FILE."),
    Setting("DELAYQ_ZK_KEY_FILE", "zk", "key_file", str, "", "PEM key of DELAYQ_ZK_CERT_FILE."),
    Setting("DELAYQ_ZK_SESSION_TIMEOUT_MS", "zk", "session_timeout_ms", int, 6000,
            "ZooKeeper session timeout: how long a silent node keeps its shards."),
    Setting("DELAYQ_ZK_ENABLED", "zk", "enabled", _bool, True,
            "Register the node in ZooKeeper (false: standalone node owning every shard)."),
    Setting("DELAYQ_SHARDS", "scheduling", "shards", int, 64,
            "Logical shards, used by `delayq db init` when it creates a cluster."),
    Setting("DELAYQ_WINDOW_MS", "scheduling", "window_ms", int, 60000,
            "Look-ahead window: tasks due within it are held in memory."),
    Setting("DELAYQ_SCAN_INTERVAL_MS", "scheduling", "scan_interval_ms", int, 5000,
            "How often the loader scans MySQL for the window (must be below the window)."),
    Setting("DELAYQ_FULL_SCAN_MS", "scheduling", "full_scan_ms", int, 15000,
            "Each scan reads only what lies past the loaded horizon, plus the loaded part again for a "
            "rolling share of the shards, so that every shard's is re-read within this time (tasks "
            "written to MySQL other than through a node, e.g. `delayq tasks redrive`, fire within it; "
            "at or below DELAYQ_SCAN_INTERVAL_MS, every scan re-reads every shard's). The re-read pauses "
            "while memory holds tasks more than a second overdue."),
    Setting("DELAYQ_MEMORY_CAP", "scheduling", "memory_cap", int, 200000,
            "Tasks held in memory at most; the window shrinks to fit."),
    Setting("DELAYQ_DISPATCH_BATCH", "scheduling", "dispatch_batch", int, 500,
            "Due tasks claimed in one MySQL statement at most."),
    Setting("DELAYQ_WRITE_CONCURRENCY", "scheduling", "write_concurrency", int, 2,
            "Claims of due tasks the node keeps in flight in MySQL at once. "
            "While one waits for its round trips and commit, the next is on its way. The extra claims "
            "take only tasks already due, so they join in when due tasks pile up (a burst); 1 makes "
            "each wait for the one before."),
    Setting("DELAYQ_CLAIM_LEAD_MS", "scheduling", "claim_lead_ms", int, 20,
            "Tasks are claimed in MySQL this long before they are due and published at the due instant "
            "(from the claim on, cancel answers ALREADY_DISPATCHED)."),
    Setting("DELAYQ_CLAIM_LEASE_MS", "scheduling", "claim_lease_ms", int, 1500,
            "A claimed attempt is published only within this long of its claim (on a clock that runs "
            "through pauses) and only if the ZooKeeper session did not break since; otherwise it goes "
            "back to DELAY unsent. Keep it well below the ZooKeeper session timeout."),
    Setting("DELAYQ_CLOCK_CHECK_MS", "scheduling", "clock_check_ms", int, 10000,
            "How often the node reads MySQL's clock, which due times follow (not this machine's)."),
    Setting("DELAYQ_MAX_CLOCK_OFFSET_MS", "scheduling", "max_clock_offset_ms", int, 500,
            "Beyond this offset between this machine's clock and MySQL's, the node warns and marks "
            "itself in /readyz and `delayq status` (due times follow MySQL's clock regardless)."),
    Setting("DELAYQ_OUTAGE_GRACE_MS", "scheduling", "outage_grace_ms", int, 15000,
            "No attempt is timed out while MySQL, RabbitMQ or ZooKeeper is unreachable, nor for this "
            "long after: results held up by the outage get that long to arrive first."),
    Setting("DELAYQ_HINT_POLL_MS", "scheduling", "hint_poll_ms", int, 50,
            "How often a node reads the hints other nodes left for its shards (tasks due soon they "
            "accepted while owning no shard to put them on)."),
    Setting("DELAYQ_RECORD_GATHER_MS", "scheduling", "record_gather_ms", int, 10,
            "Broker confirms are gathered this long before their execlog rows are written together "
            "(fewer MySQL transactions under steady load). A node killed meanwhile dispatches those "
            "tasks again as a further attempt; 0 writes each batch of confirms at once."),
    Setting("DELAYQ_PUBLISH_RETRY_MS", "scheduling", "publish_retry_ms", int, 1000,
            "Delay before a task whose publish failed (broker down) is dispatched again."),
    Setting("DELAYQ_CATCHUP_RATE", "scheduling", "catchup_rate", int, 2000,
            "Tasks found late (after downtime) are caught up at this many per second, so tasks due now stay on time (0: no limit)."),
    Setting("DELAYQ_CATCHUP_GRACE_MS", "scheduling", "catchup_grace_ms", int, 2000,
            "How late a task must be when loaded to count as catch-up."),
    Setting("DELAYQ_MAX_PAYLOAD_BYTES", "limits", "max_payload_bytes", int, 65536,
            "Largest payload accepted."),
    Setting("DELAYQ_MAX_HORIZON_MS", "limits", "max_horizon_ms", int, 30 * 24 * 3600 * 1000,
            "Latest due time accepted, from now: by a submit, a reschedule, a bulk reschedule (a shift leaves a task "
            "it would take past it)."),
    Setting("DELAYQ_MAX_BATCH", "limits", "max_batch", int, 1000, "Tasks in one submitBatch at most."),
    Setting("DELAYQ_MAX_FRAME_BYTES", "limits", "max_frame_bytes", int, 8 * 1024 * 1024,
            "Largest Thrift frame; a larger one closes the connection."),
    Setting("DELAYQ_MAX_UNAUTHENTICATED_FRAME_BYTES", "limits", "max_unauthenticated_frame_bytes", int, 64 * 1024,
            "Largest Thrift frame from a connection with no client identity yet (before its authenticate call "
            "answered, without a client certificate); a larger one closes the connection before it is read. "
            "Not applied with DELAYQ_INSECURE."),
    Setting("DELAYQ_THRIFT_WORKERS", "limits", "thrift_workers", int, 64,
            "Thrift connections open at once; a new one past this closes the unauthenticated one idle longest "
            "(refused when every one has a call in progress or a client identity)."),
    Setting("DELAYQ_THRIFT_THREADS", "limits", "thrift_threads", int, 8,
            "Threads serving Thrift calls other than submits (get, cancel, reschedule, reportResult, ...); "
            "a call waits while all are busy. Submits are served in groups by a thread of their own."),
    Setting("DELAYQ_IDLE_TIMEOUT_MS", "limits", "idle_timeout_ms", int, 60000,
            "A Thrift connection silent this long between calls, or not reading a reply, is closed."),
    Setting("DELAYQ_FRAME_TIMEOUT_MS", "limits", "frame_timeout_ms", int, 30000,
            "A Thrift request frame must arrive whole within this time of its first byte, or the "
            "connection is closed (a frame of DELAYQ_MAX_FRAME_BYTES, 8 MiB, needs 2.24 Mbit/s)."),
    Setting("DELAYQ_FIRST_FRAME_TIMEOUT_MS", "limits", "first_frame_timeout_ms", int, 5000,
            "A new Thrift connection that sends nothing this long is closed."),
    Setting("DELAYQ_INSECURE", "security", "insecure", _bool, False,
            "Development only: serve Thrift in plaintext and run every call without a client identity "
            "(the node logs a warning at start). Off, the node needs DELAYQ_TLS_CERT_FILE and DELAYQ_TLS_KEY_FILE."),
    Setting("DELAYQ_TLS_CERT_FILE", "security", "tls_cert_file", str, "",
            "PEM file of this node's certificate (and its chain) for the Thrift port."),
    Setting("DELAYQ_TLS_KEY_FILE", "security", "tls_key_file", str, "",
            "PEM file of that certificate's private key."),
    Setting("DELAYQ_TLS_CA_FILE", "security", "tls_ca_file", str, "",
            "PEM file of the CA(s) that sign client certificates (node) or node certificates (clients, the "
            "consumer helper and the delayq command)."),
    Setting("DELAYQ_TLS_CLIENT_CERT", "security", "tls_client_cert", str,
            lambda raw: "optional" if raw["DELAYQ_TLS_CA_FILE"] else "none",
            "none, optional or required: whether clients present certificates signed by DELAYQ_TLS_CA_FILE "
            "(a certificate whose common name is a client's name makes the connection that client's; "
            "default: optional when a CA is given)."),
    Setting("DELAYQ_CLIENTS_POLL_MS", "security", "clients_poll_ms", int, 250,
            "How often a node looks whether clients and their grants, services, flow controls or tenants "
            "changed (`delayq clients`, `delayq services`, `delayq tenants`)."),
    Setting("DELAYQ_REFUSAL_AUDIT_MS", "security", "refusal_audit_ms", int, 60_000,
            "Calls refused for want of a client identity are recorded in the audit log as an address's first, "
            "then as one row of their count per address this often (each is counted in delayq_refusals_total)."),
    Setting("DELAYQ_TLS_HANDSHAKES_PER_S", "security", "tls_handshakes_per_s", int, 20,
            "New TLS connections a peer address may open on the Thrift port, a second, on average; past its "
            "DELAYQ_TLS_HANDSHAKE_BURST, one more is closed before its handshake (0: no limit). Clients behind "
            "one proxy or NAT address share it."),
    Setting("DELAYQ_TLS_HANDSHAKE_BURST", "security", "tls_handshake_burst", int, 200,
            "New TLS connections a peer address may open on the Thrift port at once (a client pool reconnecting "
            "after a node restart), before DELAYQ_TLS_HANDSHAKES_PER_S holds it back."),
    Setting("DELAYQ_HTTP_HOST", "http", "host", str, lambda raw: raw["DELAYQ_HOST"],
            "Address of the metrics and health HTTP server (default: DELAYQ_HOST)."),
    Setting("DELAYQ_HTTP_PORT", "http", "port", int, lambda raw: raw["DELAYQ_PORT"] + 1000,
            "Port of /metrics, /healthz and /readyz (default: DELAYQ_PORT + 1000; 0 picks a free one)."),
    Setting("DELAYQ_CONSOLE", "http", "console", _bool, True,
            "Serve the web console under /ui on the HTTP port (over TLS when the node has a certificate)."),
    Setting("DELAYQ_CONSOLE_PLAINTEXT", "http", "console_plaintext", _bool, False,
            "Serve the console over plain HTTP too on a node with a certificate (only behind a proxy that "
            "terminates TLS on the same machine): tokens and session cookies then cross in the clear."),
    Setting("DELAYQ_CONSOLE_HOSTS", "http", "console_hosts", str, "",
            "Names (comma-separated) a request to the console may give in its Host header, e.g. a proxy's "
            "(default: the node's DELAYQ_HOST, DELAYQ_ADVERTISE_HOST, this machine's names and the loopback "
            "addresses); any other is refused with 421."),
    Setting("DELAYQ_CONSOLE_INSECURE", "http", "console_insecure", _bool, False,
            "Serve the console on a node run with DELAYQ_INSECURE (plain HTTP, any token logs in)."),
    Setting("DELAYQ_RETENTION_DAYS", "retention", "days", int, 7,
            "Days the history of a task (its archived row and its attempts) is kept after it ended, unless its "
            "topic has its own (`delayq retention set`); 0 keeps it for ever. Nodes drop whole day "
            "partitions past the longest retention and delete the rest row by row (docs/operations.md#retention)."),
    Setting("DELAYQ_AUDIT_RETENTION_DAYS", "retention", "audit_days", int, 365,
            "Days the audit log (job_audit) is kept; 0 keeps it for ever. The retention pass drops its whole "
            "days past this, at most a day later; nothing else removes its rows."),
    Setting("DELAYQ_RETENTION_INTERVAL_MS", "retention", "interval_ms", int, 3_600_000,
            "How often a node tries a retention pass (one node at a time runs it: a MySQL named lock)."),
    Setting("DELAYQ_RETENTION_AHEAD_DAYS", "retention", "ahead_days", int, 2,
            "Day partitions made ahead of today, so that a pass may be missed for that long."),
    Setting("DELAYQ_RETENTION_BATCH", "retention", "batch", int, 1000,
            "Archived tasks deleted in one transaction when their topic is kept for less than the longest "
            "retention (at most 100 batches a pass)."),
    Setting("DELAYQ_BULK_RATE", "bulk", "rate", int, 2000,
            "Tasks a second a bulk job changes unless it is given its own limit (`delayq tasks bulk --rate`, "
            "1 to 100000)."),
    Setting("DELAYQ_BULK_BATCH", "bulk", "batch", int, 500,
            "Tasks a bulk job changes in one transaction at most (fewer below this many a second)."),
    Setting("DELAYQ_BULK_LANES", "bulk", "lanes", int, 2,
            "Lanes of a new bulk job, 1 to 8: each changes a share of its tasks (by task id), the lanes' "
            "batches side by side. A job keeps the lanes it was created with."),
    Setting("DELAYQ_BULK_LEASE_MS", "bulk", "lease_ms", int, 10_000,
            "How long a bulk job stays its node's without a batch: another node takes over a job whose "
            "node died within about this long."),
    Setting("DELAYQ_LOG_LEVEL", "log", "level", str, "INFO", "DEBUG, INFO, WARNING or ERROR."),
    Setting("DELAYQ_LOG_FORMAT", "log", "format", str, "plain", "plain or json."),
)

ENV_NAMES = frozenset(s.env for s in SETTINGS)
SECRET_FILES = frozenset(f"{s.env}_FILE" for s in SETTINGS if s.secret)     # <ENV>_FILE: a file holding it


def reference() -> list[str]:
    """One paragraph per setting, for `--help`."""
    return [f"{s.env} = {'(secret)' if s.secret else '(derived)' if callable(s.default) else repr(s.default)}"
            f"\n    {s.help}" + (f" Or {s.env}_FILE: a file holding it." if s.secret else "")
            for s in SETTINGS]
