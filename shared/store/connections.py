"""NodeConnections: the MySQL connections each node holds, and the ending of a departed node's.

A node frozen inside a transaction (SIGSTOP, a long GC pause, swapping, a VM migration) keeps that
transaction's row locks for as long as it is frozen: the shard rows a claim locks in share mode,
the task rows it locks for update. ZooKeeper moves its shards once its session expires, but its
successors' claims, and the master's write of the new epochs, would wait on those locks until it
wakes. So every node writes down each connection it opens, and the master, before it moves the
shards of a node that has left the cluster, ends that node's connections: MySQL rolls back their
transactions and the locks are free (delayq.master.rebalancer).

    connections = NodeConnections(engine, settings.mysql)
    connections.register(engine, "n1")     # each new connection of the engine is written down
    connections.end(["n1"])                # KILL CONNECTION each of n1's, where it is held

Which server holds a connection: the node writes down the address it connected to (with
DELAYQ_MYSQL_HOSTS, the Galera member its connections go to, delayq.failover). A KILL reaches only
the server it is sent to, so `end` connects to that address itself, as DELAYQ_MYSQL_URL's account:
the nodes share one account, which may end its own connections without the PROCESS privilege. A
connection id is only ended while that server's processlist still shows it with the client address
written down with it: an id a restarted server gave out again is never taken for the old one.

A node that is ended wrongly (its session expired but it was not frozen) loses nothing: the
statement it had in flight fails as if MySQL had gone away, and its pool connects again.

Thread-safe: `register`'s listener runs on the thread that connects; `end` uses connections of its
own.
"""
from __future__ import annotations

import contextlib
import itertools
import logging
import time
from dataclasses import dataclass
from typing import Any, Collection, Iterator

import pymysql
from sqlalchemy import Engine, delete, event, select

from delayq import tables
from delayq.config import MySQLSettings
from delayq.db import checked_url, tls_args, unavailable_on_failure

log = logging.getLogger(__name__)
CONNECTION = tables.node_connection

_UNKNOWN_THREAD = 1094      # KILL of a connection that ended meanwhile


@dataclass(frozen=True, order=True)
class Registered:
    server: str             # host:port the node connected to
    connection_id: int
    client: str             # the connection's HOST in the server's processlist


class NodeConnections:
    def __init__(self, engine: Engine, settings: MySQLSettings):
        """engine reads and removes the rows; settings give the account and time-outs of the
        connections `end` makes to each server."""
        self._engine, self._settings = engine, settings

    def register(self, engine: Engine, node_id: str) -> None:
        """Write down every connection `engine` opens from now on as node_id's."""
        @event.listens_for(engine, "connect")
        def _connected(dbapi_connection: Any, _record: Any) -> None:
            server = _server(dbapi_connection)
            try:
                with dbapi_connection.cursor() as cur:
                    cur.execute("SELECT ID, HOST FROM information_schema.PROCESSLIST WHERE ID = CONNECTION_ID()")
                    conn_id, client = cur.fetchone()
                    cur.execute(f"REPLACE INTO {CONNECTION.name} (server, connection_id, node_id, client, created_ms) "
                                "VALUES (%s, %s, %s, %s, %s)", (server, conn_id, node_id, client, int(time.time() * 1000)))
                dbapi_connection.commit()
            except pymysql.err.MySQLError as e:
                # The connection works all the same; only a freeze inside one of its transactions
                # would then hold its locks until the node wakes.
                log.warning("could not write down a new MySQL connection (%s): if this node freezes, the "
                            "connection's locks are held until it wakes", str(e).splitlines()[0][:200])
                with contextlib.suppress(pymysql.err.MySQLError):
                    dbapi_connection.rollback()
                return
            # The node's connections to this server that have ended since (recycled, cut), so the
            # rows stay about as many as the connections. Apart: a conflict here costs only the sweep.
            try:
                with dbapi_connection.cursor() as cur:
                    cur.execute(f"DELETE FROM {CONNECTION.name} WHERE node_id = %s AND server = %s AND connection_id "
                                "NOT IN (SELECT ID FROM information_schema.PROCESSLIST)", (node_id, server))
                dbapi_connection.commit()
            except pymysql.err.MySQLError as e:
                log.debug("forgetting ended MySQL connections failed: %s", e)
                with contextlib.suppress(pymysql.err.MySQLError):
                    dbapi_connection.rollback()

    def end(self, node_ids: Collection[str]) -> int:
        """End every connection these nodes wrote down (their transactions roll back), and forget
        them; returns the connections ended. A server that cannot be reached is skipped with a
        warning: its connections are gone, or will be tried again at the next call."""
        if not node_ids:
            return 0
        with unavailable_on_failure(), self._engine.connect() as conn:
            held = sorted(Registered(r.server, r.connection_id, r.client) for r in conn.execute(
                select(CONNECTION.c.server, CONNECTION.c.connection_id, CONNECTION.c.client)
                .where(CONNECTION.c.node_id.in_(sorted(node_ids)))))
        ended = 0
        for server, group in itertools.groupby(held, key=lambda h: h.server):
            try:
                ended += self._end_on(server, list(group))
            except pymysql.err.MySQLError as e:
                log.warning("could not end connections of %s on %s: %s", sorted(node_ids), server,
                            str(e).splitlines()[0][:200])
        if ended:
            log.info("ended %d MySQL connections of departed nodes %s: their open transactions are rolled back",
                     ended, sorted(node_ids))
        return ended

    def forget(self, node_id: str) -> None:
        """Withdraw a node's rows: it is stopping, and the connections it still uses (the hints
        it writes after closing its ZooKeeper session) are not to be ended as a frozen node's."""
        with unavailable_on_failure(), self._engine.begin() as conn:
            conn.execute(delete(CONNECTION).where(CONNECTION.c.node_id == node_id))

    def _end_on(self, server: str, held: list[Registered]) -> int:
        ended = 0
        with self._connect(server) as cur:
            cur.execute(f"SELECT ID, HOST FROM information_schema.PROCESSLIST WHERE ID IN ({','.join(['%s'] * len(held))})",
                        [h.connection_id for h in held])
            live = {(conn_id, client) for conn_id, client in cur.fetchall()}
            for h in held:
                if (h.connection_id, h.client) not in live:
                    continue
                try:
                    cur.execute(f"KILL CONNECTION {int(h.connection_id):d}")
                    ended += 1
                except pymysql.err.OperationalError as e:
                    if e.args[0] != _UNKNOWN_THREAD:
                        raise
            cur.execute(f"DELETE FROM {CONNECTION.name} WHERE server = %s AND connection_id IN "
                        f"({','.join(['%s'] * len(held))})", [server, *(h.connection_id for h in held)])
        return ended

    @contextlib.contextmanager
    def _connect(self, server: str) -> Iterator[Any]:
        """A cursor on a connection of its own to `server`, with the engine's account and options."""
        url = checked_url(self._settings.url)
        _, params = url.get_dialect()().create_connect_args(url)
        host, _, port = server.rpartition(":")
        timeout = max(1, self._settings.timeout_ms // 1000)
        conn = pymysql.connect(**{**params, "host": host, "port": int(port), "connect_timeout": timeout,
                                  "read_timeout": timeout, "write_timeout": timeout, "autocommit": True,
                                  **tls_args(url)})
        try:
            with conn.cursor() as cur:
                yield cur
        finally:
            conn.close()


def _server(dbapi_connection: Any) -> str:
    """host:port a PyMySQL connection went to."""
    return f"{dbapi_connection.host}:{dbapi_connection.port}"
