"""The hooks that make a failed test say more than its assertion (tests/conftest.py uses them).

- Each failed test's report ends with every node's WARNING/ERROR lines and tracebacks logged since
  the test began, and whether it still runs (delayq.testing.process.Node.troubles): in CI the node
  logs are out of reach.
- It also lists when this test process itself stopped running meanwhile
  (delayq.testing.stalls.StallWatch): a timing test stamps arrivals on its own threads, so a pause
  of its own reads as lateness of the scheduler's.
- Between two test modules the process collects and freezes what it holds (gc.freeze), so that a
  full collection inside a test walks only what was made since.
"""
from __future__ import annotations

import gc
import time

import pytest

from delayq.testing import process
from delayq.testing.process import now_ms
from delayq.testing.stalls import StallWatch

_BEGAN_MS = pytest.StashKey[int]()
_MODULE = pytest.StashKey[object]()
_STALLS = StallWatch()


def pytest_configure(config: pytest.Config) -> None:
    _STALLS.start()


def pytest_unconfigure(config: pytest.Config) -> None:
    _STALLS.stop()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    # Without the freeze, a full collection over everything the suite had made paused this
    # process for 1,010 ms inside the in-flight handover test, and its collector stamped a second
    # of arrivals late (the stall watch saw it).
    module = getattr(item, "module", None)
    if item.session.stash.get(_MODULE, None) is not module:
        item.session.stash[_MODULE] = module
        gc.collect()
        gc.freeze()
    item.stash[_BEGAN_MS] = now_ms()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    report = outcome.get_result()
    began = item.stash.get(_BEGAN_MS, None)
    if not report.failed or began is None:
        return
    sections = []
    for node in dict.fromkeys(process.STARTED):
        said = node.troubles(began)
        if node.spawned_ms >= began or said:
            sections.append(f"{node.node_id} ({node.endpoint}): {node.status()}" +
                            "".join(f"\n  {line}" for line in said))
    if sections:
        report.sections.append(("delayq nodes", "\n".join(sections)))
    paused = _STALLS.during(began, now_ms())
    if paused:
        report.sections.append(("this test process paused", "\n".join(
            f"{time.strftime('%H:%M:%S', time.localtime(s.at_ms / 1000))}.{s.at_ms % 1000:03d}: {s.ms} ms, {s.what}"
            for s in paused)))
