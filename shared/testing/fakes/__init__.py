"""In-memory stand-ins for what the node's core talks to, so that claim -> publish -> confirm ->
record runs in a unit test in milliseconds, no server involved:

    ManualClock  time that moves only when the test moves it (both the wall and the monotonic clock)
    ClaimTable   job_delay_task and job_shard as far as window scans, claims, releases, records and
                 time-outs go (delayq.nodes.dispatch.ports.ClaimStore and RecordStore, the loader's
                 scans of delayq.store.tasks.TaskStore, and delayq.store.overdue.OverdueRows)
    TaskInserts  new tasks written by the submit path (delayq.store.submits.TaskWriter, groups that
                 hold no key)
    Outbox       a publisher whose broker answers when the test says (delayq.nodes.dispatch.ports.Outbox)
    Exchanges    the exchange guard's verdicts, set by the test
    Services     topic -> ServiceSpec, and its flow controls
    Clients      the clients and grants Access reads (delayq.store.clients.ClientStore)
    Tenants      the tenants and their topics' live tasks the quotas read (delayq.store.tenants.TenantStore)

They keep the contracts the real ones keep and nothing more; delayq.testing.conformance holds
them to it: the same expectations run on these and on the real MySQL and RabbitMQ.
"""
from delayq.testing.fakes.broker import Exchanges, Outbox, Sent
from delayq.testing.fakes.clock import ManualClock
from delayq.testing.fakes.registry import Clients, Services, Tenants, call_as
from delayq.testing.fakes.tables import ClaimTable, Row, TaskInserts

__all__ = ["ClaimTable", "Clients", "Exchanges", "ManualClock", "Outbox", "Row", "Sent", "Services", "TaskInserts",
           "Tenants", "call_as"]
