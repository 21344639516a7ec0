"""FreezePoint: for fault tests only, the node stops itself (SIGSTOP) inside a claim's transaction.

A node can freeze at any instruction (a GC pause, swapping, a VM migration); the one that costs its
successors most is inside a claim, between the statement that locked the shard and task rows and
the commit. A pause at a random instant lands there too rarely to test, so with
DELAYQ_FREEZE_IN_CLAIM_FILE set, the claim calls this once it holds its locks: if the file exists,
it is removed and the process stops, and whoever created it continues it (SIGCONT) later.

    store = TaskStore(engine, locked=FreezePoint(Path("/tmp/freeze-n2")))
    # elsewhere: touch /tmp/freeze-n2; the node's next claim of some task stops the node

No thread: it runs on the claiming thread that holds the locks.
"""
from __future__ import annotations

import logging
import os
import signal
from pathlib import Path

log = logging.getLogger(__name__)


class FreezePoint:
    def __init__(self, flag: Path):
        self._flag = flag

    def __call__(self) -> None:
        try:
            self._flag.unlink()
        except FileNotFoundError:
            return
        log.warning("stopping this process inside a claim's transaction (%s was there)", self._flag)
        os.kill(os.getpid(), signal.SIGSTOP)
