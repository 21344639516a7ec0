"""The MySQL account nodes run as: it reads and writes delayq's tables, and nothing else.

`delayq db init --node-account NAME --node-url-file PATH`, run with an admin account, creates the
account (or, run again, resets its grants to these and keeps its password) and writes the URL
nodes use (DELAYQ_MYSQL_URL_FILE). No DDL, no DROP, no other schema, but for the day partitions of
the two history tables, which nodes add and drop themselves (retention: delayq.store.retention;
ALTER and DROP on those two tables, which hold no live task); the audit log can be appended
to, never changed; the schema version and the tenants are read only. It may change the clients,
because a node serves the admin calls that manage them (delayq.nodes.front.admin). Operators'
commands that change the schema or the tenants keep using an admin account.
"""
from __future__ import annotations

import re
import secrets

from sqlalchemy import Engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

ACCOUNT = re.compile(r"[a-z][a-z0-9_]{0,31}")
_RW = "SELECT, INSERT, UPDATE, DELETE"
_HISTORY = _RW + ", ALTER, DROP"      # ALTER TABLE ... REORGANIZE / DROP PARTITION
# Table -> what nodes (and the operators' everyday commands: drain, redrive, purge, reshard, clients) do to it.
NODE_GRANTS = {
    "job_delay_task": _RW, "job_delay_task_execlog": _HISTORY, "job_delay_task_backlog": _HISTORY,
    "job_topic_retention": _RW, "job_bulk": "SELECT, INSERT, UPDATE",
    "job_delay_hint": _RW, "job_shard": _RW, "job_node_connection": _RW, "job_callback_service": "SELECT, INSERT, UPDATE",
    "delayq_meta": "SELECT, INSERT, UPDATE", "delayq_schema_version": "SELECT",
    # Clients: not their tenant (`delayq tenants`, the admin account).
    "job_client": "SELECT, INSERT (name, token_sha256, revoked, created_ms, updated_ms), "
                  "UPDATE (token_sha256, revoked, updated_ms)",
    "job_client_grant": _RW, "job_client_retired_token": "SELECT, INSERT, DELETE", "job_audit": "SELECT, INSERT",
    "job_tenant": "SELECT",
}


def check_account(name: str) -> str:
    if not ACCOUNT.fullmatch(name or ""):
        raise ValueError(f"account name must be 1-32 of a-z, 0-9 and '_', starting with a letter: {name!r}")
    return name


def ensure_node_account(admin: Engine, database: str, name: str, password: str | None = None,
                        host: str = "%") -> str:
    """Create or update the node account; returns its password (the given one, or a new one)."""
    check_account(name)
    password = password or secrets.token_urlsafe(24)
    who = {"u": name, "h": host, "p": password}
    with admin.begin() as conn:
        conn.execute(text("CREATE USER IF NOT EXISTS :u@:h IDENTIFIED BY :p"), who)
        conn.execute(text("ALTER USER :u@:h IDENTIFIED BY :p"), who)
        conn.execute(text("REVOKE ALL PRIVILEGES, GRANT OPTION FROM :u@:h"), who)
        for table, privileges in NODE_GRANTS.items():
            conn.execute(text(f"GRANT {privileges} ON `{database}`.`{table}` TO :u@:h"), who)
    return password


def node_url(admin_url: str, name: str, password: str) -> str:
    """The admin's URL with the node account in place of the admin."""
    return make_url(admin_url).set(username=name, password=password).render_as_string(hide_password=False)


def password_in(url: str) -> str | None:
    """The password of a URL (ValueError when the text is not one)."""
    try:
        return make_url(url).password
    except ArgumentError:
        raise ValueError("not a database URL") from None
