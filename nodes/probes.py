"""Probes: what a node says about itself, read from its parts and never changing them: the gauges
and counters of /metrics, /healthz (every thread alive), /readyz (ZooKeeper, the assignment, MySQL,
RabbitMQ), the detail both show, and the cluster() and endpoints() calls' view.

Built by NodeRuntime (delayq.nodes.main) once its parts exist; each method runs on the thread that
asks (the HTTP server's, a Thrift call's).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from delayq.client.gen.delayq_thrift import ttypes
from delayq.errors import Unavailable
from delayq.nodes.front.clusterinfo import cluster_info
from delayq.nodes.zk.view import read_view
from delayq.zkpaths import node_of

if TYPE_CHECKING:
    from delayq.nodes.main import NodeRuntime


class Probes:
    def __init__(self, node: "NodeRuntime"):
        self._node = node

    def epoch(self) -> int:
        n = self._node
        if n.cluster is None:
            return n.standalone.epoch if n.standalone is not None else 0
        return n.cluster.follower.epoch

    def stats(self) -> dict:
        """This node's figures as it publishes them to ZooKeeper."""
        n = self._node
        return {"shards": len(n.ownership.shards()), "queue": len(n.queue), "http": self.http_endpoint(),
                "clock_offset_ms": n.clockcheck.offset_ms, "held_topics": dict(n.dispatcher.held_topics)}

    def http_endpoint(self) -> str:
        """Where this node's HTTP port is reached (its console asks the others' for their history)."""
        n = self._node
        return f"{n.settings.node.advertise_host}:{n.http.port}"

    def http_endpoints(self) -> dict[str, str]:
        """Every node's HTTP port (node id -> host:port), as the members published them."""
        n = self._node
        if n.cluster is None:
            return {n.settings.node.node_id: self.http_endpoint()}
        view = read_view(n.cluster.session, n.cluster.paths)
        return {node_of(m): data["http"] for m, data in view.members.items() if data.get("http")}

    def gauges(self) -> dict[str, float]:
        n = self._node
        g: dict[str, float] = {"queue_size": len(n.queue), "shards_owned": len(n.ownership.shards()),
             "unconfirmed_publishes": n.publisher.in_flight + n.dispatcher.publisher.in_flight,
             "recorder_backlog": n.recorder.backlog, "key_waiting_tasks": n.keyholds.held,
             "assignment_epoch": self.epoch()}
        if n.cluster is None:
            g.update(is_master=1, zookeeper_connected=0)
        else:
            g.update(is_master=int(n.cluster.election.leader),
                     zookeeper_connected=int(n.cluster.session.state == "connected"))
        try:
            f = n.overdue.in_flight(n.ownership.shards(), n.clock.now_ms())
            g.update(in_flight_attempts=f.attempts, overdue_attempts=f.overdue)
        except Unavailable:
            pass     # the scrape still answers; the error shows in delayq_dependency_errors_total
        return g

    def counters(self) -> dict[str, float]:
        n = self._node
        return {"catchup_tasks_total": n.loader.caught_up, "window_scans_total": n.loader.scans}

    def alive(self) -> dict[str, str | None]:
        n = self._node
        threads: dict[str, Any] = {"dispatcher": n.dispatcher, "loader": n.loader, "recorder": n.recorder,
                   "submits": n.submits, "thrift-calls": n.calls, "thrift-io": n.server,
                   "clock-check": n.clockcheck, "deadlines": n.deadlines,
                   "hints": n.hints, **{w.name: w for w in n.watches},
                   "quotas": n.quotas, **({"console-history": n.console.history} if n.console else {})}
        return {name: None if t.alive else "thread stopped" for name, t in threads.items()}

    def ready(self) -> dict[str, str | None]:
        n = self._node
        checks: dict[str, str | None] = {}
        if n.cluster is not None:
            state = n.cluster.session.state
            checks["zookeeper"] = None if state == "connected" else f"session {state}"
            checks["assignment"] = None if n.cluster.follower.epoch > 0 else "no assignment received yet"
        else:
            checks["assignment"] = None if n.ownership.shards() else "no shards"
        try:
            n.store.ping()
            checks["mysql"] = None
        except Unavailable as e:
            checks["mysql"] = str(e)
        checks["rabbitmq"] = None if n.publisher.ready and n.dispatcher.ready else "publisher channel not open"
        # A node whose Thrift server stopped fires its tasks but takes no call: not ready to be sent any.
        checks["thrift"] = None if n.server.alive else "the Thrift server stopped"
        return checks

    def detail(self) -> dict:
        n = self._node
        clock = n.clockcheck.describe()
        offset = n.clockcheck.offset_ms
        return {"clock_offset_ms": None if offset is None else int(round(offset)),
                "held_topics": dict(n.dispatcher.held_topics),
                **({"clock": f"this machine's clock is {clock} MySQL's; due times follow MySQL's"} if clock else {})}

    def endpoints(self) -> list[str]:
        """The Thrift endpoint each live member advertises (this node's alone when standalone)."""
        n = self._node
        if n.cluster is None:
            return [f"{n.settings.node.advertise_host}:{n.server.port}"]
        members = read_view(n.cluster.session, n.cluster.paths).members.values()
        return [m["endpoint"] for m in members if m.get("endpoint")]

    def cluster_info(self) -> ttypes.ClusterInfo:
        n = self._node
        s = n.settings
        me: str | None       # this node's member name; None while it has no ZooKeeper session
        if n.standalone is not None:
            view = n.standalone.view(f"{s.node.advertise_host}:{n.server.port}")
            me = n.standalone.member
        else:
            assert n.cluster is not None  # a node runs standalone or in a cluster with ZooKeeper
            view, me = read_view(n.cluster.session, n.cluster.paths), n.cluster.membership.member
        return cluster_info(s.node.cluster, view, me, self.stats(), len(n.ownership.all_shards()))
