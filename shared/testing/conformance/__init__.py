"""One suite of expectations per port the node's core talks through, run on the in-memory fake
of delayq.testing.fakes and on the production class against the real service, so that a fake
cannot drift from what it stands for (river's one driver test suite for every driver).

    claims     ClaimStore: delayq.testing.fakes.ClaimTable  / delayq.store.tasks.TaskStore
    records    RecordStore: the same two
    overdue    the attempts in flight: ClaimTable           / delayq.store.overdue.OverdueRows
    scans      the loader's window scans: ClaimTable        / TaskStore
    submits    new tasks without keys: fakes.TaskInserts    / delayq.store.submits.TaskWriter
    outbox     Outbox: delayq.testing.fakes.Outbox          / delayq.nodes.amqp.publisher.ConfirmedPublisher
    lookup     ServiceFinder, ExchangeVerdicts, the clients, the tenants: fakes.Services, Exchanges,
               Clients, Tenants / ServiceRegistry, delayq.nodes.amqp.exchanges.ExchangeGuard,
               delayq.store.clients.ClientStore, delayq.store.tenants.TenantStore

Each of those modules holds a class of expectations that asks for one fixture, built by its
harness module: `tasks` (tables.TaskTable), `outboxes` (outboxes.Outboxes) or `lookups`
(lookups.Lookups). tests/unit/test_conformance_fakes.py gives the classes the fakes,
tests/integration/test_conformance_real.py the real services. An expectation is something the
core relies on (delayq.nodes.dispatch, delayq.nodes.outcomes, delayq.nodes.memory.loader, the
submit path), asserted on what a user would find: a row's status, attempt and due time, a
message's outcome.
"""
