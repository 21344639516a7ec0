"""The lookups the node's core makes — a topic's callback service (ServiceFinder), an exchange's
verdict (ExchangeVerdicts), the clients and their version (Access's ClientStore reads), the
tenants and their topics' live tasks (the quotas' TenantStore reads) — in memory
(delayq.testing.fakes: Services, Exchanges, Clients, Tenants, set by the test) or on the real
service (ServiceRegistry, ClientStore and TenantStore on MySQL, ExchangeGuard on RabbitMQ).

`Lookups` says how an expectation makes the world it looks up: a service registered by another
node, an exchange RabbitMQ holds of a type delayq cannot route by, a client or a tenant added by an
operator, tasks submitted.
"""
from __future__ import annotations

import uuid
from dataclasses import asdict, replace
from typing import Any, Iterable, Mapping, Protocol

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
from delayq.store.sqltext import insert_tasks
from delayq.store.tenants import Tenant, TenantStore
from delayq.store.values import NewTask
from delayq.testing.database import Database
from delayq.testing.fakes import Clients, Exchanges, Services, Tenants
from delayq.testing.services import AMQP_URL


class ClientReads(Protocol):
    def version(self) -> str: ...

    def load(self) -> tuple[str, dict[str, Client]]: ...


class ServiceReads(ServiceFinder, Protocol):
    """ServiceRegistry as the submit path, the dispatcher and the flow read it."""

    def get(self, topic: str) -> ServiceSpec: ...

    def controls(self, topic: str) -> Controls: ...

    def all_controls(self) -> dict[str, Controls]: ...


class TenantReads(Protocol):
    """TenantStore as the quotas read it."""

    def load(self) -> tuple[dict[str, Tenant], dict[str, str]]: ...

    def pending(self, topics: Iterable[str]) -> dict[str, int]: ...


class Lookups(Protocol):
    @property
    def services(self) -> ServiceReads: ...

    @property
    def exchanges(self) -> ExchangeVerdicts: ...

    @property
    def clients(self) -> ClientReads: ...

    @property
    def tenants(self) -> TenantReads: ...

    def register(self, service: ServiceSpec) -> None:
        """Another node registers (or changes) the service."""

    def set_controls(self, topic: str, changes: Mapping[str, Any]) -> None:
        """An operator changes the topic's flow controls, and the node has read them again."""

    def unroutable_exchange(self) -> str:
        """The name of an exchange that exists as a fanout exchange."""

    def add_client(self, name: str, grants: tuple[tuple[str, str], ...]) -> None:
        """An operator adds a client with these grants."""

    def add_tenant(self, tenant: Tenant, topics: Iterable[str]) -> None:
        """An operator creates the tenant and gives it these (registered) topics."""

    def submit(self, topic: str, count: int) -> None:
        """`count` live tasks of the topic are written."""


class FakeLookups:
    def __init__(self) -> None:
        self._services, self._exchanges, self._clients, self._tenants = Services(), Exchanges(), Clients(), Tenants()

    @property
    def services(self) -> Services:
        return self._services

    @property
    def exchanges(self) -> Exchanges:
        return self._exchanges

    @property
    def clients(self) -> Clients:
        return self._clients

    @property
    def tenants(self) -> Tenants:
        return self._tenants

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

    def add_tenant(self, tenant: Tenant, topics: Iterable[str]) -> None:
        self._tenants.tenants[tenant.name] = tenant
        self._tenants.topics.update({topic: tenant.name for topic in topics})

    def submit(self, topic: str, count: int) -> None:
        self._tenants.live[topic] = self._tenants.live.get(topic, 0) + count


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
        self._tenant_admin, self._tenants = TenantStore(self._admin), TenantStore(self._node)
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

    @property
    def tenants(self) -> TenantStore:
        return self._tenants

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

    def add_tenant(self, tenant: Tenant, topics: Iterable[str]) -> None:
        self._tenant_admin.create(tenant.name, {k: v for k, v in asdict(tenant).items() if k != "name"})
        self._tenant_admin.assign(tenant.name, topics=topics)

    def submit(self, topic: str, count: int) -> None:
        due = SYSTEM_CLOCK.now_ms() + 3_600_000
        with self._admin.begin() as conn:
            conn.exec_driver_sql(insert_tasks([NewTask(f"{topic}-{uuid.uuid4().hex[:12]}", topic, 0, due, b"",
                                                       bytes(16), 3, 3000, due) for _ in range(count)]))

    def close(self) -> None:
        with pika.BlockingConnection(pika.URLParameters(AMQP_URL)) as conn:
            channel = conn.channel()
            for name in self._made:
                channel.exchange_delete(name)
        self._admin.dispose()
        self._node.dispose()
