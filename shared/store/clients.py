"""ClientStore: the clients that may call the nodes and their grants (job_client,
job_client_grant), written by `delayq clients` and read by every node.

A revoked or rotated token's digest is kept in job_client_retired_token (a client's newest
RETIRED_KEPT), so a node can refuse it as `revoked` or `rotated` rather than as never valid.

Every change bumps the `clients_version` row of delayq_meta in its own transaction; a node reads
that one row every few hundred milliseconds and re-reads the clients only when it moved
(delayq.nodes.front.access), so a grant, a revocation or a rotated token holds on every node
within a second, without a restart.
"""
from __future__ import annotations

import builtins
import contextlib
import logging
from dataclasses import dataclass

import sqlalchemy.exc
from sqlalchemy import Connection, Engine, delete, func, select, update
from sqlalchemy.dialects.mysql import insert as mysql_insert

from delayq import tables
from delayq.access.grants import Client, Permission, check_grant
from delayq.access.tokens import check_name, new_token
from delayq.clock import SYSTEM_CLOCK, Clock
from delayq.db import mysql_code, unavailable_on_failure
from delayq.store import versions

CLIENT, GRANT, RETIRED = tables.client, tables.client_grant, tables.client_retired_token
log = logging.getLogger(__name__)

RETIRED_KEPT = 10       # retired tokens told apart per client; older ones read as never valid
REVOKED, ROTATED = "revoked", "rotated"
VERSION = versions.CLIENTS


class NoSuchClient(LookupError):
    pass


@dataclass(frozen=True)
class Listed:
    name: str
    token: bool             # has a token (else: certificate only)
    revoked: bool
    grants: tuple[tuple[str, str], ...]
    updated_ms: int
    tenant: str | None = None       # delayq.store.tenants


class ClientStore:
    def __init__(self, engine: Engine, clock: Clock = SYSTEM_CLOCK):
        self._engine, self._clock = engine, clock

    # ---- read by the nodes --------------------------------------------------------------------

    def version(self) -> str:
        return versions.current(self._engine, VERSION)

    def load(self) -> tuple[str, dict[str, Client]]:
        """(version, every client by name), read in one transaction so they agree."""
        with unavailable_on_failure(), self._engine.connect() as conn:
            version = versions.read(conn, VERSION)
            grants: dict[str, set] = {}
            for row in conn.execute(select(GRANT.c.name, GRANT.c.permission, GRANT.c.pattern)):
                try:
                    grants.setdefault(row.name, set()).add(check_grant(row.permission, row.pattern))
                except ValueError:
                    continue        # written by hand and not valid: grants nothing
            retired = _retired(conn)
            clients = {row.name: Client(row.name, row.token_sha256, bool(row.revoked),
                                        frozenset(grants.get(row.name, ())), tuple(retired.get(row.name, ())))
                       for row in conn.execute(select(CLIENT))}
        return version, clients

    # ---- written by operators -----------------------------------------------------------------

    def add(self, name: str, token: bool = True, grants: tuple[tuple[str, str], ...] = ()) -> str | None:
        """A new client (ValueError if it exists); its token, shown to the operator once."""
        check_name(name)
        checked = [check_grant(p, pat) for p, pat in grants]
        issued, digest = new_token(name) if token else (None, None)
        now = self._clock.now_ms()
        with self._change() as conn:
            if conn.execute(select(CLIENT.c.name).where(CLIENT.c.name == name)).first() is not None:
                raise ValueError(f"client {name!r} exists already (rotate its token, or grant it more)")
            conn.execute(CLIENT.insert().values(name=name, token_sha256=digest, revoked=0, created_ms=now,
                                                updated_ms=now))
            self._grant(conn, name, checked)
        return issued

    def grant(self, name: str, permission: str, pattern: str) -> None:
        checked = check_grant(permission, pattern)
        with self._change() as conn:
            self._existing(conn, name)
            self._grant(conn, name, [checked])

    def ungrant(self, name: str, permission: str, pattern: str) -> bool:
        """Remove one grant; False when the client did not hold it."""
        perm, pattern = check_grant(permission, pattern)
        with self._change() as conn:
            self._existing(conn, name)
            gone = conn.execute(delete(GRANT).where(GRANT.c.name == name, GRANT.c.permission == perm.value,
                                                    GRANT.c.pattern == pattern)).rowcount
            self._touch(conn, name)
        return bool(gone)

    def revoke(self, name: str) -> None:
        """The client can no longer call anything: its token and its certificate stop working."""
        with self._change() as conn:
            self._retire(conn, self._existing(conn, name), REVOKED)
            conn.execute(update(CLIENT).where(CLIENT.c.name == name)
                         .values(revoked=1, token_sha256=None, updated_ms=self._clock.now_ms()))

    def rotate(self, name: str) -> str:
        """A new token for the client (revoked or not: rotating reinstates it); the old one stops working."""
        issued, digest = new_token(name)
        with self._change() as conn:
            self._retire(conn, self._existing(conn, name), ROTATED)
            conn.execute(update(CLIENT).where(CLIENT.c.name == name)
                         .values(revoked=0, token_sha256=digest, updated_ms=self._clock.now_ms()))
        return issued

    def list(self) -> list[Listed]:
        with unavailable_on_failure(), self._engine.connect() as conn:
            grants: dict[str, list] = {}
            for row in conn.execute(select(GRANT).order_by(GRANT.c.name, GRANT.c.permission, GRANT.c.pattern)):
                grants.setdefault(row.name, []).append((row.permission, row.pattern))
            return [Listed(r.name, r.token_sha256 is not None, bool(r.revoked), tuple(grants.get(r.name, ())),
                           r.updated_ms, r.tenant)
                    for r in conn.execute(select(CLIENT).order_by(CLIENT.c.name))]

    # ---- helpers ------------------------------------------------------------------------------

    def _change(self) -> contextlib.AbstractContextManager[Connection]:
        """A transaction that bumps the clients' version when it commits."""
        return versions.bumping(self._engine, VERSION)

    @staticmethod
    def _existing(conn: Connection, name: str) -> tuple[str, str | None]:
        """(name, digest of its current token), the row locked; NoSuchClient when there is none."""
        row = conn.execute(select(CLIENT.c.name, CLIENT.c.token_sha256).where(CLIENT.c.name == name)
                           .with_for_update()).first()
        if row is None:
            raise NoSuchClient(f"no client {name!r}")
        return row.name, row.token_sha256

    def _retire(self, conn: Connection, client: tuple[str, str | None], why: str) -> None:
        """Keep the digest of the token the client stops using (if it had one), and its newest
        RETIRED_KEPT only. A token revoked and then replaced by a rotation stays `revoked`: it had
        stopped working before."""
        name, digest = client
        if digest is not None:
            # Later than the client's last retirement even within one millisecond, so "newest" is
            # always one order (the client's row is locked: its changes run one at a time).
            last = conn.execute(select(func.max(RETIRED.c.retired_ms)).where(RETIRED.c.name == name)).scalar()
            at = max(self._clock.now_ms(), -1 if last is None else last + 1)
            conn.execute(mysql_insert(RETIRED).values(name=name, token_sha256=digest, why=why, retired_ms=at)
                         .prefix_with("IGNORE"))
        old = [r.token_sha256 for r in conn.execute(
            select(RETIRED.c.token_sha256).where(RETIRED.c.name == name)
            .order_by(RETIRED.c.retired_ms.desc(), RETIRED.c.token_sha256).offset(RETIRED_KEPT))]
        if old:
            conn.execute(delete(RETIRED).where(RETIRED.c.name == name, RETIRED.c.token_sha256.in_(old)))

    def _grant(self, conn: Connection, name: str, grants: builtins.list[tuple[Permission, str]]) -> None:
        for perm, pattern in grants:
            conn.execute(mysql_insert(GRANT).values(name=name, permission=perm.value, pattern=pattern)
                         .prefix_with("IGNORE"))
        self._touch(conn, name)

    def _touch(self, conn: Connection, name: str) -> None:
        conn.execute(update(CLIENT).where(CLIENT.c.name == name).values(updated_ms=self._clock.now_ms()))


# What keeps the retired tokens' table from a reader for a while in an upgrade: the nodes' account
# not yet granted it (`db init --node-account` not run again after `db migrate`), or the table not
# there yet. Revoked and rotated tokens are then refused as never valid, and nothing else changes.
_RETIRED_UNREADABLE = frozenset({1142, 1146})


def _retired(conn: Connection) -> dict[str, list[tuple[str, str]]]:
    """The retired tokens' digests and why, by client; none while the table cannot be read (an
    upgrade under way), so that a node still starts and re-reads its clients."""
    retired: dict[str, list[tuple[str, str]]] = {}
    try:
        for row in conn.execute(select(RETIRED.c.name, RETIRED.c.token_sha256, RETIRED.c.why)):
            retired.setdefault(row.name, []).append((row.token_sha256, row.why))
    except sqlalchemy.exc.DBAPIError as e:
        if mysql_code(e) not in _RETIRED_UNREADABLE:
            raise
        log.warning("cannot read %s (%s): revoked and rotated tokens are refused as not valid until "
                    "`delayq db init --node-account` is run again after the upgrade", RETIRED.name, e.orig)
    return retired
