"""Pruner: keeps the history tables and the audit log to their retention without an operator.

Every node runs one; each `interval_ms` (and once soon after start, so that a new database gets
its days ahead at once) it runs a retention pass (delayq.store.retention.RetentionStore.prune).
One node at a time does the work: the others find the MySQL named lock taken and skip the pass.
A pass that fails (MySQL unreachable, a DDL that waited too long for a transaction on its table)
is logged and tried again at the next interval; nothing depends on it in the meantime but the
tables' size, and the days made ahead (DELAYQ_RETENTION_AHEAD_DAYS) cover missed passes.

Thread: one, owned here.
"""
from __future__ import annotations

import logging

import sqlalchemy.exc

from delayq.clock import Clock
from delayq.config import RetentionSettings
from delayq.errors import Unavailable
from delayq.nodes.threads import NodeThread
from delayq.store.retention import PassReport, RetentionStore

log = logging.getLogger(__name__)

FIRST_PASS_S = 5.0      # after start: the node is busy loading its shards before that


class Pruner(NodeThread):
    name = "pruner"

    def __init__(self, store: RetentionStore, settings: RetentionSettings, clock: Clock):
        super().__init__()
        self._store, self._settings, self._clock = store, settings, clock
        self.last: PassReport | None = None

    def _run(self) -> None:
        wait = FIRST_PASS_S
        while not self._stop.wait(wait):
            wait = self._settings.interval_ms / 1000.0
            self.run_once()

    def run_once(self) -> PassReport | None:
        s = self._settings
        try:
            report = self._store.prune(s.days, self._clock.now_ms(), s.ahead_days, s.batch, audit_days=s.audit_days)
        except Unavailable as e:
            # Also a DDL's lock wait timeout behind a long transaction on its table (1205).
            log.warning("retention pass stopped, tried again in %d s: %s", s.interval_ms // 1000, e)
            return None
        except (LookupError, ValueError) as e:
            log.error("retention pass impossible: %s", e)       # a table not partitioned as delayq makes it
            return None
        except sqlalchemy.exc.SQLAlchemyError as e:
            # A named lock holds on one server only: on Galera, nodes writing to two members may both
            # run a pass, and the second's DDL finds the partition gone or made. The next pass replans.
            log.warning("retention pass stopped by MySQL, tried again in %d s: %s", s.interval_ms // 1000,
                        getattr(e, "orig", e))
            return None
        if not report.skipped and (report.dropped or report.deleted_tasks):
            log.info("retention pass: dropped %s, deleted %d archived tasks and %d attempts of topics kept "
                     "for less", report.dropped or "no partition", report.deleted_tasks, report.deleted_attempts)
        self.last = report
        return report
