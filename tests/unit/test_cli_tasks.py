"""What `delayq tasks ...` shows and refuses without a node: times and durations past what a call
can carry are usage errors naming the option; a task's key, tags, trace context and end message
are shown, escaped when not printable, in tables whose KEY column is padded; a bulk job's
progress bar ends where the job ended; `bulk stop` says when the job had ended before it."""
from __future__ import annotations

import io

import click
import pytest
from click.testing import CliRunner

from delayq.client.gen.delayq_thrift import ttypes
from delayq.ops import bulk
from delayq.ops.cli import main
from delayq.ops.common import MAX_MS, duration_ms, instant
from delayq.ops.taskview import info_dict, info_lines, listed_dict, table

HUGE_DURATION, HUGE_TIME = "99999999999999999999d", "99999999999999999999999"


@pytest.mark.parametrize("args, option", [
    (["tasks", "submit", "walk", "--delay", HUGE_DURATION], "--delay"),
    (["tasks", "submit", "walk", "--at", HUGE_TIME], "--at"),
    (["tasks", "submit", "walk", "--delay", "1s", "--key", "k", "--on-key-conflict", "replace",
      "--max-debounce", HUGE_DURATION], "--max-debounce"),
    (["tasks", "reschedule-key", "walk", "k", "--delay", HUGE_DURATION], "--delay"),
    (["tasks", "reschedule-key", "walk", "k", "--at", HUGE_TIME], "--at"),
    (["tasks", "bulk", "reschedule", "walk", "--reason", "r", "--later", HUGE_DURATION], "--later"),
    (["tasks", "bulk", "reschedule", "walk", "--reason", "r", "--earlier", HUGE_DURATION], "--earlier"),
    (["tasks", "bulk", "cancel", "walk", "--reason", "r", "--due-before", HUGE_TIME], "--due-before"),
    (["tasks", "query", "walk", "--due-from", HUGE_TIME], "--due-from"),
    (["tasks", "list", "--since", HUGE_TIME], "--since"),
    (["tasks", "redrive", "--until", HUGE_TIME], "--until"),
    (["audit", "--since", HUGE_TIME], "--since"),
    (["tenants", "update", "acme", "--max-horizon", HUGE_DURATION], "--max-horizon"),
])
def test_a_time_or_duration_too_large_for_a_call_is_a_usage_error_naming_the_option(args, option):
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)        # not a traceback
    assert f"Invalid value for '{option}'" in result.output or f"Invalid value for {option}" in result.output
    assert "9999-12-31" in result.output or "at most 2932896d" in result.output


def test_the_largest_time_and_duration_are_taken_and_one_more_is_not():
    assert instant(str(MAX_MS)) == MAX_MS
    assert instant("9999-12-31T23:59:59Z") == MAX_MS - 999
    assert duration_ms(f"{MAX_MS // 86_400_000}d") <= MAX_MS
    for refused in (lambda: instant(str(MAX_MS + 1)), lambda: duration_ms(f"{MAX_MS + 1}ms"),
                    lambda: duration_ms(f"{MAX_MS // 86_400_000 + 1}d")):
        with pytest.raises(click.BadParameter, match="9999-12-31|too long"):
            refused()


def _info(**kw) -> ttypes.TaskInfo:
    return ttypes.TaskInfo(taskId="t-1", topic="walk", status=ttypes.TaskStatus.CANCELLED, attempt=0, dueAtMs=0,
                           shardId=3, maxRetries=3, ttrMs=0, createdAtMs=0, updatedAtMs=0, attempts=[], **kw)


def test_get_shows_the_key_tags_trace_context_and_how_the_task_ended():
    tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    d = info_dict(_info(key="order-42", tags=["eu", "vip"], traceparent=tp,
                        message="cancelled by bulk job b-7: tenant left"))
    assert {k: d[k] for k in ("key", "tags", "traceparent", "message")} == {
        "key": "order-42", "tags": ["eu", "vip"], "traceparent": tp, "message": "cancelled by bulk job b-7: tenant left"}
    assert info_lines(d)[1:] == [f"  key order-42  tags eu,vip  traceparent {tp}",
                                 "  ended: cancelled by bulk job b-7: tenant left"]


def test_get_of_a_task_without_key_or_message_adds_no_line():
    d = info_dict(_info())
    assert (d["key"], d["tags"], d["traceparent"], d["message"]) == (None, [], None, None)
    assert len(info_lines(d)) == 1


def test_characters_that_are_not_printable_are_escaped_in_get_and_in_tables():
    d = info_dict(_info(key="a\x1b[31mb\nc\u2028", message="line one\nline two"))
    assert info_lines(d)[1:] == ["  key a\\x1b[31mb\\nc\\u2028", "  ended: line one\\nline two"]
    rows = [{"taskId": "t-1", "topic": "walk", "status": "DELAY", "attempt": 0, "dueAtMs": 0,
             "key": "x\ny", "tags": []}]
    assert len(table(rows, topic=False)) == 2 and "x\\ny" in table(rows, topic=False)[1]


def test_the_key_column_is_as_wide_as_its_widest_key():
    rows = [{"taskId": f"t-{i}", "topic": "walk", "status": "DELAY", "attempt": 0, "dueAtMs": 0, "key": key,
             "tags": ["eu"]} for i, key in enumerate(["k", "a-much-longer-business-key", None])]
    for topic in (False, True):
        lines = table(rows, topic=topic)
        tags_at = lines[0].index("TAGS")
        assert [line.index("eu", tags_at - 1) for line in lines[1:]] == [tags_at] * 3, lines
        assert lines[3].split()[-2:] == ["-", "eu"]


def test_list_reads_keys_and_tags_from_mysql_as_the_node_answers_them():
    row = {"task_id": "t-1", "topic": "walk", "shard_id": 0, "status": "DELAY", "attempt": 0, "due_ms": 0,
           "task_key": b"caf\xc3\xa9-\xff", "tags": b"eu,vip"}
    d = listed_dict(row)
    assert (d["key"], d["tags"]) == ("café-\ufffd", ["eu", "vip"])
    assert listed_dict({**row, "task_key": None, "tags": None})["key"] is None
    assert listed_dict({**row, "task_key": None, "tags": None})["tags"] == []


def _job(state: int, changed: int, total: int = 10) -> ttypes.BulkJob:
    return ttypes.BulkJob(jobId="b-1", state=state, total=total, changed=changed, skipped=0)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("end, shown, hidden", [
    (_job(ttypes.BulkState.STOPPED, 7), ["b-1 STOPPED", "7/10", "70%"], ["100%"]),
    (_job(ttypes.BulkState.FAILED, 7), ["b-1 FAILED", "7/10", "70%"], ["100%"]),
    (_job(ttypes.BulkState.DONE, 10), ["10/10", "100%"], ["STOPPED"]),
])
def test_the_progress_bar_ends_where_the_job_ended(monkeypatch, end, shown, hidden):
    terminal = _Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    polls = iter([_job(ttypes.BulkState.RUNNING, 3), end])
    assert bulk.follow(lambda: next(polls), _job(ttypes.BulkState.RUNNING, 0), False, sleep=lambda s: None) is end
    last = terminal.getvalue().rstrip().split("\r")[-1]     # the bar as it is left on the screen
    assert all(s in last for s in shown) and not any(s in last for s in hidden), last


def test_a_stop_says_whether_the_job_had_ended_before_it():
    running, stopped = _job(ttypes.BulkState.RUNNING, 3), _job(ttypes.BulkState.STOPPED, 3)
    done = _job(ttypes.BulkState.DONE, 10)
    assert bulk.stop_note(running, stopped) is None
    assert bulk.stop_note(stopped, stopped) == "job b-1 had been stopped already"
    assert bulk.stop_note(done, done) == "job b-1 had already ended (DONE): nothing to stop"
    assert bulk.stop_note(running, done) == "job b-1 had already ended (DONE): nothing to stop"   # ended meanwhile


@pytest.mark.parametrize("extra", [[], ["--key", "k"], ["--key", "k", "--on-key-conflict", "reject"]])
def test_max_debounce_without_replace_is_a_usage_error(extra):
    out = CliRunner().invoke(main, ["tasks", "submit", "walk", "--delay", "1s", "--max-debounce", "2h", *extra])
    assert out.exit_code == 2, out.output
    assert "--max-debounce applies to --on-key-conflict replace only" in out.output
