"""Failover between the members of a replicated MySQL (a MariaDB Galera cluster): which member a
node's connections go to, and the SQLAlchemy hooks that move them.

    members = Members(parse_addresses("db1:3306,db2:3306,db3:3306", 3306))
    fail_over(engine, members)          # every new connection of the engine goes to members.current

Why one member at a time: every member of a Galera cluster takes writes, but two transactions
that change the same row on two members both commit locally and one of them fails certification
at commit (error 1213, as a deadlock). Claims and records of delayq's nodes touch the same rows
(a shard's due tasks, the shard epochs): spread over members they would fail and be retried
far more than on one member, where InnoDB's locks order them instead.

States of Members: `current` is the member connections go to. A member that refuses a connection,
or answers that it is not part of the primary component (wsrep_ready OFF: cut from the others,
or still joining), is marked down and the next one in the list becomes current; a member marked
down is tried again, as a last resort, only after `retry_after_s`. There is no move back: the
node stays on a member until it fails, so that its connections do not straddle two members.

Thread-safe: the pool connects from any thread.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Sequence

import pymysql
from sqlalchemy import Engine, event

from delayq.addresses import Address

log = logging.getLogger(__name__)

# A member that is not (or no longer) part of the primary component answers statements with
# 1047 ("WSREP has not yet prepared node for application use"): for the pool, as good as gone.
NOT_PRIMARY = 1047


class Members:
    """Which of several addresses connections go to (see the module docstring)."""

    def __init__(self, addresses: Sequence[Address], *, retry_after_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic):
        if not addresses:
            raise ValueError("no member addresses")
        self._addresses = list(dict.fromkeys(addresses))
        self._current = self._addresses[0]
        self._down: dict[Address, float] = {}
        self._retry_after_s = retry_after_s
        self._clock = clock
        self._lock = threading.Lock()

    @property
    def current(self) -> Address:
        return self._current

    def candidates(self) -> list[Address]:
        """The order to try: current first, then the members after it (wrapping), those marked
        down within retry_after_s last."""
        with self._lock:
            i = self._addresses.index(self._current)
            ring = self._addresses[i:] + self._addresses[:i]
            now = self._clock()
            fresh = [a for a in ring if now - self._down.get(a, -1e18) >= self._retry_after_s]
            return fresh + [a for a in ring if a not in fresh]

    def failed(self, address: Address, why: str) -> None:
        with self._lock:
            self._down[address] = self._clock()
        log.warning("MySQL member %s unusable: %s", address, why)

    def chose(self, address: Address) -> None:
        with self._lock:
            self._down.pop(address, None)
            moved, self._current = self._current != address, address
        if moved:
            log.info("MySQL connections now go to %s", address)


def not_ready(conn: Any) -> str | None:
    """Why a fresh connection's member must not be used (None: use it). A Galera member answers
    wsrep_ready ON only while it is a synced part of the primary component; a plain MySQL has no
    such status and is always used. On a Galera member, the first statement also waits until the
    member has applied every transaction the cluster committed before it (wsrep_sync_wait): what
    this node wrote through the member it left is visible on this one."""
    with conn.cursor() as cur:
        cur.execute("SHOW STATUS LIKE 'wsrep_ready'")
        row = cur.fetchone()
        if row is None:
            return None
        if str(row[1]).upper() != "ON":
            return "not part of the Galera primary component (wsrep_ready OFF)"
        cur.execute("SET SESSION wsrep_sync_wait = 1")
        cur.execute("SELECT 1")
        cur.execute("SET SESSION wsrep_sync_wait = DEFAULT")
    return None


def fail_over(engine: Engine, members: Members) -> None:
    """Make every new connection of `engine` go to members.current, moving on as the module
    docstring says; a statement refused by a member cut from its cluster counts as a lost
    connection, so the pool drops its connections and makes new ones elsewhere."""

    @event.listens_for(engine, "do_connect")
    def _connect(dialect: Any, conn_rec: Any, cargs: Any, cparams: dict[str, Any]) -> Any:
        last: Exception | None = None
        for address in members.candidates():
            try:
                conn = dialect.loaded_dbapi.connect(*cargs, **{**cparams, "host": address.host, "port": address.port})
            except pymysql.err.MySQLError as e:
                members.failed(address, str(e).splitlines()[0][:200])
                last = e
                continue
            try:
                why = not_ready(conn)
            except pymysql.err.MySQLError as e:
                why = str(e).splitlines()[0][:200]
            if why is None:
                members.chose(address)
                return conn
            members.failed(address, why)
            last = pymysql.err.OperationalError(NOT_PRIMARY, f"{address}: {why}")
            try:
                conn.close()
            except pymysql.err.Error:
                pass
        assert last is not None
        raise last

    @event.listens_for(engine, "handle_error")
    def _failed(context: Any) -> None:
        args = getattr(context.original_exception, "args", ())
        if args and args[0] == NOT_PRIMARY:
            context.is_disconnect = True
