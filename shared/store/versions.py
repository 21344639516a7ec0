"""Change counters in delayq_meta that nodes poll instead of re-reading whole tables.

Every change to a watched set of rows (the clients; the services with their controls and the
tenants) bumps its counter in the same transaction; a node reads the counters every few hundred
milliseconds (delayq.nodes.watch) and re-reads the rows only when it moved, so a change holds on every node within a
second, without a restart.
"""
from __future__ import annotations

import contextlib
import functools
from typing import Iterable, Iterator


from sqlalchemy import Connection, Engine, select, text

from delayq import tables
from delayq.db import unavailable_on_failure

META = tables.meta
CLIENTS = "clients_version"
SERVICES = "services_version"       # services, their flow controls, tenants
COUNTERS = (CLIENTS, SERVICES)


def read(conn: Connection, name: str) -> str:
    return conn.execute(select(META.c.value).where(META.c.name == name)).scalar() or "0"


def current(engine: Engine, name: str) -> str:
    with unavailable_on_failure(), engine.connect() as conn:
        return read(conn, name)


def read_many(conn: Connection, names: Iterable[str]) -> dict[str, str]:
    """Several counters in one statement: {name: value} ("0" for a counter never bumped)."""
    names = tuple(names)
    found = dict(conn.exec_driver_sql(_select_many(names)).all())
    return {name: found.get(name) or "0" for name in names}


@functools.cache
def _select_many(names: tuple[str, ...]) -> str:
    """The statement as MySQL reads it, written once: a node reads it several times a second, and
    a Core select built for each read cost it twice the CPU of the whole read."""
    unknown = set(names) - set(COUNTERS)
    if unknown:
        raise ValueError(f"no such change counter: {sorted(unknown)}")
    return f"SELECT name, value FROM {META.name} WHERE name IN ({', '.join(repr(n) for n in names)})"


def bump(conn: Connection, name: str) -> None:
    conn.execute(text("INSERT INTO delayq_meta (name, value) VALUES (:n, '1') ON DUPLICATE KEY "
                      "UPDATE value = CAST(value AS UNSIGNED) + 1"), {"n": name})


@contextlib.contextmanager
def bumping(engine: Engine, name: str) -> Iterator[Connection]:
    """A transaction that bumps `name` when it commits."""
    with unavailable_on_failure(), engine.begin() as conn:
        bump(conn, name)
        yield conn
