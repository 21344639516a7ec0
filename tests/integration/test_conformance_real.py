"""The conformance suite (delayq.testing.conformance) on the production classes against the real
MariaDB and RabbitMQ; tests/unit/test_conformance_fakes.py runs the same expectations on the
in-memory fakes."""
from __future__ import annotations

from typing import Iterator

import pytest

from delayq.testing.conformance.claims import ClaimStoreExpectations
from delayq.testing.conformance.lookup import LookupExpectations
from delayq.testing.conformance.lookups import RealLookups
from delayq.testing.conformance.outbox import OutboxExpectations
from delayq.testing.conformance.outboxes import RealOutboxes
from delayq.testing.conformance.overdue import OverdueExpectations
from delayq.testing.conformance.records import RecordStoreExpectations
from delayq.testing.conformance.scans import WindowScanExpectations
from delayq.testing.conformance.submits import InsertExpectations
from delayq.testing.conformance.tables import RealTasks

pytestmark = [pytest.mark.integration, pytest.mark.timeout(30)]


@pytest.fixture(scope="module")
def real_tasks(database) -> Iterator[RealTasks]:
    tasks = RealTasks(database)
    yield tasks
    tasks.close()


@pytest.fixture(params=["real"])
def tasks(real_tasks: RealTasks) -> RealTasks:
    real_tasks.clear()
    return real_tasks


@pytest.fixture(scope="module")
def real_outboxes() -> Iterator[RealOutboxes]:
    outboxes = RealOutboxes()
    outboxes.start()
    yield outboxes
    outboxes.stop()


@pytest.fixture(params=["real"])
def outboxes(real_outboxes: RealOutboxes) -> Iterator[RealOutboxes]:
    real_outboxes.bind()
    yield real_outboxes
    real_outboxes.unbind()


@pytest.fixture(params=["real"])
def lookups(database) -> Iterator[RealLookups]:
    lookups = RealLookups(database)
    yield lookups
    lookups.close()


class TestClaimStore(ClaimStoreExpectations):
    pass


class TestRecordStore(RecordStoreExpectations):
    pass


class TestOverdue(OverdueExpectations):
    pass


class TestOutbox(OutboxExpectations):
    pass


class TestWindowScans(WindowScanExpectations):
    pass


class TestLookups(LookupExpectations):
    pass


class TestInserts(InsertExpectations):
    pass
