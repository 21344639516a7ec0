"""The console as one part of a node: built from the node's service, identities and metrics,
reading MySQL on an engine of its own (a slow page never takes a connection a claim needs), and
stopped with it."""
from __future__ import annotations

from typing import Callable

from delayq.client.gen.delayq_thrift import DelayScheduler
from delayq.clock import Clock
from delayq.config import Settings
from delayq.nodes.console.app import Console
from delayq.nodes.console.door import Door
from delayq.nodes.console.hosts import listed, own_names
from delayq.nodes.console.history import HistoryThread
from delayq.nodes.console.peers import Peers, fetch
from delayq.nodes.console.reads import ConsoleReads, console_engine
from delayq.nodes.front.access import Access
from delayq.nodes.http import HealthServer
from delayq.nodes.metrics import Metrics
from delayq.store.audit import AuditLog
from delayq.store.tenants import TenantStore


def serves_console(s: Settings) -> bool:
    """DELAYQ_CONSOLE, but on a node without security only when asked for by name: there any
    token logs in, and every action is allowed."""
    return s.http.console and (not s.security.insecure or s.http.console_insecure)


class ConsolePart:
    def __init__(self, s: Settings, service: DelayScheduler.Iface, access: Access, metrics: Metrics, clock: Clock,
                 http: HealthServer, http_endpoints: Callable[[], dict[str, str]]):
        """Actions go through `service` (the Thrift calls, their checks and audit rows included);
        the console answers on `http`'s port, under /ui."""
        self._engine = engine = console_engine(s.mysql)
        self.console = Console(
            service=service, access=access, reads=ConsoleReads(engine), history=HistoryThread(metrics, clock),
            peers=Peers(lambda ep, path: fetch(ep, path, credential=http.gate.credential())),
            http_endpoints=http_endpoints, clock=clock, cluster=s.node.cluster,
            node_id=s.node.node_id, audit=AuditLog(engine), tenants=TenantStore(engine, clock),
            door=Door(f"delayq_console_{http.port}", listed(s.http.console_hosts) or own_names(
                s.http.host, s.node.host, s.node.advertise_host), tls=http.tls, plaintext=s.http.console_plaintext))
        http.console = self.console

    @property
    def history(self) -> HistoryThread:
        """The thread keeping this node's history (the liveness probe watches it)."""
        return self.console.history

    def start(self) -> None:
        self.console.start()

    def stop(self) -> None:
        self.console.stop()
        self._engine.dispose()
