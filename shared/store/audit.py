"""AuditLog: job_audit, written by the nodes (admin calls, cancel, reschedule) and by the `delayq`
command (operators' changes), read by `delayq audit`."""
from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine, select

from delayq import tables
from delayq.db import unavailable_on_failure

AUDIT = tables.audit


@dataclass(frozen=True)
class Entry:
    at_ms: int
    actor: str
    address: str
    action: str
    target: str
    outcome: str
    id: int = 0             # its row's id, as read (a page of the log continues before it)


def _fit(text: str, size: int) -> str:
    return text if len(text) <= size else text[:size - 1] + "…"


class AuditLog:
    def __init__(self, engine: Engine):
        self._engine = engine

    def record(self, entry: Entry) -> None:
        with unavailable_on_failure(), self._engine.begin() as conn:
            conn.execute(AUDIT.insert().values(
                at_ms=entry.at_ms, actor=_fit(entry.actor, 128), address=_fit(entry.address, 128),
                action=_fit(entry.action, 32), target=_fit(entry.target, 255), outcome=_fit(entry.outcome, 64)))

    def list(self, *, actor: str | None = None, action: str | None = None, since_ms: int | None = None,
             until_ms: int | None = None, limit: int = 100, before_id: int | None = None) -> list[Entry]:
        """Newest first; with before_id, those older than that row (a keyset page)."""
        q = select(AUDIT).order_by(AUDIT.c.id.desc()).limit(limit)
        if actor:
            q = q.where(AUDIT.c.actor == actor)
        if action:
            q = q.where(AUDIT.c.action == action)
        if since_ms is not None:
            q = q.where(AUDIT.c.at_ms >= since_ms)
        if until_ms is not None:
            q = q.where(AUDIT.c.at_ms < until_ms)
        if before_id is not None:
            q = q.where(AUDIT.c.id < before_id)
        with unavailable_on_failure(), self._engine.connect() as conn:
            return [Entry(r.at_ms, r.actor, r.address, r.action, r.target, r.outcome, r.id) for r in conn.execute(q)]
