"""Pipelined statements on one PyMySQL connection: the one place delayq uses PyMySQL's internals.

What it replaces: `Connection.query(sql)`, which sends a statement and blocks until its answer.
`Pipelined` splits it in two with PyMySQL's private `_execute_command` (send) and
`_read_query_result` (read the answer), so the node prepares the next part of a large submit while
MySQL writes the previous one. Why: a 1000-task submitBatch rose from 0.48-0.59 to 0.50-0.77 of
MySQL's batched-insert limit in seven interleaved runs (`python -m bench --scenario submit`,
figure batch_1000). Tested against PyMySQL 1.2.4; tests/unit/test_pipeline.py fails if either
method disappears or changes its signature, and tests/integration/test_db.py runs it on MySQL.
"""
from __future__ import annotations

from pymysql.constants import COMMAND


class Pipelined:
    """One statement in flight on a PyMySQL connection. send() writes a statement and returns; its
    answer is read by wait(), which the next send() calls first: the protocol takes one command at a
    time. The two steps are PyMySQL's Connection.query split in half. The connection's read and
    write timeouts bound each step."""

    def __init__(self, dbapi_connection):
        self._conn = dbapi_connection
        self._pending = False

    def send(self, sql: str) -> None:
        self.wait()
        self._conn._execute_command(COMMAND.COM_QUERY, sql.encode())
        self._pending = True

    def wait(self) -> None:
        if self._pending:
            self._pending = False
            self._conn._read_query_result()
