"""NewTasks: the one conversion of a submit's TaskSpecs (the IDL's) into checked NewTasks (the
store's): validation (delayq.nodes.validation), the due time by the node's clock, the topic's
service defaults, and the shard each task takes (delayq.nodes.front.placing).

Pure but for its reads of the service registry (in memory) and the shard pick: unit-tested on
fakes. Called by delayq.nodes.front.writes for a whole call or a part of a large one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

from delayq import errors
from delayq.client.gen.delayq_thrift import ttypes
from delayq.nodes.cluster.services import ServiceRegistry
from delayq.nodes.front.placing import Placing
from delayq.nodes.validation import (Limits, ServiceSpec, TaskRequest, check_tags, check_task, due_time, key_mode,
                                    spec_hash)
from delayq.store.values import KeyMode, NewTask


@dataclass(frozen=True)
class SubmitRules:
    """The node's limits on what a submit may hold."""
    limits: Limits
    max_batch: int


class NewTasks:
    def __init__(self, services: ServiceRegistry, placing: Placing, rules: SubmitRules):
        self._services, self._placing, self.rules = services, placing, rules

    def prepare(self, specs: Sequence[ttypes.TaskSpec] | None, batch: bool, now: int,
                ids: Iterator[str], first: int = 0, end: int | None = None) -> list[NewTask]:
        """The new tasks of specs[first:end], checked: the call's own failure is raised (an
        InvalidTask names the field, and in a batch the index). ids: the ids of tasks whose
        client chose none."""
        if batch:
            if not specs:
                raise errors.InvalidTask("tasks", "must hold at least one task")
            if len(specs) > self.rules.max_batch:
                raise errors.InvalidTask("tasks", f"holds {len(specs)} tasks, at most {self.rules.max_batch} allowed")
        services: dict[str, ServiceSpec] = {}      # per topic, looked up once per call
        assert specs is not None        # a single submit comes as [task]; a batch of None was refused above
        limits = self.rules.limits
        checked = []
        for i, spec in enumerate(specs[first:end], first):
            index = i if batch else None
            if spec is None:
                raise errors.InvalidTask("task", "is missing", index)
            mode = spec.onKeyConflict
            req = TaskRequest(spec.topic, spec.taskId, spec.delayMs, spec.dueAtMs, spec.payload, spec.maxRetries,
                              spec.ttrMs, spec.key, spec.tags, spec.traceparent,
                              KeyMode.ALLOW if mode is None else key_mode(mode, index), spec.maxDebounceMs)
            check_task(req, limits, index)
            topic = req.topic
            assert topic is not None        # check_task refuses a task without one
            due = due_time(req, now, limits, index)
            svc = services.get(topic)
            if svc is None:
                svc = services[topic] = self._services.get(topic)
            checked.append((req, topic, due, svc))
        rated = {t for t in services if self._services.controls(t).max_fire_rate is not None}
        shards = self._placing.shards([due for _, _, due, _ in checked], now,
                                      [topic in rated for _, topic, _, _ in checked])
        # Positional (the fields' order): a call builds up to a thousand of them.
        return [NewTask(req.task_id or next(ids), topic, shard, due, req.payload or b"", spec_hash(req),
                        svc.max_retries if req.max_retries is None else req.max_retries,
                        svc.ttr_ms if req.ttr_ms is None else req.ttr_ms, now, req.task_id is not None,
                        None if req.key is None else req.key.encode(), check_tags(req.tags) if req.tags else None,
                        req.traceparent, req.mode, req.max_debounce_ms)
                for (req, topic, due, svc), shard in zip(checked, shards)]
