"""The node's Pruner on a stand-in store: what it passes, what it survives, and its thread's end."""
from __future__ import annotations

import time

from delayq.config import RetentionSettings
from delayq.errors import StoreUnavailable
from delayq.nodes.cluster.pruner import Pruner
from delayq.store.retention import PassReport
from delayq.testing.fakes import ManualClock

SETTINGS = RetentionSettings(days=7, audit_days=365, interval_ms=3_600_000, ahead_days=2, batch=500)


class Store:
    def __init__(self, *outcomes):
        self.outcomes, self.calls = list(outcomes), []

    def prune(self, days, now_ms, ahead_days, batch, *, audit_days):
        self.calls.append((days, now_ms, ahead_days, batch, audit_days))
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


def test_a_pass_gets_the_settings_and_the_clock():
    report = PassReport(dropped={"job_delay_task_backlog": ["p20261101"]}, deleted_tasks=3)
    store = Store(report)
    pruner = Pruner(store, SETTINGS, ManualClock(now=1_764_000_000_000))
    assert pruner.run_once() is report and pruner.last is report
    assert store.calls == [(7, 1_764_000_000_000, 2, 500, 365)]


def test_mysql_away_or_a_ddl_timed_out_waits_for_the_next_pass():
    store = Store(StoreUnavailable("MySQL unavailable: lock wait timeout", 1205), PassReport())
    pruner = Pruner(store, SETTINGS, ManualClock())
    assert pruner.run_once() is None and pruner.last is None
    assert pruner.run_once() == PassReport()


def test_a_table_delayq_did_not_partition_is_said_and_survived():
    pruner = Pruner(Store(LookupError("job_delay_task_backlog is not partitioned"), ValueError("no pmax")),
                    SETTINGS, ManualClock())
    assert pruner.run_once() is None
    assert pruner.run_once() is None


def test_the_thread_stops_while_it_waits():
    pruner = Pruner(Store(), SETTINGS, ManualClock())
    pruner.start()
    assert pruner.alive
    started = time.monotonic()
    pruner.stop(timeout=2)
    assert not pruner.alive and time.monotonic() - started < 1


def test_a_statement_mysql_refused_waits_for_the_next_pass():
    """E.g. on Galera, another member's pass dropped the partition first."""
    import sqlalchemy.exc
    refused = sqlalchemy.exc.OperationalError("ALTER TABLE ... DROP PARTITION p20261101", {}, Exception(1507))
    pruner = Pruner(Store(refused, PassReport()), SETTINGS, ManualClock())
    assert pruner.run_once() is None
    assert pruner.run_once() == PassReport()
