"""SQLAlchemy Core views of the tables in sql/ (the SQL files are the truth; a test checks they agree)."""
from __future__ import annotations

from sqlalchemy import BigInteger, Column, Computed, Float, Integer, LargeBinary, MetaData, SmallInteger, String, Table

metadata = MetaData()

callback_service = Table(
    "job_callback_service", metadata,
    Column("topic", String(128), primary_key=True),
    Column("exchange", String(255), nullable=False),
    Column("routing_key", String(255), nullable=False),
    Column("max_retries", Integer, nullable=False),
    Column("backoff", String(16), nullable=False),
    Column("retry_backoff_ms", Integer, nullable=False),
    Column("retry_backoff_max_ms", Integer, nullable=False),
    Column("ttr_ms", Integer, nullable=False),
    Column("enabled", SmallInteger, nullable=False),
    Column("dead_letter_exchange", String(255)),
    Column("misfire_threshold_ms", BigInteger),
    Column("misfire_policy", String(16), nullable=False),
    Column("created_ms", BigInteger, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
    Column("max_fire_rate", Float),
    Column("fire_burst", Integer),
    Column("max_in_flight", Integer),
    Column("paused", SmallInteger, nullable=False, server_default="0"),
    Column("weight", Integer, nullable=False, server_default="1"),
    Column("tenant", String(64)),
)

task = Table(
    "job_delay_task", metadata,
    Column("task_id", String(64), primary_key=True),
    Column("topic", String(128), nullable=False),
    Column("shard_id", Integer, nullable=False),
    Column("due_ms", BigInteger, nullable=False),
    Column("status", SmallInteger, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("payload", LargeBinary, nullable=False),
    Column("spec_hash", LargeBinary(16), nullable=False),
    Column("max_retries", Integer, nullable=False),
    Column("ttr_ms", Integer, nullable=False),
    Column("deadline_ms", BigInteger),
    Column("node_id", String(128)),
    Column("created_ms", BigInteger, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
    Column("task_key", LargeBinary(255)),
    Column("tags", LargeBinary(520)),
    Column("traceparent", String(55)),
    Column("held_key", LargeBinary(255)),
    Column("key_since_ms", BigInteger),
    Column("cancel_ms", BigInteger),            # a cancel asked while an attempt ran (sql/009)
    Column("key_mode", SmallInteger),           # the dedup mode of a task holding its key (sql/012)
    # KEEP_IF_ACTIVE's key while an attempt is in flight; unique per topic (sql/012)
    Column("flight_key", LargeBinary(255),
           Computed("IF(key_mode = 4 AND status IN (1, 2), task_key, NULL)", persisted=True)),
)

execlog = Table(
    "job_delay_task_execlog", metadata,
    Column("task_id", String(64), primary_key=True),
    Column("attempt", Integer, primary_key=True),
    # The task's due time when the attempt was claimed: the day partition the row lives in.
    Column("due_ms", BigInteger, primary_key=True, autoincrement=False),
    Column("node_id", String(128), nullable=False),
    Column("dispatched_ms", BigInteger),        # NULL: never recorded as dispatched (UNRECORDED, MISFIRED)
    Column("result", String(16)),
    Column("result_ms", BigInteger),
    Column("message", String(1024)),
    Column("task_key", LargeBinary(255)),
    Column("tags", LargeBinary(520)),
    Column("progress", LargeBinary(1024)),      # the last progress a touch stored (sql/009)
)

backlog = Table(
    "job_delay_task_backlog", metadata,
    Column("task_id", String(64), primary_key=True),
    Column("topic", String(128), nullable=False),
    Column("shard_id", Integer, nullable=False),
    Column("due_ms", BigInteger, nullable=False),
    Column("status", SmallInteger, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("payload", LargeBinary, nullable=False),
    Column("spec_hash", LargeBinary(16), nullable=False),
    Column("max_retries", Integer, nullable=False),
    Column("ttr_ms", Integer, nullable=False),
    Column("created_ms", BigInteger, nullable=False),
    Column("finished_ms", BigInteger, primary_key=True, autoincrement=False),     # the day partition
    Column("message", String(1024)),
    Column("dead_letter", SmallInteger, nullable=False, server_default="0"),
    Column("task_key", LargeBinary(255)),
    Column("tags", LargeBinary(520)),
    Column("traceparent", String(55)),
    Column("key_mode", SmallInteger),           # the dedup mode it held its key under when it ended (sql/014)
)

shard = Table(
    "job_shard", metadata,
    Column("shard_id", Integer, primary_key=True),
    Column("owner", String(128)),
    Column("epoch", BigInteger, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
)

meta = Table(
    "delayq_meta", metadata,
    Column("name", String(64), primary_key=True),
    Column("value", String(255), nullable=False),
)

hint = Table(
    "job_delay_hint", metadata,
    Column("shard_id", Integer, primary_key=True),
    Column("task_id", String(64), primary_key=True),
    Column("due_ms", BigInteger, nullable=False),
    Column("topic", String(128), nullable=False, server_default=""),
)

node_connection = Table(
    "job_node_connection", metadata,
    Column("server", String(255), primary_key=True),
    Column("connection_id", BigInteger, primary_key=True),
    Column("node_id", String(128), nullable=False),
    Column("client", String(255), nullable=False),
    Column("created_ms", BigInteger, nullable=False),
)

client = Table(
    "job_client", metadata,
    Column("name", String(64), primary_key=True),
    Column("token_sha256", String(64)),
    Column("revoked", SmallInteger, nullable=False, server_default="0"),
    Column("created_ms", BigInteger, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
    Column("tenant", String(64)),
)

tenant = Table(
    "job_tenant", metadata,
    Column("name", String(64), primary_key=True),
    Column("max_pending", BigInteger),
    Column("max_submit_rate", Float),
    Column("max_horizon_ms", BigInteger),
    Column("max_payload_bytes", Integer),
    Column("created_ms", BigInteger, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
)

client_grant = Table(
    "job_client_grant", metadata,
    Column("name", String(64), primary_key=True),
    Column("permission", String(16), primary_key=True),
    Column("pattern", String(128), primary_key=True),
)

client_retired_token = Table(
    "job_client_retired_token", metadata,
    Column("name", String(64), primary_key=True),
    Column("token_sha256", String(64), primary_key=True),
    Column("why", String(8), nullable=False),
    Column("retired_ms", BigInteger, nullable=False),
)

audit = Table(
    "job_audit", metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("at_ms", BigInteger, nullable=False),
    Column("actor", String(128), nullable=False),
    Column("address", String(128), nullable=False),
    Column("action", String(32), nullable=False),
    Column("target", String(255), nullable=False),
    Column("outcome", String(64), nullable=False),
)

topic_retention = Table(
    "job_topic_retention", metadata,
    Column("topic", String(128), primary_key=True),
    Column("days", Integer, nullable=False),
    Column("updated_ms", BigInteger, nullable=False),
)

bulk_job = Table(
    "job_bulk", metadata,
    Column("job_id", String(32), primary_key=True),
    Column("action", String(16), nullable=False),
    Column("topic", String(128), nullable=False),
    Column("key_prefix", LargeBinary(255)),
    Column("tag", LargeBinary(64)),
    Column("due_from_ms", BigInteger),
    Column("due_before_ms", BigInteger),
    Column("shift_ms", BigInteger),
    Column("due_at_ms", BigInteger),
    Column("reason", String(255), nullable=False),
    Column("actor", String(128), nullable=False),
    Column("rate", Integer, nullable=False),
    Column("total", BigInteger, nullable=False),
    Column("upto_id", String(64), nullable=False),
    Column("created_ms", BigInteger, nullable=False),
    Column("cursor_id", String(64), nullable=False, server_default=""),
    Column("changed", BigInteger, nullable=False, server_default="0"),
    Column("skipped", BigInteger, nullable=False, server_default="0"),
    Column("state", String(16), nullable=False),
    Column("lease_owner", String(128)),
    Column("lease_until_ms", BigInteger, nullable=False, server_default="0"),
    Column("updated_ms", BigInteger, nullable=False),
    Column("finished_ms", BigInteger),
    Column("error", String(255)),
    Column("lane_cursors", String(8192)),
)
