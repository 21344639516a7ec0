"""Retention of the history tables: which day partitions to add and drop, and which topics' rows
to delete row by row. Pure, no I/O (delayq.store.retention runs the SQL).

The execlog and the backlog are partitioned by day (RANGE on a BIGINT of epoch milliseconds,
UTC): partition `p20261127` holds the rows whose time is before 2026-11-28 00:00 UTC, and the
last partition, `pmax`, everything later. The first partition also holds whatever is older than
its day (a range partition has no lower bound), so a database migrated with rows keeps them all
in its first partition until that day is past retention.

    existing:  p20261101 ... p20261127 p20261128 pmax          now 2026-11-27 10:00, ahead 2, keep 7
    plan:      drop p20261101 .. p20261119 (every row older than 2026-11-20 10:00)
               add  p20261129 (split out of pmax, which is empty: nothing is due or finished there)

A partition is dropped once its whole day is older than the longest retention (the default's or
any topic's): dropping is O(1) whatever the rows. Topics kept for less than that lose their rows
by primary key, in bounded batches, once each row is past the topic's retention. So a row is
kept at least its topic's retention, and at most a day longer (the partition's day) when its
topic has the longest.
"""
from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

DAY_MS = 86_400_000
TAIL = "pmax"                       # VALUES LESS THAN MAXVALUE: never dropped, split as days come
_DAY_NAME = re.compile(r"p(\d{8})")
_EPOCH = datetime.date(1970, 1, 1)


def day_of(ms: int) -> int:
    """The UTC day (days since 1970-01-01) of an instant in epoch milliseconds."""
    return ms // DAY_MS


def day_name(day: int) -> str:
    """The partition holding day `day`: p + its date, YYYYMMDD."""
    return "p" + (_EPOCH + datetime.timedelta(days=day)).strftime("%Y%m%d")


def named_day(name: str) -> int | None:
    """The day a partition's name says it holds; None for a name of another form (pmax)."""
    m = _DAY_NAME.fullmatch(name)
    if not m:
        return None
    try:
        return (datetime.datetime.strptime(m.group(1), "%Y%m%d").date() - _EPOCH).days
    except ValueError:
        return None


@dataclass(frozen=True)
class Partition:
    """One range partition as MySQL lists it: rows with a value below `below_ms` (None: MAXVALUE)."""
    name: str
    below_ms: int | None
    rows: int = 0                   # MySQL's estimate (information_schema), for reports only


def day_partition(day: int) -> Partition:
    return Partition(day_name(day), (day + 1) * DAY_MS)


@dataclass(frozen=True)
class PartitionPlan:
    add: tuple[Partition, ...] = ()     # split out of the tail, in order
    drop: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.add or self.drop)


def plan(existing: Sequence[Partition], now_ms: int, keep_days: int, ahead_days: int) -> PartitionPlan:
    """Partitions to add so that every day up to `ahead_days` after today has its own, and to drop
    because every row they can hold is older than keep_days (0: keep everything).

    Refuses a table whose last partition is not the MAXVALUE tail (ValueError): a row past the last
    bound would fail to insert, so delayq never creates such a table and never works on one."""
    if not existing or existing[-1].below_ms is not None:
        raise ValueError(f"the last partition must be {TAIL} (VALUES LESS THAN MAXVALUE), found "
                         f"{[p.name for p in existing][-3:]}")
    bounded = existing[:-1]
    today = day_of(now_ms)
    # Days not yet covered, from the first past the last bound: after an idle spell the first one
    # added (today's) also takes what the tail gathered meanwhile, so nothing is dropped early.
    first_new = today if not bounded else max(today, day_of(bounded[-1].below_ms or 0))
    add = tuple(day_partition(d) for d in range(first_new, today + ahead_days + 1))
    if keep_days <= 0:
        return PartitionPlan(add, ())
    # Once the additions are made, today's partition exists and lies past the cutoff: the table
    # always keeps one bounded partition to split the tail from.
    cutoff = now_ms - keep_days * DAY_MS
    drop = tuple(p.name for p in bounded if p.below_ms is not None and p.below_ms <= cutoff)
    return PartitionPlan(add, drop)


@dataclass(frozen=True)
class Retention:
    """How many days each topic's history is kept: `default_days` (DELAYQ_RETENTION_DAYS) unless
    the topic has an override (`delayq retention set`). 0 days: kept for ever."""
    default_days: int
    overrides: Mapping[str, int] = field(default_factory=dict)

    def days(self, topic: str) -> int:
        return self.overrides.get(topic, self.default_days)

    @property
    def longest(self) -> int:
        """What whole partitions are kept for: 0 (for ever) if any topic is kept for ever."""
        every = [self.default_days, *self.overrides.values()]
        return 0 if 0 in every else max(every)

    def shorter(self, topics: Iterable[str]) -> list[tuple[str, int]]:
        """(topic, days) of the topics kept for less than the longest: their rows go one by one."""
        longest = self.longest
        return sorted((t, d) for t in set(topics) | set(self.overrides)
                      if (d := self.days(t)) > 0 and (longest == 0 or d < longest))
