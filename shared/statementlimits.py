"""Statement time limits: the server stops a statement after so many seconds, so that a read no
index narrows ends with an error rather than running on after the client gave up on it
(delayq.store.bykey's listTasks, the console's reads)."""
from __future__ import annotations

import contextlib
from typing import Iterator

import pymysql.err
import sqlalchemy.exc
from sqlalchemy import Connection

from delayq.db import UNAVAILABLE_ERRORS, mysql_code
from delayq.errors import STATEMENT_TIMEOUTS, ConfigError, StatementStopped


# A session's limit on each statement's time: MariaDB's max_statement_time (seconds, every
# statement), else MySQL's max_execution_time (milliseconds, SELECTs only). 0: none.
_STATEMENT_LIMITS = (("max_statement_time", 1), ("max_execution_time", 1000))


def statement_limit(cursor) -> tuple[str, float]:
    """The variable that limits a statement's time on this server (a DBAPI cursor's), and its
    session value in seconds."""
    for variable, per_s in _STATEMENT_LIMITS:
        try:
            cursor.execute(f"SELECT @@SESSION.{variable}")
        except pymysql.err.MySQLError:      # not this server's variable
            continue
        return variable, float(cursor.fetchone()[0]) / per_s
    raise ConfigError("the MySQL server has neither max_statement_time nor max_execution_time")


def set_statement_limit(cursor, variable: str, seconds: float) -> None:
    value = f"{seconds:.3f}" if variable == "max_statement_time" else str(int(seconds * 1000))
    cursor.execute(f"SET SESSION {variable} = {value}")


@contextlib.contextmanager
def time_limited(conn: Connection, seconds: float) -> Iterator[None]:
    """The server stops each statement of the block on conn after `seconds` (StatementStopped),
    rather than running on after the client's read timeout gave up on it (MySQL: SELECTs only;
    the block is meant for reads). The connection's own limit is set again after it (the
    console's engine sets one for all its reads)."""
    cursor = conn.connection.cursor()
    try:
        variable, before = statement_limit(cursor)
        set_statement_limit(cursor, variable, seconds)
        try:
            yield
        except (sqlalchemy.exc.DBAPIError, pymysql.err.MySQLError) as e:
            code = mysql_code(e)
            if code not in STATEMENT_TIMEOUTS:
                raise
            raise StatementStopped(f"a statement was stopped after {seconds:g} s", code) from None
        finally:
            with contextlib.suppress(*UNAVAILABLE_ERRORS):   # a lost connection is dropped by the pool anyway
                set_statement_limit(cursor, variable, before)
    finally:
        cursor.close()
