"""delayq.store.pipeline splits PyMySQL's Connection.query in two with private methods: this fails
when a PyMySQL release renames them or changes what query() does with them. (It runs on MySQL in
tests/integration/test_db.py.)"""
from __future__ import annotations

import importlib.metadata
import inspect

from pymysql.connections import Connection
from pymysql.constants import COMMAND

TESTED = ("1.2.",)


def test_pymysql_is_a_version_the_pipeline_was_tested_with():
    version = importlib.metadata.version("PyMySQL")
    assert version.startswith(TESTED), f"PyMySQL {version}: check delayq.store.pipeline"


def test_the_private_methods_keep_their_signatures():
    assert list(inspect.signature(Connection._execute_command).parameters) == ["self", "command", "sql"]
    assert list(inspect.signature(Connection._read_query_result).parameters) == ["self", "unbuffered"]
    assert COMMAND.COM_QUERY == 3


def test_query_is_still_those_two_steps():
    """Pipelined.send + wait do what Connection.query does for a buffered query."""
    source = inspect.getsource(Connection.query)
    assert "self._execute_command(COMMAND.COM_QUERY, sql)" in source
    assert "self._read_query_result(unbuffered=unbuffered)" in source
