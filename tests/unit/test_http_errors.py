"""The HTTP port's handling of a request that failed: a client gone mid-answer is routine (no
traceback), anything else is logged through the node's logging, not printed to stderr."""
from __future__ import annotations

import logging
import ssl

from delayq.nodes.http import _Server


def handled(error: BaseException, caplog) -> list[logging.LogRecord]:
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="delayq.nodes.http"):
        try:
            raise error
        except BaseException:          # noqa: BLE001 - as socketserver calls it: inside the except
            _Server.handle_error(None, None, ("10.0.0.9", 5555))     # type: ignore[arg-type]
    return list(caplog.records)


def test_a_client_gone_mid_answer_is_one_debug_line(caplog, capsys):
    for gone in (BrokenPipeError(32, "Broken pipe"), ConnectionResetError(104, "reset"),
                 ssl.SSLEOFError(8, "EOF occurred in violation of protocol")):
        records = handled(gone, caplog)
        assert [(r.levelname, r.exc_info) for r in records] == [("DEBUG", None)], gone
    assert capsys.readouterr().err == ""


def test_any_other_failure_is_logged_with_its_traceback(caplog, capsys):
    records = handled(ValueError("header Location holds a line break"), caplog)
    assert [r.levelname for r in records] == ["ERROR"] and records[0].exc_info is not None
    assert capsys.readouterr().err == ""
