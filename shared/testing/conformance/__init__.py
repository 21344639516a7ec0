"""One suite of expectations per port the node's core talks through, run on the in-memory fake
of delayq.testing.fakes and on the production class against the real service, so that a fake
cannot drift from what it stands for (river's one driver test suite for every driver).

    claims     ClaimStore: delayq.testing.fakes.ClaimTable  / delayq.store.tasks.TaskStore
    records    RecordStore: the same two
    overdue    the attempts in flight: ClaimTable           / delayq.store.overdue.OverdueRows
    scans      the loader's window scans: ClaimTable        / TaskStore
    outbox     Outbox: delayq.testing.fakes.Outbox          / delayq.nodes.amqp.publisher.ConfirmedPublisher

Each module holds a class of expectations that asks for one fixture (`tasks`, a
tables.TaskTable, or `outboxes`, an outboxes.Outboxes); tests/unit/test_conformance_fakes.py gives
it the fakes, tests/integration/test_conformance_real.py the real services. An expectation is
something the dispatch core relies on (delayq.nodes.dispatch, delayq.nodes.outcomes), asserted on
what a user would find: a row's status, attempt and due time, a message's outcome.
"""
