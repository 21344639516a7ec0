"""The conformance suite (delayq.testing.conformance) on the in-memory fakes the unit tests run
the node's core on; tests/integration/test_conformance_real.py runs the same expectations on
MariaDB and RabbitMQ."""
from __future__ import annotations

import pytest

from delayq.testing.conformance.claims import ClaimStoreExpectations
from delayq.testing.conformance.lookup import LookupExpectations
from delayq.testing.conformance.lookups import FakeLookups
from delayq.testing.conformance.outbox import OutboxExpectations
from delayq.testing.conformance.outboxes import FakeOutboxes
from delayq.testing.conformance.overdue import OverdueExpectations
from delayq.testing.conformance.records import RecordStoreExpectations
from delayq.testing.conformance.scans import WindowScanExpectations
from delayq.testing.conformance.submits import InsertExpectations
from delayq.testing.conformance.tables import FakeTasks

pytestmark = pytest.mark.timeout(10)


@pytest.fixture(params=["fake"])
def tasks(request) -> FakeTasks:
    return FakeTasks()


@pytest.fixture(params=["fake"])
def outboxes(request) -> FakeOutboxes:
    return FakeOutboxes()


@pytest.fixture(params=["fake"])
def lookups(request) -> FakeLookups:
    return FakeLookups()


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
