"""NodeRuntime: builds a scheduling node's parts from Settings, and starts and stops them in order.

It owns no logic: each part is its own class with its own thread (see their docstrings). Start
order is MySQL (ownership) -> publisher -> recorder -> dispatcher -> loader -> Thrift server; stop
is the reverse, letting unconfirmed publishes settle first so nothing is left half done.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import secrets
import time

from kazoo.exceptions import KazooException, NoNodeError

import pika
from thrift.protocol import TBinaryProtocol

from shared.clock import Clock
from shared.skew import ReferenceClock
from shared.coordination import ZkSession
from shared.metrics import Metrics
from shared.zkpaths import AssignmentDoc, ZkPaths, candidate_member, candidate_order, member_name, node_of
from master.election import Election
from master.rebalancer import Rebalancer
from master.shardtable import ShardTable
from shared.config import Settings
from shared import schema
from shared.db import make_engine, unavailable_on_failure
from shared.errors import ConfigError, Unavailable
from shared.gen.delayq_thrift import DelayScheduler, ttypes
from shared.publisher import ConfirmedPublisher
from shared.validation import Limits
from nodes.clockcheck import ClockCheck
from nodes.delayqueue import DelayQueue
from nodes.deadletters import DeadLetterer
from nodes.deadlines import Deadlines
from nodes.dispatcher import Dispatcher
from nodes.exchanges import ExchangeGuard
from nodes.feedback import FeedbackConsumer
from nodes.follower import AssignmentFollower
from nodes.membership import Membership
from nodes.handler import Handler
from nodes import hints
from nodes.http import HealthServer
from nodes.lanes import CallPool
from nodes.loader import Loader
from nodes.outages import OutageGrace
from nodes.ownership import Ownership
from nodes.recorder import Recorder
from nodes.results import ResultApplier
from nodes.server import ThriftServer
from nodes.services import ServiceRegistry
from nodes.store import TaskStore
from nodes.submits import SubmitBatcher

log = logging.getLogger(__name__)


def amqp_parameters(url: str, timeout_ms: int) -> pika.URLParameters:
    params = pika.URLParameters(url)
    timeout = max(1.0, timeout_ms / 1000.0)
    params.socket_timeout = timeout
    params.stack_timeout = timeout * 2
    params.blocked_connection_timeout = max(30.0, timeout)
    params.connection_attempts = 1
    params.heartbeat = 30
    return params


class NodeRuntime:
    def __init__(self, settings: Settings, clock: Clock | None = None):
        s = self.settings = settings
        # Due times follow MySQL's clock, which every node shares, not this machine's.
        self.reference = ReferenceClock()
        self.clock = clock = clock or self.reference
        self.metrics = Metrics()
        self.engine = make_engine(s.mysql)
        self.clockcheck = ClockCheck(self.engine, self.reference, self.metrics,
                                     interval_ms=s.scheduling.clock_check_ms,
                                     max_offset_ms=s.scheduling.max_clock_offset_ms)
        # Submits, one group at a time (on the Thrift I/O thread, or the SubmitBatcher's while MySQL
        # is slow): a second connection for a reconnect at most.
        self.writes = make_engine(dataclasses.replace(s.mysql, pool_size=2), autocommit=True)
        self.store = TaskStore(self.engine, autocommit=self.writes)
        self.services = ServiceRegistry(self.engine, clock)
        self.queue = DelayQueue(clock, cap=s.scheduling.memory_cap)
        self.ownership = Ownership(s.node.node_id)
        self.deadletters: DeadLetterer | None = None
        self.results = ResultApplier(self.store, self.queue, self.ownership, self.services, clock, self.metrics,
                                     on_failed=lambda: self.deadletters and self.deadletters.wake())
        self.recorder = Recorder(self.store, self.queue, self.ownership, self.results, self.metrics, clock,
                                 publish_retry_ms=s.scheduling.publish_retry_ms,
                                 gather_ms=s.scheduling.record_gather_ms)
        amqp = amqp_parameters(s.amqp.url, s.amqp.timeout_ms)
        self.publisher = ConfirmedPublisher(
            amqp, self.recorder.on_outcome,
            max_in_flight=s.amqp.max_in_flight, confirm_timeout=s.amqp.confirm_timeout_ms / 1000.0,
            exchanges=())        # declared by the exchange guard, never on the publishing channel
        # Which exchanges may be published to, checked on connections of its own.
        self.exchanges = ExchangeGuard(amqp, recheck_s=s.amqp.exchange_recheck_ms / 1000.0, known=lambda: {s.amqp.exchange} | {
            e for svc in self.services.all() for e in (svc.exchange, svc.dead_letter_exchange) if e})
        self.publisher.on_channel_closed = self.exchanges.forget
        self.deadletters = DeadLetterer(self.store, self.ownership, self.services, self.publisher, self.exchanges,
                                        self.metrics, clock)
        self.recorder.dead_letters = self.deadletters.on_outcome
        # No time-out while delayq's own dependencies are down, nor for a grace after.
        self.grace = OutageGrace(clock, s.scheduling.outage_grace_ms, probes={
            "rabbitmq": lambda: self.publisher.ready,
            "zookeeper": lambda: self.zk is None or self.zk.state == "connected"})
        self.hints = hints.HintReader(make_engine(dataclasses.replace(s.mysql, pool_size=1), autocommit=True),
                                      self.queue, self.ownership, poll_ms=s.scheduling.hint_poll_ms)
        self.deadlines = Deadlines(self.store, self.results, self.metrics, clock, self.grace)
        self.dispatcher = Dispatcher(self.store, self.queue, self.ownership, self.services, self.publisher,
                                     self.results, self.metrics, clock, batch=s.scheduling.dispatch_batch,
                                     default_exchange=s.amqp.exchange, lead_ms=s.scheduling.claim_lead_ms,
                                     claimers=s.scheduling.write_concurrency,
                                     lease_ms=s.scheduling.claim_lease_ms, guard=self.exchanges,
                                     deadlines=self.deadlines,
                                     hold=self.recorder.hold)
        self.loader = Loader(self.store, self.queue, self.ownership, self.results, clock,
                             window_ms=s.scheduling.window_ms, interval_ms=s.scheduling.scan_interval_ms,
                             cap=s.scheduling.memory_cap, full_scan_ms=s.scheduling.full_scan_ms,
                             catchup_rate=s.scheduling.catchup_rate,
                             catchup_grace_ms=s.scheduling.catchup_grace_ms, grace=self.grace)
        self.dispatcher.on_fenced = self.loader.rescan
        self.feedback = FeedbackConsumer(amqp, lambda *args: self.results.apply(*args, move_retry=True),
                                         self.metrics, cluster=s.node.cluster)
        self.handler = Handler(self.store, self.services, self.queue, self.ownership, clock, self.results,
                               self.metrics, limits=Limits(s.limits.max_payload_bytes, s.limits.max_horizon_ms),
                               max_batch=s.limits.max_batch, window_ms=s.scheduling.window_ms,
                               default_exchange=s.amqp.exchange, check_exchange=self.exchanges.check,
                               hint=lambda entries: hints.write(self.writes, entries),
                               cluster_info=self.cluster_info)
        # Strings up to the frame cap are read, and the handler refuses what is too large. A list
        # longer than the largest batch is refused while decoding, before anything is built (a frame
        # of 8 MiB could claim millions of tasks), and the SubmitBatcher answers it as too large.
        protocol = TBinaryProtocol.TBinaryProtocolAcceleratedFactory(
            string_length_limit=s.limits.max_frame_bytes, container_length_limit=s.limits.max_batch)
        self.submits = SubmitBatcher(self.handler.submit_many, protocol, max_batch=s.limits.max_batch)
        self.calls = CallPool(DelayScheduler.Processor(self.handler), protocol, threads=s.limits.thrift_threads)
        self.server = ThriftServer({"submit": self.submits, "submitBatch": self.submits}, self.calls,
                                   s.node.host, s.node.port, max_connections=s.limits.thrift_workers,
                                   max_frame=s.limits.max_frame_bytes, idle_timeout=s.limits.idle_timeout_ms / 1000.0,
                                   frame_timeout=s.limits.frame_timeout_ms / 1000.0,
                                   first_frame_timeout=s.limits.first_frame_timeout_ms / 1000.0,
                                   closed=lambda reason: self.metrics.thrift_closed.labels(reason).inc())
        self._epoch = 0
        self.zk: ZkSession | None = None
        if s.zk.enabled:
            self._build_cluster(s)
        self.metrics.gauges(self._gauges, self._counters)
        self.http = HealthServer(s.http.host, s.http.port, self.metrics, self._alive, self._ready, self._detail)

    def _build_cluster(self, s: Settings) -> None:
        """ZooKeeper mode: membership, the assignment follower, and the master role (election and
        rebalancer), all on one ZooKeeper session. Subscription order matters: the member name
        exists before the follower and the election use it."""
        self.paths = ZkPaths(s.node.cluster)
        self.zk = ZkSession(s.zk)
        endpoint = f"{s.node.advertise_host}:{s.node.port}"
        self.membership = Membership(self.zk, self.paths, s.node.node_id, endpoint, self._stats)
        self.follower = AssignmentFollower(self.zk, self.paths, self.ownership, lambda: self.membership.member,
                                           self.store.shard_ids)
        self.rebalancer = Rebalancer(self.zk, self.paths, ShardTable(self.engine, self.clock), self.clock,
                                     lambda: self.membership.member)
        self.election = Election(self.zk, self.paths, lambda: self.membership.member, self.rebalancer.set_leader)
        self.zk.subscribe(lambda state, _sid: state != "connected" and self.metrics.errors.labels("zookeeper").inc())

    def _stats(self) -> dict:
        return {"shards": len(self.ownership.shards()), "queue": len(self.queue),
                "clock_offset_ms": self.clockcheck.offset_ms, "held_topics": dict(self.dispatcher.held_topics)}

    def start(self, wait_s: float = 60.0) -> None:
        self.http.start()
        if self.zk is None:
            self._take_shards(wait_s)
        else:
            self._wait_for_mysql(wait_s)
            self.rebalancer.start()
            self.zk.start(timeout=min(wait_s, 15.0))
        try:
            self.clockcheck.check_now()     # before the first task is due by this clock
        except Unavailable as e:
            log.warning("could not read MySQL's clock yet (%s): nothing is claimed until MySQL answers", e)
        self.clockcheck.start()
        self.exchanges.start()
        self.publisher.start()
        if not self.publisher.wait_ready(min(wait_s, 10.0)):
            log.warning("RabbitMQ not reachable yet: dispatch starts once it is")
        self.recorder.start()
        self.deadlines.start()
        self.hints.start()
        self.dispatcher.start()
        self.loader.start()
        self.deadletters.start()
        self.feedback.start()
        self.submits.start()
        self.calls.start()
        self.server.start()
        log.info("node %s ready: %d shards at epoch %d, window %d ms", self.settings.node.node_id,
                 len(self.ownership.shards()), self._epoch, self.settings.scheduling.window_ms)

    def _check_schema(self) -> None:
        with unavailable_on_failure(), self.engine.connect() as conn:
            have, want = schema.current_version(conn), len(schema.migrations())
        if have < want:
            raise ConfigError(f"the database schema is at version {have}, this node needs {want}: "
                              "run `delayq db migrate`")

    def _wait_for_mysql(self, wait_s: float) -> list[int]:
        """Wait until MySQL answers with an up-to-date schema and the cluster's shards; load the
        services. Returns the shard ids."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                self._check_schema()
                shards = self.store.shard_ids()
                if not shards:
                    raise ConfigError("the database has no shards: run `delayq db init` first")
                self.services.refresh()
                return shards
            except Unavailable as e:
                if time.monotonic() > deadline:
                    raise
                log.warning("waiting for MySQL: %s", e)
                time.sleep(1.0)

    def _take_shards(self, wait_s: float) -> None:
        """Standalone mode: this node owns every shard (at a new epoch, fencing any previous owner)."""
        shards = self._wait_for_mysql(wait_s)
        # Like a cluster member, a process is its own owner: a restarted node does not inherit
        # (and never mistakes for its own) what its former self claimed.
        owner = member_name(self.settings.node.node_id, secrets.randbits(48))
        fence = self.store.take_shards(owner, shards, self.clock.now_ms())
        self._epoch = max(fence.values())
        self.ownership.set(fence, shards, owner=owner)
        log.info("took shards %d-%d at epoch %d", min(shards), max(shards), self._epoch)

    def stop(self, timeout: float = 10.0) -> None:
        self.server.stop()
        self.submits.stop()
        self.calls.stop()
        if self.zk is not None:
            self.rebalancer.stop()
            self.zk.stop()
        self.feedback.stop()
        self.clockcheck.stop()
        self.loader.stop()
        self.dispatcher.stop()
        self.deadlines.stop()
        self.hints.stop()
        self.deadletters.stop()
        deadline = time.monotonic() + timeout
        while self.publisher.in_flight and time.monotonic() < deadline:
            time.sleep(0.05)
        self.publisher.stop()
        self.exchanges.stop()
        self.recorder.stop(max(1.0, deadline - time.monotonic()))
        self.engine.dispose()
        self.writes.dispose()
        self.http.stop()
        log.info("node %s stopped", self.settings.node.node_id)

    # ---- metrics and health -------------------------------------------------------------------

    def _gauges(self) -> dict[str, float]:
        g = {"queue_size": len(self.queue), "shards_owned": len(self.ownership.shards()),
             "unconfirmed_publishes": self.publisher.in_flight, "recorder_backlog": self.recorder.backlog}
        if self.zk is None:
            g.update(assignment_epoch=self._epoch, is_master=1, zookeeper_connected=0)
        else:
            g.update(assignment_epoch=self.follower.epoch, is_master=int(self.election.leader),
                     zookeeper_connected=int(self.zk.state == "connected"))
        try:
            in_flight, overdue = self.store.in_flight(self.ownership.shards(), self.clock.now_ms())
            g.update(in_flight_attempts=in_flight, overdue_attempts=overdue)
        except Unavailable:
            pass     # the scrape still answers; the error shows in delayq_dependency_errors_total
        return g

    def _counters(self) -> dict[str, float]:
        return {"catchup_tasks_total": self.loader.caught_up, "window_scans_total": self.loader.scans}

    def _alive(self) -> dict[str, str | None]:
        threads = {"dispatcher": self.dispatcher, "loader": self.loader, "recorder": self.recorder,
                   "submits": self.submits, "thrift-calls": self.calls, "thrift-io": self.server,
                   "clock-check": self.clockcheck, "deadlines": self.deadlines,
                   "hints": self.hints}
        return {name: None if t.alive else "thread stopped" for name, t in threads.items()}

    def _ready(self) -> dict[str, str | None]:
        checks: dict[str, str | None] = {}
        if self.zk is not None:
            checks["zookeeper"] = None if self.zk.state == "connected" else f"session {self.zk.state}"
            checks["assignment"] = None if self.follower.epoch > 0 else "no assignment received yet"
        else:
            checks["assignment"] = None if self.ownership.shards() else "no shards"
        try:
            self.store.ping()
            checks["mysql"] = None
        except Unavailable as e:
            checks["mysql"] = str(e)
        checks["rabbitmq"] = None if self.publisher.ready else "publisher channel not open"
        return checks

    def _detail(self) -> dict:
        clock = self.clockcheck.describe()
        return {"clock_offset_ms": _ms(self.clockcheck.offset_ms), "held_topics": dict(self.dispatcher.held_topics),
                **({"clock": f"this machine's clock is {clock} MySQL's; due times follow MySQL's"} if clock else {})}

    def cluster_info(self) -> ttypes.ClusterInfo:
        if self.zk is not None:
            return self._zk_cluster_info()
        s = self.settings
        node = s.node.node_id
        shards = sorted(self.ownership.shards())
        return ttypes.ClusterInfo(
            cluster=s.node.cluster, shardCount=len(self.ownership.all_shards()), epoch=self._epoch, master=node,
            nodes=[ttypes.NodeInfo(nodeId=node, endpoint=f"{s.node.advertise_host}:{self.server.port}",
                                   shardCount=len(shards), queueSize=len(self.queue), master=True,
                                   clockOffsetMs=_ms(self.clockcheck.offset_ms),
                                   heldTopics=dict(self.dispatcher.held_topics))],
            assignment={sh: node for sh in shards})

    def _zk_cluster_info(self) -> ttypes.ClusterInfo:
        call, paths = self.zk.call, self.paths
        try:
            members = sorted(call("get_children", paths.nodes))
            candidates = sorted(call("get_children", paths.election), key=candidate_order)
            master = candidate_member(candidates[0]) if candidates else None
            try:
                doc = AssignmentDoc.decode(call("get", paths.assignment)[0])
            except NoNodeError:
                doc = AssignmentDoc(0)
            nodes = []
            for m in members:
                try:
                    info = json.loads(call("get", paths.member(m))[0] or b"{}")
                except NoNodeError:
                    continue
                nodes.append(ttypes.NodeInfo(
                    nodeId=node_of(m), endpoint=info.get("endpoint", ""),
                    shardCount=sum(1 for g in doc.shards.values() if g.member == m),
                    queueSize=len(self.queue) if m == self.membership.member else int(info.get("queue", 0)),
                    master=m == master,
                    clockOffsetMs=_ms(self.clockcheck.offset_ms if m == self.membership.member
                                      else info.get("clock_offset_ms")),
                    heldTopics=dict(self.dispatcher.held_topics) if m == self.membership.member
                    else info.get("held_topics") or {}))
        except KazooException as e:
            raise Unavailable(f"ZooKeeper: {e!r}") from None
        return ttypes.ClusterInfo(
            cluster=self.settings.node.cluster, shardCount=len(doc.shards) or len(self.ownership.all_shards()),
            epoch=doc.epoch, master=node_of(master) if master else None, nodes=nodes,
            assignment={s: node_of(g.member) for s, g in doc.shards.items()})


def _ms(value: float | None) -> int | None:
    return None if value is None else int(round(value))
