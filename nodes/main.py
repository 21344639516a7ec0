"""NodeRuntime: builds a scheduling node's parts from Settings, and starts and stops them in order.

It owns no logic: each part is its own class with its own thread (see their docstrings). Start
order is MySQL (ownership) -> publisher -> recorder -> dispatcher -> loader -> Thrift server; stop
is the reverse, letting unconfirmed publishes settle first so nothing is left half done.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import time
from pathlib import Path

from sqlalchemy import Engine
from thrift.protocol import TBinaryProtocol

from delayq import db, schema
from delayq.access.tls import server_context
from delayq.client.gen.delayq_thrift import DelayScheduler
from delayq.clock import Clock
from delayq.config import Settings, check_node
from delayq.db import bound_lock_waits, make_engine, members_of, wait_until_answered
from delayq.errors import Unavailable
from delayq.master.reshard import ReshardJob, Resharder
from delayq.nodes.dispatch import lanes as dispatchlanes
from delayq.nodes.memory import hints
from delayq.nodes.amqp.deadletters import DeadLetterer
from delayq.nodes.amqp.params import amqp_parameters
from delayq.nodes.amqp.exchanges import ExchangeGuard
from delayq.nodes.amqp.publisher import ConfirmedPublisher
from delayq.nodes.amqp.results_consumer import ResultsConsumer
from delayq.nodes.cluster.clockcheck import ClockCheck
from delayq.nodes.cluster.pruner import Pruner
from delayq.nodes.outcomes.deadlines import Deadlines
from delayq.nodes.outcomes.expiry import Expiry
from delayq.nodes.memory.delayqueue import DelayQueue
from delayq.nodes.dispatch.dispatcher import Dispatcher
from delayq.nodes.dispatch.pauses import PauseWatch
from delayq.nodes.dispatch.freeze import FreezePoint
from delayq.nodes.dispatch.wiring import Claims, DispatchSettings, Memory, Outcomes, Publishing
from delayq.nodes.memory.flow import Flow, follow
from delayq.nodes.memory.keyholds import KeyHolds
from delayq.nodes.front.access import Access
from delayq.nodes.front.admin import AdminCalls
from delayq.nodes.front.discovery import DiscoveryCalls
from delayq.nodes.front.bulkcalls import BulkCalls
from delayq.nodes.bulkrunner import BulkRunner, RunnerSettings
from delayq.nodes.front import quotas
from delayq.nodes.front.audit import Audit
from delayq.nodes.front.errors import CallAnswers
from delayq.nodes.front.handler import Handler
from delayq.nodes.front.keycalls import KeyCalls
from delayq.nodes.front.inboxes import CallPool
from delayq.nodes.front.connection import ConnectionLimits
from delayq.nodes.front.handshakes import HandshakeBudget, TlsPort
from delayq.nodes.front.server import ThriftServer
from delayq.nodes.front.service import Service
from delayq.nodes.front.newtasks import NewTasks, SubmitRules
from delayq.nodes.front.placing import Placing
from delayq.nodes.front.submitpath import SubmitGate, SubmitPath
from delayq.nodes.front.submits import SubmitBatcher
from delayq.nodes.front.topics import TopicCalls
from delayq.nodes.console.assembly import ConsolePart, serves_console
from delayq.nodes.http import HealthServer
from delayq.nodes import httpgate
from delayq.nodes.httpgate import HttpGate
from delayq.nodes.front import pages
from delayq.store.clusterkey import ClusterKey
from delayq.nodes.memory.loader import Loader, ScanSettings
from delayq.nodes.metrics import Metrics
from delayq.nodes.outcomes.outages import OutageGrace
from delayq.nodes.probes import Probes
from delayq.nodes.cluster.ownership import Ownership
from delayq.nodes.outcomes.recorder import RecordSettings, Recorder
from delayq.nodes.outcomes.results import Followers, ResultApplier
from delayq.nodes.cluster.services import ServiceRegistry
from delayq.nodes.cluster.skew import ReferenceClock
from delayq.nodes.memory.spread import spreader
from delayq.nodes.cluster.standalone import Standalone
from delayq.nodes.threads import Part
from delayq.nodes.dispatch.unsettled import Unsettled
from delayq.nodes.validation import Limits
from delayq.nodes.cluster.watch import ServicesWatch, Watch
from delayq.nodes.zk.parts import ZkParts
from delayq.store.audit import AuditLog
from delayq.store import bulkbatch
from delayq.store.bulkjobs import BulkJobs
from delayq.store.bykey import KeyRequests
from delayq.store.clients import ClientStore
from delayq.store.connections import NodeConnections
from delayq.store.controls import ControlStore
from delayq.store.deadletters import DeadLetterRows
from delayq.store.epochs import ShardEpochs
from delayq.store.overdue import OverdueRows
from delayq.store.submits import TaskWriter
from delayq.store.requests import TaskRequests
from delayq.store.retention import RetentionStore
from delayq.store.tasks import TaskStore
from delayq.store import versions

log = logging.getLogger(__name__)

POLLERS = 3     # connections kept by the hint reader and the two Watches


class NodeRuntime:
    def __init__(self, settings: Settings, clock: Clock | None = None):
        check_node(settings)
        s = self.settings = settings
        # Due times follow MySQL's clock, which every node shares, not this machine's.
        self.reference = ReferenceClock()
        self.clock = clock = clock or self.reference
        self.metrics = Metrics()
        self.probes = Probes(self)            # reads the parts built below, once the node runs
        # With several MySQL members, all of the node's engines write to the same one.
        members = members_of(s.mysql)
        self.engine = make_engine(s.mysql, members=members)
        self.clockcheck = ClockCheck(self.engine, self.reference, self.metrics,
                                     interval_ms=s.scheduling.clock_check_ms,
                                     max_offset_ms=s.scheduling.max_clock_offset_ms)
        # Submits, one group at a time (on the Thrift I/O thread, or the SubmitBatcher's while MySQL
        # is slow): a second connection for a reconnect at most.
        self.writes = make_engine(dataclasses.replace(s.mysql, pool_size=2), autocommit=True, members=members)
        # Each connection is written down, so that the master can end them should this node
        # freeze inside a transaction, and waits at most a second for a lock another node holds.
        self.connections = NodeConnections(self.engine, s.mysql)
        for engine in (self.engine, self.writes):
            self._bounded(engine)
        freeze = FreezePoint(Path(s.node.freeze_in_claim_file)) if s.node.freeze_in_claim_file else None
        self.store = TaskStore(self.engine, locked=freeze)
        self.overdue = OverdueRows(self.engine)
        self.requests = TaskRequests(self.engine)
        self.epochs = ShardEpochs(self.engine, clock)
        self.services = ServiceRegistry(self.engine, clock)
        self.ownership = Ownership(s.node.node_id)
        self.flow = Flow(self.ownership)      # holds each topic to its controls
        # What memory cannot hold because the shard is another node's goes to that node as hints.
        self.handover = hints.Handover(clock, s.scheduling.window_ms)
        self.queue = DelayQueue(clock, cap=s.scheduling.memory_cap, gate=self.flow, handover=self.handover.give,
                                shards=())
        self.keyholds = KeyHolds(self.queue, clock)    # KEEP_IF_ACTIVE tasks waiting for their key
        amqp = amqp_parameters(s.amqp.url, s.amqp.timeout_ms, s.amqp.ca_file, s.amqp.hosts)
        # Which exchanges may be published to, checked on connections of its own.
        self.exchanges = ExchangeGuard(amqp, recheck_s=s.amqp.exchange_recheck_ms / 1000.0, known=lambda: {s.amqp.exchange} | {
            e for svc in self.services.all() for e in (svc.exchange, svc.dead_letter_exchange) if e})
        # Exchanges are declared by the exchange guard, never on a publishing channel.
        publisher = functools.partial(ConfirmedPublisher, amqp, exchanges=(),
                                      confirm_timeout=s.amqp.confirm_timeout_ms / 1000.0,
                                      on_channel_closed=self.exchanges.forget)
        self.publisher = publisher(max_in_flight=s.amqp.max_in_flight)
        self.deadletters = DeadLetterer(DeadLetterRows(self.engine), self.ownership, self.services, self.publisher, self.exchanges,
                                        self.metrics, clock)
        # A task that ended FAILED wakes the dead-letterer; an attempt that ended frees its topic's slot.
        self.results = ResultApplier(self.store, self.queue, self.ownership, self.services, clock, self.metrics,
                                     Followers(failed=self.deadletters.wake, ended=self.flow.released,
                                               key_freed=self.keyholds.freed))
        self.recorder = Recorder(self.store, self.queue, self.ownership, self.results, self.metrics, clock,
                                 RecordSettings.of(s.scheduling))
        # ZooKeeper's parts (or a standalone node's), before what watches the session.
        self.cluster = zkp = ZkParts(s, self.ownership, self.epochs, clock, self.metrics, self.probes.stats,
                                     self.connections) if s.zk.enabled else None
        self.standalone = None if self.cluster else Standalone(self.epochs, self.ownership, s.node.node_id)
        # No time-out while delayq's own dependencies are down, nor for a grace after.
        zk = None if zkp is None else zkp.session
        self.grace = OutageGrace(clock, s.scheduling.outage_grace_ms, probes={
            "rabbitmq": lambda: self.publisher.ready,
            "zookeeper": lambda: zk is None or zk.state == "connected"})
        # The pollers' reads (hints, and each change counter): one statement each, without the
        # ROLLBACK of a transaction's end, on a connection each keeps.
        self.polls = make_engine(dataclasses.replace(s.mysql, pool_size=POLLERS), autocommit=True, members=members)
        self._bounded(self.polls)
        # An outage that only a claim, a record or a poll ran into (one shorter than a window scan's
        # interval) holds time-outs all the same.
        for engine in (self.engine, self.writes, self.polls):
            db.on_unreachable(engine, lambda: self.grace.observe("mysql", False))
        self.hints = hints.HintReader(self.polls, self.queue, self.ownership, self.handover,
                                      poll_ms=s.scheduling.hint_poll_ms)
        self.deadlines = Deadlines(self.overdue, self.results, self.metrics, clock, self.grace)
        self.pruner = Pruner(RetentionStore(self.engine), s.retention, clock)
        self.loader = Loader(self.store, self.queue, self.ownership, clock, ScanSettings.of(s.scheduling),
                             watcher=Expiry(self.overdue, self.results, self.ownership, self.grace),
                             limited=self.flow.limited)
        # Two lanes (delayq.nodes.dispatch.lanes), sharing all but their publisher.
        pauses = PauseWatch()       # tells a stopped node from a busy one when a claim lease runs out
        claims = Claims(self.store, self.ownership, Unsettled(self.store, clock), pauses=pauses)
        memory = Memory(self.queue, self.flow, rescan=self.loader.rescan, keys=self.keyholds)
        publishing = Publishing(self.publisher, self.services, self.exchanges, default_exchange=s.amqp.exchange)
        outcomes = Outcomes(self.recorder, self.results, self.deadlines)
        dispatch = DispatchSettings.of(s.scheduling)
        prompt_publisher = publisher(max_in_flight=dispatchlanes.PROMPT_WINDOW)
        self.dispatcher = dispatchlanes.Lanes(
            Dispatcher(claims, memory, publishing.via(prompt_publisher), outcomes, self.metrics, clock,
                       dispatchlanes.prompt_settings(dispatch)),
            Dispatcher(claims, memory, publishing, outcomes, self.metrics, clock, dispatchlanes.bulk_settings(dispatch)),
            prompt_publisher, pauses)
        sec = s.security
        self.services_watch = ServicesWatch(self.engine, self.services)
        follow(self.services_watch, self.services, self.flow, self.queue, self.loader.rescan, self.metrics,
               spreader(self.engine, self.queue, self.ownership))
        self.quotas = quotas.build(self.engine, self.metrics, clock, self.services_watch,
                                   live=(lambda: 1) if zkp is None else lambda: zkp.membership.live)
        self.access = Access(ClientStore(self.engine), self.metrics, enabled=not sec.insecure)
        self.watches = [Watch(self.polls, versions.CLIENTS, "clients", self.access.seen, poll_ms=sec.clients_poll_ms),
                        Watch(self.polls, versions.SERVICES, "services", self.services_watch.seen,
                              poll_ms=sec.clients_poll_ms)]
        self.results_consumer = ResultsConsumer(amqp, lambda task_id, attempt, result, message: self.results.apply(
                                                    task_id, attempt, result, message, move_retry=True),
                                                self.metrics, cluster=s.node.cluster, authorize=lambda user, task_id:
                                                self.access.reporter(user, task_id, self.requests.topic_of))
        self.audit = Audit(AuditLog(self.engine), clock, sec.refusal_audit_ms)
        answers = CallAnswers(self.metrics, self.audit.call)
        placing = Placing(self.queue, self.ownership, window_ms=s.scheduling.window_ms)
        limits = Limits(s.limits.max_payload_bytes, s.limits.max_horizon_ms)
        self.handler = Handler(self.requests, self.results, self.access, answers, placing, clock, limits=limits)
        self.cluster_key = ClusterKey(self.engine)
        self.keys = KeyCalls(KeyRequests(self.engine), self.access, answers, placing, clock, limits=limits,
                             page_key=lambda: self.cluster_key.derive(pages.PURPOSE))
        self.topics = TopicCalls(self.services, ControlStore(self.engine, clock), self.access, answers,
                                 self.exchanges.check, default_exchange=s.amqp.exchange)
        self.submit_path = SubmitPath(SubmitGate(self.access, self.quotas),
                                      NewTasks(self.services, placing, SubmitRules(limits, s.limits.max_batch)),
                                      TaskWriter(self.writes), placing, answers, clock)
        # Strings up to the frame cap are read, and the handler refuses what is too large. A list
        # longer than the largest batch is refused while decoding, before anything is built (a frame
        # of 8 MiB could claim millions of tasks), and the SubmitBatcher answers it as too large.
        protocol = TBinaryProtocol.TBinaryProtocolAcceleratedFactory(
            string_length_limit=s.limits.max_frame_bytes, container_length_limit=s.limits.max_batch)
        self.submits = SubmitBatcher(self.submit_path.submit_many, protocol, max_batch=s.limits.max_batch)
        reshards = None if zkp is None else ReshardJob(lambda stop: Resharder(
            self.engine, zkp.session.call, zkp.paths, clock, window_ms=s.scheduling.window_ms,
            scan_ms=s.scheduling.scan_interval_ms, stop=stop))
        self.admin = AdminCalls(self.access, answers, clock, self.engine, ClientStore(self.engine),
                                cluster_info=self.probes.cluster_info, zk=None if zkp is None else zkp.session.call,
                                paths=None if zkp is None else zkp.paths, reshards=reshards)
        # Bulk jobs: any node runs any job (delayq.nodes.bulkrunner); one started here wakes ours.
        jobs = BulkJobs(self.engine, s.bulk.lanes)
        batches = functools.partial(bulkbatch.run_batch, self.engine, max_horizon_ms=s.limits.max_horizon_ms)
        self.bulk_jobs = BulkRunner(jobs, batches, placing, clock, self.metrics,
                                    RunnerSettings(s.node.node_id, s.bulk.batch, s.bulk.lease_ms))
        self.service = Service(self.handler, self.keys, self.topics, self.admin, BulkCalls(
            jobs, self.access, answers, clock, default_rate=s.bulk.rate, max_horizon_ms=s.limits.max_horizon_ms,
            started=self.bulk_jobs.wake), DiscoveryCalls(self.access, answers, s.node.cluster, self.probes.endpoints))
        self.calls = CallPool(DelayScheduler.Processor(self.service), protocol,
                              threads=s.limits.thrift_threads)
        self.server = ThriftServer({"submit": self.submits, "submitBatch": self.submits}, self.calls,
                                   s.node.host, s.node.port, ConnectionLimits.of(s.limits, identities=not sec.insecure),
                                   max_connections=s.limits.thrift_workers, closed=lambda reason: self.metrics.thrift_closed.labels(reason).inc(),
                                   tls=None if sec.insecure else TlsPort(
                                       server_context(sec.tls_cert_file, sec.tls_key_file, sec.tls_ca_file,
                                                      sec.tls_client_cert),
                                       budget=HandshakeBudget(sec.tls_handshake_burst, sec.tls_handshakes_per_s)
                                       if sec.tls_handshakes_per_s else None,
                                       refused=self.audit.refused_connection))
        self.metrics.gauges(self.probes.gauges, self.probes.counters)
        # The HTTP port speaks TLS too when the node has a certificate (the console needs it). It
        # asks for a client certificate as the Thrift port does, never requires one: a browser
        # without one logs in with a token.
        gate = HttpGate(self.access, lambda: self.cluster_key.derive(httpgate.PURPOSE))
        self.http = HealthServer(s.http.host, s.http.port, self.metrics, self.probes, gate,
                                 tls=None if sec.insecure else server_context(
                                     sec.tls_cert_file, sec.tls_key_file, sec.tls_ca_file,
                                     "none" if sec.tls_client_cert == "none" else "optional"))
        # The web console (nodes/console): reads on an engine of its own, actions through the service.
        self.console = ConsolePart(s, self.service, self.access, self.metrics, clock, self.http,
                                   self.probes.http_endpoints) if serves_console(s) else None

    def _bounded(self, engine: Engine) -> None:
        self.connections.register(engine, self.settings.node.node_id)
        bound_lock_waits(engine)

    def start(self, wait_s: float = 60.0) -> None:
        if self.settings.security.insecure:
            log.warning("DELAYQ_INSECURE is set: the Thrift port is plaintext and every call runs without a "
                        "client identity, allowed everything. For development only.")
        self.http.start()
        wait_until_answered(self._mysql_ready, wait_s)
        if self.cluster is not None:
            self.cluster.start(timeout=min(wait_s, 15.0))
        try:
            self.clockcheck.check_now()     # before the first task is due by this clock
        except Unavailable as e:
            log.warning("could not read MySQL's clock yet (%s): nothing is claimed until MySQL answers", e)
        for first in (self.clockcheck, self.exchanges, self.publisher):
            first.start()
        if not self.publisher.wait_ready(min(wait_s, 10.0)):
            log.warning("RabbitMQ not reachable yet: dispatch starts once it is")
        parts: tuple[Part, ...] = (self.recorder, self.deadlines, self.hints, self.dispatcher, self.loader,
                                   self.deadletters, self.pruner, self.bulk_jobs, self.results_consumer, *self.watches,
                                   self.quotas, self.submits, self.calls, self.server)
        for part in parts:
            part.start()
        if self.console is not None:
            self.console.start()
        log.info("node %s ready: %d shards at epoch %d, window %d ms", self.settings.node.node_id,
                 len(self.ownership.shards()), self.probes.epoch(), self.settings.scheduling.window_ms)

    def _mysql_ready(self) -> None:
        """Schema and shards there, services loaded; a standalone node takes its shards."""
        schema.check_ready(self.engine)
        self.services_watch.load()
        self.access.load()
        self.cluster_key.derive(pages.PURPOSE)      # read now: the Thrift port's first page token needs it
        if self.standalone is not None:
            self.standalone.take_shards()

    def stop(self, timeout: float = 10.0) -> None:
        began = time.monotonic()
        log.info("node %s stopping", self.settings.node.node_id)
        doors: tuple[Part, ...] = (self.server, self.submits, self.calls, *self.watches, self.quotas)
        for door in doors:
            door.stop()
        self.audit.flush()      # no call is served any more
        if self.admin.reshards is not None:
            self.admin.reshards.stop()
        if self.cluster is not None:
            # Leaving, not frozen: the master is not to end the connections that write the hints below.
            try:
                self.connections.forget(self.settings.node.node_id)
            except Unavailable as e:
                log.warning("could not withdraw this node's MySQL connections: %s", e)
            self.cluster.stop()
            # The session is closed: the shards are the other nodes' from now on. What memory
            # holds of them, and every claim not yet published, goes to them (hints).
            self.ownership.set({}, self.ownership.all_shards())
        for part in (self.results_consumer, self.pruner, self.bulk_jobs, self.clockcheck, self.loader, self.dispatcher, self.deadlines,
                     self.deadletters):
            part.stop()
        deadline = time.monotonic() + timeout
        self.publisher.settle(timeout)
        self.publisher.stop()
        self.exchanges.stop()
        self.recorder.stop(max(1.0, deadline - time.monotonic()))
        self.hints.stop()       # after the recorder: it writes the hints of the claims handed back
        self.engine.dispose()
        self.writes.dispose()
        self.polls.dispose()
        self.http.stop()
        if self.console is not None:
            self.console.stop()
        log.info("node %s stopped in %.1f s", self.settings.node.node_id, time.monotonic() - began)
