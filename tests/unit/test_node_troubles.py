"""What a failed test reports of a node's log (delayq.testing.process.Node.troubles)."""
from __future__ import annotations

import time

from delayq.testing.process import Node


def stamp(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) + ",000"


def test_only_the_warnings_errors_and_tracebacks_logged_since_the_test_began(tmp_path):
    began = 1_800_000_000_000
    log = tmp_path / "n1.log"
    log.write_text("\n".join([
        f"{stamp(began - 60_000)} WARNING delayq.x [t] an old warning",
        f"{stamp(began - 60_000)} INFO delayq.x [t] stopping",
        "Exception in thread prompt-releaser:",
        "Traceback (most recent call last):",
        "OSError: an old error",
        f"{stamp(began + 1000)} INFO delayq.x [t] fine",
        f"{stamp(began + 2000)} ERROR delayq.x [t] a new error",
        f"{stamp(began + 3000)} INFO delayq.x [t] fine again",
        "Exception in thread bulk-releaser:",
        "Traceback (most recent call last):",
        "OSError: a new crash",
    ]) + "\n")
    node = Node({"DELAYQ_NODE_ID": "n1", "DELAYQ_PORT": "1"}, log)
    said = node.troubles(began)
    assert [line.split(" ", 3)[-1] if line[:4].isdigit() else line for line in said] == [
        "delayq.x [t] a new error", "Exception in thread bulk-releaser:", "Traceback (most recent call last):",
        "OSError: a new crash"]
    assert node.status() == "not started"
