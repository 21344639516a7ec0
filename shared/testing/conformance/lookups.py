"""The lookups the node's core makes — a topic's callback service (ServiceFinder), an exchange's
verdict (ExchangeVerdicts), the clients and their version (Access's ClientStore reads) — in
memory (delayq.testing.fakes: Services, Exchanges, Clients, set by the test) or on the real
service (ServiceRegistry and ClientStore on MySQL, ExchangeGuard on RabbitMQ).

`Lookups` says how an expectation makes the world it looks up: a service registered by another
node, an exchange RabbitMQ holds of a type delayq cannot route by, a client added by an operator.
"""
from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any, Mapping, Protocol

import pika

from delayq import config, db as dbm
from delayq.access.grants import Client, check_grant
from delayq.clock import SYSTEM_CLOCK
from delayq.nodes.amqp.exchanges import ExchangeGuard
from delayq.nodes.amqp.params import amqp_parameters
from delayq.nodes.cluster.services import ServiceRegistry
from delayq.nodes.dispatch.ports import ExchangeVerdicts, ServiceFinder
from delayq.nodes.validation import ServiceSpec
from delayq.store.clients import ClientStore
from delayq.store.controls import ControlStore, Controls, checked
from delayq.testing.database import Database
from delayq.testing.fakes import Clients, Exchanges, Services
from delayq.testing.services import AMQP_URL


class ClientReads(Protocol):
    def version(self) -> str: ...

    def load(self) -> tuple[str, dict[str, Client]]: ...


class ServiceReads(ServiceFinder, Protocol):
    """ServiceRegistry as the submit path, the dispatcher and the flow read it."""

    def get(self, topic: str) -> ServiceSpec: ...

    def controls(self, topic: str) -> Controls: ...

    def all_controls(self) -> dict[str, Controls]: ...


class Lookups(Protocol):
    @property
    def services(self) -> ServiceReads: ...

    @property
    def exchanges(self) -> ExchangeVerdicts: ...

    @property
    def clients(self) -> ClientReads: ...

    def register(self, service: ServiceSpec) -> None:
        """Another node registers (or changes) the service."""

    def set_controls(self, topic: str, changes: Mapping[str, Any]) -> None:
        """An operator changes the topic's flow controls, and the node has read them again."""

    def unroutable_exchange(self) -> str:
        """The name of an exchange that exists as a fanout exchange."""

    def add_client(self, name: str, grants: tuple[tuple[str, str], ...]) -> None:
        """An operator adds a client with these grants."""


class FakeLookups:
    def __init__(self) -> None:
        self._services, self._exchanges, self._clients = Services(), Exchanges(), Clients()

    @property
    def services(self) -> Services:
        return self._services

    @property
    def exchanges(self) -> Exchanges:
        return self._exchanges

    @property
    def clients(self) -> Clients:
        return self._clients

    def register(self, service: ServiceSpec) -> None:
        self._services.by_topic[service.topic] = service

    def set_controls(self, topic: str, changes: Mapping[str, Any]) -> None:
        self._services.limits[topic] = replace(self._services.controls(topic), **checked(changes))

    def unroutable_exchange(self) -> str:
        name = f"conformance.{uuid.uuid4().hex[:10]}"
        self._exchanges.bad[name] = "current is 'fanout'"
        return name

    def add_client(self, name: str, grants: tuple[tuple[str, str], ...]) -> None:
        self._clients.clients[name] = Client(name, "digest", grants=frozenset(check_grant(*g) for g in grants))
        self._clients.version_ = str(int(self._clients.version_) + 1)


class RealLookups:
    """The node's reads (its own MySQL account, its own ServiceRegistry) and an operator's or
    another node's writes (the admin account); `close()` deletes the exchanges it made."""

    def __init__(self, database: Database):
        self._admin = dbm.make_engine(config.load({"DELAYQ_MYSQL_URL": database.url}).mysql)
        self._node = dbm.make_engine(config.load({"DELAYQ_MYSQL_URL": database.node_url}).mysql)
        self._other_node = ServiceRegistry(self._admin, SYSTEM_CLOCK)
        self._services = ServiceRegistry(self._node, SYSTEM_CLOCK)
        self._exchanges = ExchangeGuard(amqp_parameters(AMQP_URL, 5000))
        self._operator, self._clients = ClientStore(self._admin), ClientStore(self._node)
        self._made: list[str] = []

    @property
    def services(self) -> ServiceRegistry:
        return self._services

    @property
    def exchanges(self) -> ExchangeGuard:
        return self._exchanges

    @property
    def clients(self) -> ClientStore:
        return self._clients

    def register(self, service: ServiceSpec) -> None:
        self._other_node.upsert(service)

    def set_controls(self, topic: str, changes: Mapping[str, Any]) -> None:
        ControlStore(self._admin).change(topic, changes)
        self._services.refresh()        # as the services watch does when their change counter moves

    def unroutable_exchange(self) -> str:
        name = f"conformance.{uuid.uuid4().hex[:10]}"
        with pika.BlockingConnection(pika.URLParameters(AMQP_URL)) as conn:
            conn.channel().exchange_declare(name, exchange_type="fanout", durable=False, auto_delete=False)
        self._made.append(name)
        return name

    def add_client(self, name: str, grants: tuple[tuple[str, str], ...]) -> None:
        self._operator.add(name, grants=grants)

    def close(self) -> None:
        with pika.BlockingConnection(pika.URLParameters(AMQP_URL)) as conn:
            channel = conn.channel()
            for name in self._made:
                channel.exchange_delete(name)
        self._admin.dispose()
        self._node.dispose()
