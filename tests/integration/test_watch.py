"""The node's pollers of MySQL: a change counter that moves reaches its Watch follower within a
second, one follower's failure keeps no other stale, a MySQL that does not answer stops nothing,
and the connection a poller keeps is made anew after MySQL cut it."""
from __future__ import annotations

import dataclasses
import logging

import pytest
from sqlalchemy import event

from delayq import config
from delayq.db import HeldConnection, make_engine
from delayq.errors import StoreUnavailable
from delayq.nodes.watch import Watch
from delayq.store import versions
from delayq.testing.ports import free_port
from tests.conftest import wait_until


@pytest.fixture
def settings(database):
    return config.load({"DELAYQ_MYSQL_URL": database.url, "DELAYQ_MYSQL_TIMEOUT_MS": "1000"}).mysql


def test_a_moved_counter_reaches_its_follower_while_another_follower_fails(settings):
    engine, writer = make_engine(settings, autocommit=True), make_engine(settings)
    clients, services = [], []

    def broken(value: str) -> None:
        services.append(value)
        raise RuntimeError("a follower's bug")

    watch = Watch(engine, poll_ms=50)
    watch.follow(versions.SERVICES, "the services", broken)
    watch.follow(versions.CLIENTS, "the clients", clients.append)
    watch.start()
    try:
        wait_until(lambda: clients, 2, what="the first read")
        before = clients[-1]
        with versions.bumping(writer, versions.CLIENTS):
            pass
        wait_until(lambda: clients[-1] != before, 1, what="the clients' counter moving")
        assert int(clients[-1]) == int(before) + 1
        wait_until(lambda: len(services) >= 3, 2, what="the failing follower called again")
        assert watch.alive
    finally:
        watch.stop()
        engine.dispose()
        writer.dispose()


def test_a_mysql_that_does_not_answer_is_logged_once_and_stops_nothing(settings, caplog):
    gone = dataclasses.replace(settings, url=f"mysql+pymysql://nobody@127.0.0.1:{free_port()}/none")
    engine = make_engine(gone, autocommit=True)
    attempts = []
    event.listen(engine, "do_connect", lambda *args: attempts.append(1))
    seen = []
    watch = Watch(engine, poll_ms=50)
    watch.follow(versions.CLIENTS, "the clients", seen.append)
    with caplog.at_level(logging.WARNING, logger="delayq.nodes.watch"):
        watch.start()
        try:
            wait_until(lambda: len(attempts) >= 4, 5, what="four reads tried")
            assert [r.getMessage()[:40] for r in caplog.records] == ["could not look for changes in MySQL (MyS"]
            assert watch.alive and seen == []
        finally:
            watch.stop()
            engine.dispose()


def test_following_a_counter_that_does_not_exist_is_refused(settings):
    watch = Watch(make_engine(settings, autocommit=True))
    with pytest.raises(ValueError, match="no such change counter"):
        watch.follow("tasks_version", "the tasks", lambda value: None)


def test_a_held_connection_cut_by_mysql_fails_one_read_and_is_made_anew_for_the_next(settings):
    engine, other = make_engine(settings, autocommit=True), make_engine(settings, autocommit=True)
    held = HeldConnection(engine)
    try:
        with held.use() as conn:
            first = conn.exec_driver_sql("SELECT CONNECTION_ID()").scalar()
        with held.use() as conn:
            assert conn.exec_driver_sql("SELECT CONNECTION_ID()").scalar() == first     # kept, not checked out anew
        with other.connect() as conn:
            conn.exec_driver_sql(f"KILL CONNECTION {int(first)}")
        with pytest.raises(StoreUnavailable):
            with held.use() as conn:
                conn.exec_driver_sql("SELECT 1")
        with held.use() as conn:
            assert conn.exec_driver_sql("SELECT CONNECTION_ID()").scalar() != first
    finally:
        held.close()
        engine.dispose()
        other.dispose()
