"""Change counters in delayq_meta that nodes poll instead of re-reading whole tables.

Every change to a watched set of rows (the clients; the services with their controls and the
tenants) bumps its counter in the same transaction; a node reads each counter every few hundred
milliseconds (delayq.nodes.cluster.watch) and re-reads the rows only when it moved, so a change holds on
every node within a second, without a restart.
"""
from __future__ import annotations

import contextlib
import functools
from typing import Iterator

from sqlalchemy import Connection, Engine, text

from delayq import tables
from delayq.db import unavailable_on_failure

META = tables.meta
CLIENTS = "clients_version"
SERVICES = "services_version"       # services, their flow controls, tenants
COUNTERS = (CLIENTS, SERVICES)


def check(name: str) -> None:
    """ValueError unless `name` is one of the counters."""
    if name not in COUNTERS:
        raise ValueError(f"no such change counter: {name!r}")


def read(conn: Connection, name: str) -> str:
    """One counter, by a statement written out once: a node reads each several times a second,
    and a Core select built for each read cost it twice the CPU of the whole read."""
    return conn.exec_driver_sql(_select(name)).scalar() or "0"


def current(engine: Engine, name: str) -> str:
    with unavailable_on_failure(), engine.connect() as conn:
        return read(conn, name)


@functools.cache
def _select(name: str) -> str:
    check(name)
    return f"SELECT value FROM {META.name} WHERE name = '{name}'"


def bump(conn: Connection, name: str) -> None:
    conn.execute(text("INSERT INTO delayq_meta (name, value) VALUES (:n, '1') ON DUPLICATE KEY "
                      "UPDATE value = CAST(value AS UNSIGNED) + 1"), {"n": name})


@contextlib.contextmanager
def bumping(engine: Engine, name: str) -> Iterator[Connection]:
    """A transaction that bumps `name` when it commits."""
    with unavailable_on_failure(), engine.begin() as conn:
        bump(conn, name)
        yield conn
