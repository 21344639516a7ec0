"""The console's questions to other nodes: asked at once, answers kept a few seconds, a node that
does not answer in time reported as such; and data put inside a page's <script> element cannot
close it."""
import json
import threading

from delayq.nodes.console import peers as peers_mod
from delayq.nodes.console.pages_topics import _script_safe
from delayq.nodes.console.peers import Answer, Peers


class Clock:
    t = 100.0

    def __call__(self):
        return self.t


def test_answers_are_kept_for_a_few_seconds():
    asked = []
    clock = Clock()

    def get(ep, path):
        asked.append((ep, path))
        return Answer(ep, 200, {"n": len(asked)})
    p = Peers(get=get, now=clock)
    try:
        first = p.ask(["a:1", "b:1"], "/history")
        assert {a.endpoint for a in first.values()} == {"a:1", "b:1"} and len(asked) == 2
        p.ask(["a:1", "b:1"], "/history")
        assert len(asked) == 2                      # kept
        clock.t += peers_mod.KEEP_S
        p.ask(["a:1"], "/history")
        assert len(asked) == 3
    finally:
        p.stop()


def test_a_node_that_does_not_answer_in_time_is_reported(monkeypatch):
    monkeypatch.setattr(peers_mod, "TIMEOUT_S", 0.05)
    monkeypatch.setattr(peers_mod, "GRACE_S", 0.0)
    release = threading.Event()

    def get(ep, path):
        if ep == "slow:1":
            release.wait(5)
        return Answer(ep, 200, {})
    p = Peers(get=get)
    try:
        out = p.ask(["slow:1", "fast:1"], "/readyz")
        assert out["fast:1"].status == 200
        assert out["slow:1"].status is None and out["slow:1"].error == "no answer in time"
    finally:
        release.set()
        p.stop()


def test_fetch_of_a_closed_port_says_so():
    answer = peers_mod.fetch("127.0.0.1:1", "/readyz", timeout_s=0.5)
    assert answer.status is None and answer.error.startswith("no answer")


def test_json_in_a_script_element_cannot_end_it():
    doc = _script_safe(json.dumps({"topic": "</script><script>alert(1)</script>&"}))
    assert "<" not in doc and ">" not in doc and "&" not in doc
    assert json.loads(doc)["topic"] == "</script><script>alert(1)</script>&"
