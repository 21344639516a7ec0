"""The values the store takes and gives: plain, immutable, no SQL in them."""
from __future__ import annotations

import enum
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping, NamedTuple, Sequence

from delayq.lifecycle import Status


class Entry(NamedTuple):
    """A DELAY task's place in time: what a window scan returns and the DelayQueue holds."""
    task_id: str
    shard_id: int
    due_ms: int
    fire_ms: int | None = None     # when to hand it out, if not at due_ms (catch-up pacing)
    topic: str = ""                # whose flow controls and fair share it is under

    @property
    def at_ms(self) -> int:
        return self.due_ms if self.fire_ms is None else self.fire_ms


class CancelOutcome(enum.Enum):
    CANCELLED = "CANCELLED"                     # cancelled now, or earlier
    ALREADY_DISPATCHED = "ALREADY_DISPATCHED"   # fired (or finished) first
    NOT_FOUND = "NOT_FOUND"


class KeyMode(enum.Enum):
    """What a submit does when a live task of its topic holds its key (delayq.store.dedup)."""
    ALLOW = 0                       # no dedup: the task does not hold its key
    REJECT = 1
    REPLACE = 2
    REPLACE_PAYLOAD_KEEP_DUE = 3
    KEEP_IF_ACTIVE = 4


class Outcome(enum.Enum):
    """What a submit did with its task."""
    CREATED = 1
    REPLACED = 2                    # a waiting task of the key was replaced (or given this payload)
    DEDUPLICATED = 3                # nothing written: the live task of the key, or the same id before


class NewTask(NamedTuple):
    task_id: str
    topic: str
    shard_id: int
    due_ms: int
    payload: bytes
    spec_hash: bytes
    max_retries: int
    ttr_ms: int
    created_ms: int
    client_id: bool = True      # chosen by the client (may exist already); False: generated here, unique
    key: bytes | None = None
    tags: bytes | None = None   # comma-separated, as stored (delayq.nodes.validation.check_tags)
    traceparent: str | None = None
    mode: KeyMode = KeyMode.ALLOW
    max_debounce_ms: int | None = None

    @property
    def holds_key(self) -> bool:
        return self.key is not None and self.mode is not KeyMode.ALLOW


class Submitted(NamedTuple):
    task_id: str                # the task that will fire: this one, or the key's live task
    shard_id: int
    due_ms: int
    created: bool               # a row was written for this submit
    outcome: Outcome = Outcome.CREATED
    replaced: str | None = None     # the waiting task this one cancelled (REPLACE)


@dataclass(frozen=True)
class Claimed:
    """A task this node won the right to dispatch, as attempt number `attempt`."""
    task_id: str
    topic: str
    shard_id: int
    due_ms: int
    attempt: int
    payload: bytes
    ttr_ms: int
    max_retries: int
    key: bytes | None = None
    tags: bytes | None = None       # comma-separated
    traceparent: str | None = None


class KeyWait(NamedTuple):
    """A KEEP_IF_ACTIVE task a claim left DELAY: an attempt of its (topic, key) is in flight."""
    entry: Entry
    topic: str
    key: bytes


class Claim(NamedTuple):
    """What a claim won (`claimed`), the shards it found no longer ours (`fenced`), for topics
    with a maxInFlight the tasks it left DELAY to keep to it (`deferred`) and each one's room
    (delayq.store.inflight.Room: in flight before, slots left), and the KEEP_IF_ACTIVE tasks it
    left DELAY because their key has an attempt in flight (`waits`, delayq.store.oneflight)."""
    claimed: list[Claimed]
    fenced: list[int]
    deferred: Sequence[Entry] = ()
    rooms: Mapping[str, tuple[int, int]] = MappingProxyType({})
    waits: Sequence[KeyWait] = ()


@dataclass(frozen=True)
class Transition:
    """The outcome of a result or timeout: applied or not, and the task's state after it."""
    applied: bool
    status: Status
    shard_id: int = -1
    due_ms: int | None = None
    topic: str = ""
    freed_key: bytes | None = None      # the KEEP_IF_ACTIVE key whose attempt in flight ended


@dataclass(frozen=True)
class Touched:
    """A touch's answer: whether a cancel was asked while the attempt ran, and its deadline now."""
    cancelled: bool
    deadline_ms: int
