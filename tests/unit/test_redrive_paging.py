"""What the admin `redrive` call answers in `more` (delayq.nodes.front.admin): a client that pages
(afterTaskId set, "" on its first call) is told whenever more FAILED tasks may follow; a client of
an earlier version, which calls again from the start while `more`, is told so only when the call
redrove some, so tasks left FAILED (their keys held) do not keep it calling for ever."""
from __future__ import annotations

import pytest

from delayq.access.grants import Client, Permission
from delayq.client.gen.delayq_thrift import ttypes
from delayq.clock import SYSTEM_CLOCK
from delayq.nodes.front import admin
from delayq.nodes.front.access import Access
from delayq.nodes.front.errors import CallAnswers
from delayq.nodes.metrics import Metrics
from delayq.store.maintenance import RedriveBatch
from delayq.testing.fakes import Clients, call_as


def calls(monkeypatch, redriven_per_batch: int) -> admin.AdminCalls:
    """Admin calls whose store finds full batches of FAILED tasks without end, redriving so many of each."""
    def redrive(engine, f, now_ms, batch, after):
        n = 0
        while True:
            ids = [f"t{n + i:06d}" for i in range(batch)]
            n += batch
            yield RedriveBatch(redriven=tuple(ids[:redriven_per_batch]),
                               held=tuple((t, "holder") for t in ids[redriven_per_batch:]), read=batch, last=ids[-1])
    monkeypatch.setattr(admin.maintenance, "redrive", redrive)
    root = Client("root", "digest", grants=frozenset({(Permission.ADMIN, "*")}))
    access = Access(Clients(root), Metrics(), enabled=True)  # type: ignore[arg-type]
    access.load()
    call_as("root")
    return admin.AdminCalls(access, CallAnswers(Metrics()), SYSTEM_CLOCK, None, None,  # type: ignore[arg-type]
                            cluster_info=lambda: ttypes.ClusterInfo())


@pytest.mark.parametrize("after, redriven, more", [(None, 0, False), (None, 1, True), ("", 0, True), ("t0", 0, True)])
def test_more_is_told_to_a_paging_client_always_and_to_one_that_does_not_page_only_after_progress(
        monkeypatch, after, redriven, more):
    answer = calls(monkeypatch, redriven).redrive(ttypes.RedriveFilter(topic="t", afterTaskId=after))
    assert (answer.redriven, answer.more) == (redriven * admin.REDRIVE_BATCHES, more)
    assert answer.lastTaskId == f"t{admin.REDRIVE_BATCH * admin.REDRIVE_BATCHES - 1:06d}"
