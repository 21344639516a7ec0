"""Versioned schema migrations from sql/NNN_name.sql, and cluster creation.

`migrate` applies, in version order, every file whose version delayq_schema_version does not
record (versions may have gaps: a migration numbered below one already applied, because it came
later, is applied too); each statement is idempotent (IF NOT EXISTS), so a run cut short can
simply be repeated. `init_cluster` sets the shard count once, creates the job_shard rows and the cluster's secret key
(delayq.store.clusterkey).
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy.exc
from sqlalchemy import Connection, Engine, func, select, text

from delayq import tables
from delayq.clock import SYSTEM_CLOCK, Clock
from delayq.db import mysql_code, unavailable_on_failure
from delayq.errors import ConfigError
from delayq.store import clusterkey

log = logging.getLogger(__name__)

# Installed, the migrations are package data (delayq/sql); in a source tree, the top-level sql/.
SQL_DIR = next(d for d in (Path(__file__).resolve().parent / "sql", Path(__file__).resolve().parent.parent / "sql")
               if d.is_dir())
_NAME = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")

# MySQL error codes meaning "it exists already": table, column, key.
_ALREADY_APPLIED = {1050, 1060, 1061}

_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS delayq_schema_version (
  version     INT NOT NULL,
  name        VARCHAR(128) NOT NULL,
  applied_ms  BIGINT NOT NULL,
  PRIMARY KEY (version)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
"""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]


def migrations(sql_dir: Path = SQL_DIR) -> list[Migration]:
    found = []
    for path in sorted(sql_dir.glob("*.sql")):
        m = _NAME.match(path.name)
        if not m:
            raise ValueError(f"migration file name must be NNN_name.sql: {path.name}")
        found.append(Migration(int(m.group(1)), m.group(2), tuple(split_statements(path.read_text()))))
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions) or (versions and versions[0] != 1):
        raise ValueError(f"migration versions must start at 1 and be unique, found {versions}")
    return found


def split_statements(sql: str) -> list[str]:
    """Statements end with ';' at the end of a line; '--' comment lines are dropped."""
    body = "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))
    return [s.strip() for s in re.split(r";\s*$", body, flags=re.M) if s.strip()]


def current_version(conn: Connection) -> int:
    conn.execute(text(_VERSION_TABLE))
    return conn.execute(text("SELECT COALESCE(MAX(version), 0) FROM delayq_schema_version")).scalar_one()


def applied_versions(conn: Connection) -> set[int]:
    conn.execute(text(_VERSION_TABLE))
    return recorded_versions(conn)


def migrate(engine: Engine, clock: Clock = SYSTEM_CLOCK) -> list[int]:
    """Apply pending migrations; returns the versions applied (empty when up to date)."""
    applied = []
    with engine.connect() as conn:
        done = applied_versions(conn)
        conn.commit()
        for mig in migrations():
            if mig.version in done:
                continue
            for stmt in mig.statements:
                try:
                    conn.execute(text(stmt))
                except sqlalchemy.exc.OperationalError as e:
                    # A run cut short after this statement: its change is there already.
                    if mysql_code(e) not in _ALREADY_APPLIED:
                        raise
                    log.info("migration %03d: already applied: %s", mig.version, e.orig)
            conn.execute(text("INSERT INTO delayq_schema_version (version, name, applied_ms) "
                              "VALUES (:v, :n, :t)"), {"v": mig.version, "n": mig.name, "t": clock.now_ms()})
            conn.commit()
            log.info("applied schema migration %03d_%s", mig.version, mig.name)
            applied.append(mig.version)
    return applied


def init_cluster(engine: Engine, shards: int, clock: Clock = SYSTEM_CLOCK) -> int:
    """Record the shard count on first run and create the shard rows; returns the cluster's count.

    An existing cluster keeps its count (resharding changes it, not init).
    """
    with engine.begin() as conn:
        existing = conn.execute(tables.meta.select().where(tables.meta.c.name == "shard_count")
                                .with_for_update()).first()
        if existing is None:
            conn.execute(tables.meta.insert().values(name="shard_count", value=str(shards)))
            count = shards
        else:
            count = int(existing.value)
        have = {r.shard_id for r in conn.execute(tables.shard.select())}
        missing = [{"shard_id": s, "owner": None, "epoch": 0, "updated_ms": clock.now_ms()}
                   for s in range(count) if s not in have]
        if missing:
            conn.execute(tables.shard.insert(), missing)
        clusterkey.create(conn)
    return count


def shard_count(conn: Connection) -> int:
    value = conn.execute(tables.meta.select().where(tables.meta.c.name == "shard_count")).first()
    if value is None:
        raise LookupError("the cluster has no shard count: run `delayq db init`")
    return int(value.value)


def create_database(server_engine: Engine, name: str) -> None:
    if not re.fullmatch(r"[A-Za-z0-9_]+", name):
        raise ValueError(f"database name must be letters, digits and _: {name!r}")
    with server_engine.begin() as conn:
        conn.execute(text(f"CREATE DATABASE IF NOT EXISTS `{name}` CHARACTER SET utf8mb4"))


def recorded_versions(conn: Connection) -> set[int]:
    """The schema versions recorded, read only (a node's account may not create tables): none when
    no migration ever ran."""
    try:
        return {v for (v,) in conn.execute(text("SELECT version FROM delayq_schema_version"))}
    except sqlalchemy.exc.ProgrammingError as e:
        if mysql_code(e) == 1146:     # no such table
            conn.rollback()
            return set()
        raise


def check_ready(engine: Engine) -> None:
    """Refuse to run a node on a database behind this code or with no shards (ConfigError);
    StoreUnavailable while MySQL does not answer."""
    with unavailable_on_failure(), engine.connect() as conn:
        have = recorded_versions(conn)
        missing = sorted({m.version for m in migrations()} - have)
        if missing:
            raise ConfigError(f"the database schema is at version {max(have, default=0)} without "
                              f"{', '.join(map(str, missing))}, which this node needs: run `delayq db migrate`")
        if not conn.execute(select(func.count()).select_from(tables.shard)).scalar_one():
            raise ConfigError("the database has no shards: run `delayq db init` first")
