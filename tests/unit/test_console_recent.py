"""The console's shared counts (delayq.nodes.console.recent) and its topic pages (page_of)."""
from __future__ import annotations

import threading

import pytest

from delayq.nodes.console.pages_topics import page_of
from delayq.nodes.console.recent import Recent


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_count_is_shared_for_its_ttl_with_its_age_then_counted_again():
    clock, counted = Clock(), []
    recent: Recent[int] = Recent(10.0, clock)

    def count() -> int:
        counted.append(clock.now)
        return len(counted)
    assert recent.get("t", count) == (1, 0.0)
    clock.now += 4
    assert recent.get("t", count) == (1, 4.0)
    clock.now += 6
    assert recent.get("t", count) == (2, 0.0)
    assert recent.get("other", count) == (3, 0.0)
    assert counted == [100.0, 110.0, 110.0]


def test_viewers_asking_at_once_wait_for_one_count():
    recent: Recent[str] = Recent(10.0)
    started, release, counts = threading.Event(), threading.Event(), []

    def slow() -> str:
        counts.append(1)
        started.set()
        assert release.wait(5)
        return "42"
    answers: list[tuple[str, float]] = []
    first = threading.Thread(target=lambda: answers.append(recent.get("t", slow)))
    first.start()
    assert started.wait(5)
    others = [threading.Thread(target=lambda: answers.append(recent.get("t", slow))) for _ in range(4)]
    for t in others:
        t.start()
    release.set()
    for t in [first, *others]:
        t.join(5)
    assert len(counts) == 1 and sorted(v for v, _ in answers) == ["42"] * 5


def test_a_failed_count_is_not_kept():
    recent: Recent[int] = Recent(10.0, Clock())

    def broken() -> int:
        raise RuntimeError("MySQL away")
    with pytest.raises(RuntimeError):
        recent.get("t", broken)
    assert recent.get("t", lambda: 7) == (7, 0.0)


def test_at_most_so_many_keys_the_oldest_dropped_first():
    clock = Clock()
    recent: Recent[int] = Recent(100.0, clock, most=2)
    for i, key in enumerate("abc"):
        clock.now += 1
        recent.get(key, lambda i=i: i)
    assert recent.get("a", lambda: 99) == (99, 0.0)      # dropped: counted again
    assert recent.get("c", lambda: 99) == (2, 0.0)       # kept


def test_topics_are_paged_by_name_after_the_last_one_shown():
    names = [f"t{i:03d}" for i in range(120)]
    first, more = page_of(names, None, 50)
    assert first == names[:50] and more == "t049"
    second, more = page_of(names, more, 50)
    assert second == names[50:100] and more == "t099"
    last, more = page_of(names, more, 50)
    assert last == names[100:] and more is None
    assert page_of(names, "t119", 50) == ([], None)
