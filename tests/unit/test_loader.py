"""Unit tests for delayq.nodes.memory.loader.Loader's window scans: what each scan asks MySQL for and what ends up
in memory. The store is an in-memory table of DELAY rows, the clock is set by the test; no thread
runs (scan_once is called directly)."""
from __future__ import annotations

import pytest

from delayq.errors import Unavailable
from delayq.nodes.memory.delayqueue import DelayQueue, Entry
from delayq.nodes.memory.loader import Loader, ScanSettings
from delayq.nodes.cluster.ownership import Ownership
from delayq.testing.fakes import ClaimTable, ManualClock

WINDOW, FULL = 60_000, 60_000




class Rows(ClaimTable):
    """job_delay_task in memory (delayq.testing.fakes.ClaimTable, held to MySQL's answers by
    delayq.testing.conformance); records each scan's shards and due-time range."""

    def __init__(self) -> None:
        super().__init__({})
        self.scans: list[tuple[tuple[int, ...], int, int]] = []
        self.fail_next = False

    def scan_due(self, shards, before_ms: int, limit: int, from_ms: int = 0, skip=()) -> list[Entry]:
        if self.fail_next:
            self.fail_next = False
            raise Unavailable("MySQL unavailable")
        self.scans.append((tuple(sorted(shards)), from_ms, before_ms))
        return super().scan_due(shards, before_ms, limit, from_ms, skip)


def scan(loader: Loader, rows: Rows) -> list[tuple[tuple[int, ...], int, int]]:
    """One loader pass; returns the scans it made, as (shards, from_ms, before_ms)."""
    before = len(rows.scans)
    loader.scan_once()
    return rows.scans[before:]


@pytest.fixture
def setup():
    clock, rows = ManualClock(), Rows()
    queue = DelayQueue(clock)
    ownership = Ownership("n1")
    ownership.set({1: 1, 2: 1}, [1, 2, 3])
    loader = Loader(rows, queue, ownership, clock=clock,
                    settings=ScanSettings(WINDOW, interval_ms=5000, cap=1000, full_scan_ms=FULL))
    return clock, rows, queue, ownership, loader


def test_the_first_scan_reads_the_whole_window_and_the_next_only_what_lies_past_the_horizon(setup):
    clock, rows, queue, _, loader = setup
    rows.add("overdue", 1, clock.now - 10_000)
    rows.add("soon", 1, clock.now + 1_000)
    assert scan(loader, rows) == [((1, 2), 0, clock.now + WINDOW)]
    assert len(queue) == 2 and queue.horizon_ms == clock.now + WINDOW

    first_end = clock.now + WINDOW
    clock.now += 5_000
    for dispatched in ("overdue", "soon"):
        queue.remove(dispatched)
    rows.add("came_into_window", 1, first_end + 1_000)
    # Past the horizon for every shard, and the loaded part again for a share of them only.
    assert scan(loader, rows) == [((1, 2), first_end, clock.now + WINDOW), ((1,), 0, first_end)]
    assert queue.holds("came_into_window", first_end + 1_000)


def test_a_row_written_below_the_horizon_behind_the_nodes_back_is_loaded_within_the_full_scan_time(setup):
    clock, rows, queue, ownership, loader = setup
    ownership.set({s: 1 for s in range(1, 41)}, list(range(1, 41)))
    scan(loader, rows)
    due = clock.now + 30_000
    rows.add("redriven", 40, due)                   # e.g. `delayq tasks redrive`: straight into MySQL
    for passes in range(1, FULL // 5_000 + 1):
        clock.now += 5_000
        scans = scan(loader, rows)
        assert len(scans) == 2 and len(scans[1][0]) == 4     # 40 shards, 5 s of a 60 s pass: 4 per scan
        if queue.holds("redriven", due):
            break
    assert queue.holds("redriven", due), f"not loaded after {passes} scans"
    reread = [shard for shards, start, _ in rows.scans[1:] if start == 0 for shard in shards]
    assert reread == list(range(1, 41))             # each shard once, in turn


def test_the_rolling_re_read_pauses_while_memory_holds_a_backlog_and_then_goes_on(setup):
    clock, rows, queue, _, loader = setup
    rows.add("late", 1, clock.now + 1_000)
    scan(loader, rows)
    clock.now += 5_000                        # "late" is 4 s overdue: the dispatcher is behind
    assert scan(loader, rows) == [((1, 2), clock.now - 5_000 + WINDOW, clock.now + WINDOW)]
    queue.remove("late")                      # the backlog is gone
    clock.now += 5_000
    assert scan(loader, rows)[1:] == [((1,), 0, clock.now - 5_000 + WINDOW)]


def test_gained_shards_a_reset_horizon_a_rescan_request_and_a_failed_scan_each_make_the_next_scan_full(setup):
    clock, rows, queue, ownership, loader = setup
    full = [((1, 2), 0, clock.now + WINDOW)]
    assert scan(loader, rows) == full

    ownership.set({1: 1, 2: 1, 3: 2}, [1, 2, 3])    # shard 3 gained
    assert scan(loader, rows) == [((1, 2, 3), 0, clock.now + WINDOW)]

    assert scan(loader, rows)[0][1] > 0
    queue.set_horizon(0)                            # a failed claim dropped its batch
    assert scan(loader, rows) == [((1, 2, 3), 0, clock.now + WINDOW)]

    loader.rescan()                                 # a claim was fenced
    assert scan(loader, rows) == [((1, 2, 3), 0, clock.now + WINDOW)]

    rows.fail_next = True
    with pytest.raises(Unavailable):
        loader.scan_once()
    assert scan(loader, rows) == [((1, 2, 3), 0, clock.now + WINDOW)]


def test_incremental_scans_load_the_same_tasks_as_full_ones(setup):
    clock, rows, queue, _, loader = setup
    for i in range(300):
        rows.add(f"t{i}", 1 + i % 2, clock.now + i * 1_000)
    taken = set()
    for _ in range(60):
        loader.scan_once()
        taken |= {e.task_id for e in queue.take_due(1000, timeout=0)}
        clock.now += 5_000
    assert sum(1 for shards, start, _ in rows.scans if start == 0 and shards == (1, 2)) == 1
    assert taken == {f"t{i}" for i in range(300) if 1_000_000 + i * 1_000 <= clock.now - 5_000}


def test_a_full_scan_time_at_or_below_the_scan_interval_re_reads_every_shard_each_scan():
    clock, rows = ManualClock(), Rows()
    ownership = Ownership("n1")
    ownership.set({1: 1, 2: 1, 3: 1}, [1, 2, 3])
    loader = Loader(rows, DelayQueue(clock), ownership, clock=clock,
                    settings=ScanSettings(WINDOW, interval_ms=5000, cap=1000, full_scan_ms=5000))
    first = scan(loader, rows)
    clock.now += 5_000
    assert scan(loader, rows)[1] == ((1, 2, 3), 0, first[0][2])
