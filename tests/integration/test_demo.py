"""`delayq demo`, as the Quickstart runs it, against a real node: its tasks fire and finish, the
flaky one after a retry, and a task some earlier run left in the topic `demo` neither counts as one
of them nor fails the demo."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from conftest import wait_until
from delayq.client import CallbackService, TaskSpec, TaskStatus

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_the_demo_counts_its_own_tasks_and_finishes_one_left_by_an_earlier_run(node):
    with node.client() as c:
        c.registerService(CallbackService(topic="demo", ttrMs=10_000, maxRetries=2, backoff="fixed",
                                          retryBackoffMs=1000))
        left = c.submit(TaskSpec(topic="demo", taskId="demo-1-0", delayMs=0, payload=b"left behind")).taskId
    out = subprocess.run([sys.executable, "-m", "delayq.ops.cli", "demo", "--endpoint", node.endpoint, "--tasks", "3",
                          "--spread-ms", "500", "--timeout", "60"], env=node.env, capture_output=True, text=True,
                         timeout=90, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines()[-1] == "3/3 tasks finished"
    # Its first attempt may have had no queue to go to yet: whichever attempt the demo met.
    assert re.search(rf"fired {left} attempt \d+: not one of this demo's tasks \(finished\)", out.stdout), out.stdout
    with node.client() as c:
        wait_until(lambda: c.get(left).status == TaskStatus.FINISHED, 10, what="the task left behind to finish")
