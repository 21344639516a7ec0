"""The MySQL engine, with a timeout on every call, and the translation of driver errors."""
from __future__ import annotations

import contextlib
import inspect
import logging
import time
from typing import Callable, Iterator, TypeVar

import pymysql.err
import sqlalchemy.exc
from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL, make_url

from delayq import clock
from delayq.addresses import parse_addresses
from delayq.config import MySQLSettings
from delayq.errors import LOCK_CONFLICTS, ConfigError, StoreUnavailable, Unavailable
from delayq.failover import Members, fail_over

log = logging.getLogger(__name__)
T = TypeVar("T")


def members_of(settings: MySQLSettings) -> Members | None:
    """The members of DELAYQ_MYSQL_HOSTS (None: the URL's one server). Engines given the same
    Members move together, so that a node's connections go to one member."""
    addresses = parse_addresses(settings.hosts, 3306)
    return Members(addresses) if addresses else None


def make_engine(settings: MySQLSettings, database: bool = True, autocommit: bool = False,
                members: Members | None = None) -> Engine:
    """An engine whose connections time out; database=False connects to the server only.

    With DELAYQ_MYSQL_HOSTS, connections go to one member of them at a time (delayq.failover);
    `members` shares that choice with other engines (default: the engine's own).

    autocommit=True: every statement commits on its own, and a connection goes back to the pool
    without the ROLLBACK (a round trip) that ends a transaction. For writes that are one
    statement, or that say START TRANSACTION and COMMIT or ROLLBACK themselves."""
    url = checked_url(settings.url)
    if not database:
        url = url._replace(database=None)
    timeout = max(1, settings.timeout_ms // 1000)
    options = ({"isolation_level": "AUTOCOMMIT", "skip_autocommit_rollback": True} if autocommit
               else {"pool_reset_on_return": None})     # _reset_unless_committed does it
    engine = create_engine(
        url,
        pool_size=settings.pool_size,
        max_overflow=0,
        pool_timeout=timeout,
        pool_recycle=3600,
        connect_args={
            "connect_timeout": timeout,
            "read_timeout": timeout,
            "write_timeout": timeout,
            "charset": "utf8mb4",
            **tls_args(url),
        },
        **options,
    )
    members = members or members_of(settings)
    if members is not None:
        fail_over(engine, members)
    _ping_when_idle(engine)
    if not autocommit:
        _reset_unless_committed(engine)
    return engine


def checked_url(text: str) -> URL:
    """DELAYQ_MYSQL_URL parsed, or ConfigError saying what is wrong with it. The messages never
    repeat the URL: it may hold a password. A driver option the driver does not take (`?bogus=1`)
    would otherwise fail only at the first connect, as a TypeError."""
    try:
        url = make_url(text)
        url.port            # a port that is not a number raises here
    except (sqlalchemy.exc.ArgumentError, ValueError):
        raise ConfigError("DELAYQ_MYSQL_URL is not a URL of the form "
                          "mysql+pymysql://USER:PASSWORD@HOST:PORT/DATABASE") from None
    if url.get_backend_name() != "mysql" or url.get_driver_name() != "pymysql":
        raise ConfigError(f"DELAYQ_MYSQL_URL: delayq speaks to MySQL through PyMySQL, not {url.drivername!r} "
                          "(use mysql+pymysql://USER:PASSWORD@HOST:PORT/DATABASE)")
    dialect = url.get_dialect()
    try:
        _, kwargs = dialect().create_connect_args(url)
    except (ValueError, TypeError) as e:        # an option's value of the wrong kind (?connect_timeout=abc)
        raise ConfigError(f"DELAYQ_MYSQL_URL: an option in the URL's query is not valid: {e}") from None
    taken = inspect.signature(dialect.import_dbapi().connect).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in taken.values()):
        unknown = sorted(k for k in kwargs if k not in taken)
        if unknown:
            raise ConfigError(f"DELAYQ_MYSQL_URL: the driver takes no option {', '.join(unknown)} "
                              f"(in the URL's query, after ?)")
    return url


def tls_args(url: URL) -> dict[str, object]:
    """The driver's TLS arguments for a URL: none when its query asks for TLS (`?ssl_ca=...`,
    `?ssl_verify_cert=true`: the driver does as told), else TLS off. Left to itself PyMySQL 2.2
    builds a TLS context at every connect in case the server offers TLS, loading the system's CA
    certificates: tens of milliseconds of CPU, paid by every thread retrying a connect while MySQL
    is away and by every new connection as it comes back, when the node has overdue tasks to
    claim. That TLS checked no certificate: it never kept out a server that was not MySQL."""
    if any(key.startswith("ssl") for key in url.query):
        return {}
    return {"ssl_disabled": True}


def _reset_unless_committed(engine: Engine) -> None:
    """Roll back a connection coming back to the pool, unless the last thing it did was commit.
    SQLAlchemy's own reset rolls back every time: after `engine.begin()` that is a ROLLBACK with
    nothing to undo, a round trip more on every claim, record and finish. A connection that read
    without committing is still rolled back, so no snapshot outlives its checkout."""
    @event.listens_for(engine, "commit")
    def _committing(conn) -> None:
        conn.info["committed"] = True

    @event.listens_for(engine, "begin")
    def _begun(conn) -> None:
        conn.info.pop("committed", None)

    @event.listens_for(engine, "handle_error")
    def _failed(context) -> None:
        if context.connection is not None and not context.connection.invalidated:
            context.connection.info.pop("committed", None)

    @event.listens_for(engine, "reset")
    def _reset(dbapi_connection, record, state) -> None:
        if record.info.pop("committed", False) or state.transaction_was_reset:
            return
        dbapi_connection.rollback()


# How long a node's statement waits for a row lock (innodb_lock_wait_timeout: whole seconds). The
# server's default of 50 s outlasts the read timeout: a statement behind the locks of a frozen
# node's transaction lost its connection instead, which the node took for an outage.
LOCK_WAIT_S = 1


def bound_lock_waits(engine: Engine, seconds: int = LOCK_WAIT_S) -> None:
    """Every connection of the engine gives up a row lock wait after `seconds`: its statement
    fails with 1205 (a lock conflict, StoreUnavailable with that code), and the transaction is
    rolled back by its caller and tried again, rather than waiting on a node that may never go on."""
    @event.listens_for(engine, "connect")
    def _connected(dbapi_connection, _record) -> None:
        with dbapi_connection.cursor() as cur:
            cur.execute(f"SET SESSION innodb_lock_wait_timeout = {int(seconds):d}")


PING_IDLE_S = 1.0


def _ping_when_idle(engine: Engine) -> None:
    """Ping a pooled connection before use when it has been idle for PING_IDLE_S, and replace it
    if the ping fails (MySQL restarted, the connection was cut). pool_pre_ping would ping before
    every transaction: one round trip more on each claim, record and group commit, which are
    seldom a second apart. A connection that dies while busy fails its statement, which the
    caller sees as StoreUnavailable, and the pool replaces every idle connection then."""
    @event.listens_for(engine, "checkin")
    def _checked_in(dbapi_connection, record) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_connection, record, proxy) -> None:
        since = record.info.pop("idle_since", None)
        if since is None or time.monotonic() - since < PING_IDLE_S:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as e:  # noqa: BLE001 - whatever the driver raises, the connection is gone
            # The pool discards this connection and checks out a new one (up to three times).
            raise sqlalchemy.exc.DisconnectionError(str(e)) from e


# Driver error codes of a server that cannot be reached: the client's own (2003 cannot connect,
# 2006 gone away, 2013 lost during a query, ...) and the server shutting down (1053).
_UNREACHABLE_CODES = range(2000, 3000)
_SHUTDOWN = 1053


def on_unreachable(engine: Engine, seen: Callable[[], None]) -> None:
    """Call `seen` (on the failing thread; it must not block) whenever a statement or a connect
    on this engine fails because MySQL cannot be reached, whoever's call it was: the outage grace
    (delayq.nodes.outcomes.outages) must hear of an outage that only a claim or a record ran into. Lock
    conflicts and refused statements are not outages."""
    @event.listens_for(engine, "handle_error")
    def _failed(context) -> None:
        args = getattr(context.original_exception, "args", ())
        code = args[0] if args else None
        if context.is_disconnect or (isinstance(code, int) and (code in _UNREACHABLE_CODES or code == _SHUTDOWN)):
            seen()


def database_name(settings: MySQLSettings) -> str:
    name = checked_url(settings.url).database
    if not name:
        raise ConfigError("DELAYQ_MYSQL_URL names no database")
    return name


# Errors that mean "the database cannot be reached or gave up": the call may succeed later. The
# driver's own are those of statements sent on the driver's connection (delayq.store.pipeline.Pipelined).
UNAVAILABLE_ERRORS = (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError,
                sqlalchemy.exc.TimeoutError, sqlalchemy.exc.DisconnectionError,
                pymysql.err.OperationalError, pymysql.err.InterfaceError)


# Errors of a statement the server refused (the driver's, and SQLAlchemy's for them): a missing
# table is one of them.
_STATEMENT = (sqlalchemy.exc.ProgrammingError, pymysql.err.ProgrammingError)

# MySQL error codes that mean the schema is not what this code expects.
_SCHEMA_ERRORS = {1146, 1054}    # no such table, no such column


def mysql_code(e: BaseException) -> int | None:
    """The MySQL error number of a driver error, raw or as SQLAlchemy wraps it (None: not one)."""
    orig = e if isinstance(e, pymysql.err.MySQLError) else getattr(e, "orig", None)
    code = getattr(orig, "args", (None,))[0]
    return code if isinstance(code, int) else None


@contextlib.contextmanager
def unavailable_on_failure(what: str = "MySQL") -> Iterator[None]:
    """Turn a lost or refused database connection into StoreUnavailable (retriable), and a schema
    that is behind the code into ConfigError (run `delayq db migrate`)."""
    try:
        yield
    except UNAVAILABLE_ERRORS + _STATEMENT as e:
        code = mysql_code(e)
        if code in _SCHEMA_ERRORS:
            raise ConfigError(f"the database schema is not up to date ({_short(e)}): "
                              "run `delayq db migrate`") from None
        if isinstance(e, _STATEMENT):
            raise
        raise StoreUnavailable(f"{what} unavailable: {_short(e)}", code) from None


class HeldConnection:
    """The connection a polling thread keeps from one read to the next, of an autocommit engine
    (delayq.nodes.memory.hints reads 20 times a second). Checking one out of the pool and back for each
    read cost as much CPU as the read itself: 0.9-1.1 ms against 0.55-0.65 ms held, paced 20 times
    a second against MariaDB. Like the pool's, a connection unused for PING_IDLE_S is pinged before
    its next read, and replaced if the ping fails (MySQL's wait_timeout, a restart, a proxy's idle
    cut). A read that fails gives the connection up; the next read connects anew. For one thread;
    `close()` when the thread ends."""

    def __init__(self, engine: Engine):
        self._engine = engine
        self._conn: Connection | None = None
        self._used = 0.0

    @contextlib.contextmanager
    def use(self) -> Iterator[Connection]:
        """The connection (made now if there is none), its errors as unavailable_on_failure's."""
        try:
            with unavailable_on_failure():
                if self._conn is not None and time.monotonic() - self._used >= PING_IDLE_S:
                    self._ping()
                if self._conn is None:
                    self._conn = self._engine.connect()
                yield self._conn
        except BaseException:
            self.close()
            raise
        finally:
            self._used = time.monotonic()

    def _ping(self) -> None:
        assert self._conn is not None
        try:
            dbapi = self._conn.connection.dbapi_connection
            if dbapi is None:     # invalidated: nothing to ping
                raise ConnectionError("the held connection was invalidated")
            self._engine.dialect.do_ping(dbapi)
        except Exception:  # noqa: BLE001 - whatever the driver raises, the connection is gone
            log.debug("a held connection did not answer its ping; connecting anew", exc_info=True)
            conn, self._conn = self._conn, None
            try:
                conn.invalidate()
                conn.close()
            except Exception:  # noqa: BLE001 - a broken connection is given up either way
                pass

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - a broken connection is given up either way
                log.debug("closing a held connection failed", exc_info=True)


def _short(e: Exception) -> str:
    orig = getattr(e, "orig", None)
    return str(orig if orig is not None else e).splitlines()[0][:200]


def wait_until_answered(call: Callable[[], T], wait_s: float, what: str = "MySQL") -> T:
    """call() until it does not raise Unavailable, for up to wait_s (then its error is raised)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return call()
        except Unavailable as e:
            if time.monotonic() > deadline:
                raise
            log.warning("waiting for %s: %s", what, e)
            clock.pause(1.0)


def retry_lock_conflicts(call: Callable[[], T], attempts: int = 5,
                         pause: Callable[[float], object] = clock.pause) -> T:
    """call() again when MySQL answered a deadlock or a lock wait timeout (the transaction was
    rolled back), after 50 ms, 100 ms, ...; any other error, or the last conflict, is raised."""
    for attempt in range(attempts - 1):
        try:
            return call()
        except StoreUnavailable as e:
            if e.code not in LOCK_CONFLICTS:
                raise
            log.info("lock conflict; trying again: %s", e)
            pause(0.05 * (attempt + 1))
    return call()
