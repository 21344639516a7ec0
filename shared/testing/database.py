"""A database of its own for each test cluster: created, migrated, its shards made and its node
account granted; dropped on exit with what the cluster left in RabbitMQ and ZooKeeper. The services
are those of delayq.testing.services."""
from __future__ import annotations

import contextlib
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Iterator

from delayq import accounts, config, db as dbm, schema
from delayq.testing import security
from delayq.testing.services import MYSQL_SERVER, delete_results_queues, delete_zk_tree


@dataclass(frozen=True)
class Database:
    """A database of its own: its name is also the name of the cluster using it. `url` is the
    admin's; nodes use `node_url`, the account `delayq db init --node-account` makes."""
    url: str
    name: str
    shards: int
    node_url: str = ""


@contextlib.contextmanager
def fresh_database(shards: int, prefix: str = "delayq_t_", server_url: str = MYSQL_SERVER) -> Iterator[Database]:
    """A new, migrated database with `shards` shards on `server_url` (without a database); on
    exit it is dropped (waiting up to 60 s for a MySQL that someone's outage test is restarting)
    with the cluster's results queue."""
    name = f"{prefix}{uuid.uuid4().hex[:10]}"
    settings = config.load({"DELAYQ_MYSQL_URL": f"{server_url}/{name}"})
    server = dbm.make_engine(settings.mysql, database=False)
    schema.create_database(server, name)
    try:
        engine = dbm.make_engine(settings.mysql)
        try:
            schema.migrate(engine)
            schema.init_cluster(engine, shards)
            security.admit(engine)
            password = accounts.ensure_node_account(engine, name, _account(name))
        finally:
            engine.dispose()
        yield Database(settings.mysql.url, name, shards,
                       accounts.node_url(settings.mysql.url, _account(name), password))
    finally:
        _drop(server, name)
        delete_results_queues(name)
        delete_zk_tree(f"/delayq/{name}")       # the cluster its nodes made, if they used ZooKeeper


def _account(database: str) -> str:
    return f"n_{database[-10:]}"


def _drop(server, name: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            with server.begin() as conn:
                conn.exec_driver_sql(f"DROP DATABASE IF EXISTS `{name}`")
                conn.exec_driver_sql(f"DROP USER IF EXISTS '{_account(name)}'@'%%'")
            break
        except Exception:  # noqa: BLE001 - MySQL restarting: try again until the deadline
            if time.monotonic() > deadline:
                print(f"could not drop database {name}; drop it by hand", file=sys.stderr)
                break
            time.sleep(2)
    server.dispose()
