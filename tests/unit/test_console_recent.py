"""The console's shared counts (delayq.nodes.console.recent) and its topic pages (page_of)."""
from __future__ import annotations

import threading
import time

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


def _under_way(recent, count, joiners: int):
    """A count of "t" under way (held until `release` is set) and `joiners` viewers joined to it;
    returns (release, threads, answers)."""
    started, release, answers = threading.Event(), threading.Event(), []

    def held():
        started.set()
        assert release.wait(5)
        return count()

    def ask(how):
        try:
            answers.append(recent.get("t", how))
        except RuntimeError as e:
            answers.append(str(e))
    threads = [threading.Thread(target=ask, args=(held,))]
    threads[0].start()
    assert started.wait(5)
    threads += [threading.Thread(target=ask, args=(count,)) for _ in range(joiners)]
    for t in threads[1:]:
        t.start()
    deadline = time.monotonic() + 5
    while recent.joined("t") < joiners and time.monotonic() < deadline:
        time.sleep(0.005)           # polling the join count: the viewers are inside get() once it is reached
    assert recent.joined("t") == joiners
    return release, threads, answers


def test_viewers_asking_while_a_count_is_under_way_get_its_value_and_count_nothing():
    recent: Recent[str] = Recent(0.0)       # nothing is fresh afterwards: only joining shares
    counts = []

    def count() -> str:
        counts.append(1)
        return "42"
    release, threads, answers = _under_way(recent, count, 4)
    release.set()
    for t in threads:
        t.join(5)
    assert len(counts) == 1 and [v for v, _ in answers] == ["42"] * 5


def test_a_failed_count_fails_those_who_joined_it_and_is_not_kept():
    recent: Recent[int] = Recent(10.0)

    def broken() -> int:
        raise RuntimeError("MySQL away")
    release, threads, answers = _under_way(recent, broken, 3)
    release.set()
    for t in threads:
        t.join(5)
    assert answers == ["MySQL away"] * 4
    assert recent.get("t", lambda: 7)[0] == 7      # the next viewer counts again


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
