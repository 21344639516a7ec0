"""Console sessions and CSRF: random ids, idle and absolute expiry, constant-time token checks."""
import pytest

from delayq.nodes.console import sessions
from delayq.nodes.console.sessions import Sessions, csrf_ok, same_origin


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def test_a_session_is_found_by_its_id_and_ends_when_idle_or_old():
    clock = Clock()
    s = Sessions(now=clock)
    opened = s.open("ops", "digest")
    assert len(opened.id) >= 40 and opened.csrf != opened.id
    assert s.get(opened.id) is opened
    assert s.get("nope") is None and s.get(None) is None
    clock.t += sessions.IDLE_S - 1
    assert s.get(opened.id) is opened             # used: its idle clock restarts
    clock.t += sessions.IDLE_S + 1
    assert s.get(opened.id) is None
    again = s.open("ops", "digest")
    for _ in range(30):
        clock.t += sessions.IDLE_S - 10
        if s.get(again.id) is None:
            break
    assert clock.t - 1000.0 >= sessions.MAX_AGE_S - sessions.IDLE_S   # ended by age, though used


def test_close_and_the_bound_on_sessions(monkeypatch):
    monkeypatch.setattr(sessions, "MAX_SESSIONS", 3)
    clock = Clock()
    s = Sessions(now=clock)
    ids = []
    for i in range(3):
        clock.t += 1
        ids.append(s.open(f"c{i}", None).id)
    with pytest.raises(sessions.Full):                # a full node refuses the login, ending no one's session
        s.open("c3", None)
    assert len(s) == 3 and all(s.get(i) is not None for i in ids)
    s.close(ids[1])
    assert s.get(ids[1]) is None
    clock.t += sessions.IDLE_S + 1                    # sessions that ended make room
    assert s.open("c3", None).client == "c3"


def test_csrf_token_must_match():
    s = Sessions().open("ops", None)
    assert csrf_ok(s, s.csrf)
    assert not csrf_ok(s, None)
    assert not csrf_ok(s, "")
    assert not csrf_ok(s, s.csrf[:-1] + "x")


def test_origin_must_be_this_console_when_given():
    assert same_origin(None, "node:8080", True)
    assert same_origin("https://node:8080", "node:8080", True)
    assert not same_origin("http://node:8080", "node:8080", True)
    assert not same_origin("https://evil.example", "node:8080", True)
    assert not same_origin("https://node:8080", None, True)
