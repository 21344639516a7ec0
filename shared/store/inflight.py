"""maxInFlight, enforced inside a claim: a topic's attempts in flight (READY, RUNNING) across the
cluster never exceed its cap, whichever nodes claim, die or take over shards.

Within the claim's transaction, the service rows of the capped topics in the batch are locked
(FOR UPDATE, in topic order, so two claims never wait on each other in a cycle), which serialises
the claims of a capped topic across nodes; only then are their attempts in flight counted. The
count is the transaction's first consistent read (the shard check and the service rows are locking
reads, which take no snapshot), so under REPEATABLE READ its snapshot is taken after the locks and
sees every claim committed before them. Each topic keeps its earliest tasks up to its room; the rest
are deferred: not claimed, still DELAY, back to memory.
"""
from __future__ import annotations

from typing import Mapping, NamedTuple, Sequence

from sqlalchemy import Connection

from delayq import tables
from delayq.lifecycle import Status
from delayq.store.sqltext import marks
from delayq.store.values import Entry

SERVICE, TASK = tables.callback_service, tables.task


class Room(NamedTuple):
    in_flight: int      # attempts in flight before this claim
    left: int           # slots left once this claim's kept tasks are dispatched


def trim(conn: Connection, entries: Sequence[Entry], caps: Mapping[str, int]
         ) -> tuple[list[Entry], list[Entry], dict[str, Room]]:
    """(kept, deferred, room per capped topic) for a batch about to be claimed."""
    capped = sorted({e.topic for e in entries if e.topic in caps})
    if not capped:
        return list(entries), [], {}
    current: dict[str, int | None] = dict(conn.exec_driver_sql(
        f"SELECT topic, max_in_flight FROM {SERVICE.name} WHERE topic IN ({marks(len(capped))}) "
        "ORDER BY topic FOR UPDATE", tuple(capped)).all())
    limited = [t for t in capped if current.get(t) is not None]     # a cap lifted meanwhile is gone
    counts: dict[str, int] = dict(conn.exec_driver_sql(
        f"SELECT topic, COUNT(*) FROM {TASK.name} WHERE topic IN ({marks(len(limited))}) AND status IN (%s, %s) "
        "GROUP BY topic", (*limited, int(Status.READY), int(Status.RUNNING))).all()) if limited else {}
    kept, deferred, rooms = [], [], {}
    by_topic: dict[str, list[Entry]] = {}
    for e in entries:
        if e.topic in current and current[e.topic] is not None:
            by_topic.setdefault(e.topic, []).append(e)
        else:
            kept.append(e)
    for topic, mine in by_topic.items():
        in_flight = counts.get(topic, 0)
        cap = current[topic]
        assert cap is not None        # by_topic holds the capped topics only
        room = max(0, cap - in_flight)
        mine.sort(key=lambda e: e.due_ms)
        kept += mine[:room]
        deferred += mine[room:]
        rooms[topic] = Room(in_flight, room - min(room, len(mine)))
    return kept, deferred, rooms
