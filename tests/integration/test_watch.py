"""The node's pollers of MySQL: a change counter that moves reaches its Watch's follower within a
second, a failing follower or a MySQL that does not answer is logged once and stops nothing, and
the connection a poller keeps is made anew after MySQL cut it."""
from __future__ import annotations

import dataclasses
import logging

import pytest
from sqlalchemy import event

from delayq import config, db
from delayq.db import HeldConnection, make_engine
from delayq.errors import StoreUnavailable
from delayq.nodes.cluster.watch import Watch
from delayq.store import versions
from delayq.testing.ports import free_port
from tests.conftest import wait_until


@pytest.fixture
def settings(database):
    return config.load({"DELAYQ_MYSQL_URL": database.url, "DELAYQ_MYSQL_TIMEOUT_MS": "1000"}).mysql


@pytest.fixture
def engines(settings):
    made = []

    def make(s=settings):
        made.append(make_engine(s, autocommit=True))
        return made[-1]
    yield make
    for engine in made:
        engine.dispose()


def test_a_moved_counter_reaches_its_follower_within_a_second(engines):
    seen = []
    watch = Watch(engines(), versions.CLIENTS, "clients", seen.append, poll_ms=50)
    watch.start()
    try:
        wait_until(lambda: seen, 2, what="the first read")
        before = seen[-1]
        with versions.bumping(engines(), versions.CLIENTS):
            pass
        wait_until(lambda: seen[-1] != before, 1, what="the clients' counter moving")
        assert int(seen[-1]) == int(before) + 1
    finally:
        watch.stop()


def test_a_follower_that_fails_is_logged_once_and_told_again(engines, caplog):
    calls = []

    def follower(value: str) -> None:
        calls.append(value)
        if len(calls) <= 3:
            raise RuntimeError("a follower's bug")

    watch = Watch(engines(), versions.SERVICES, "services", follower, poll_ms=50)
    with caplog.at_level(logging.INFO, logger="delayq.nodes.cluster.watch"):
        watch.start()
        try:
            wait_until(lambda: len(calls) >= 5, 2, what="the follower called after it failed")
            assert watch.alive
        finally:
            watch.stop()
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2, said
    assert said[0].startswith("could not look for changes to the services (a follower's bug)")
    assert said[1] == "the services are read again"


def test_a_mysql_that_does_not_answer_is_logged_once_and_stops_nothing(settings, engines, caplog):
    engine = engines(dataclasses.replace(settings, url=f"mysql+pymysql://nobody@127.0.0.1:{free_port()}/none"))
    attempts, seen = [], []
    event.listen(engine, "do_connect", lambda *args: attempts.append(1))
    watch = Watch(engine, versions.CLIENTS, "clients", seen.append, poll_ms=50)
    with caplog.at_level(logging.WARNING, logger="delayq.nodes.cluster.watch"):
        watch.start()
        try:
            wait_until(lambda: len(attempts) >= 4, 5, what="four reads tried")
            said = [r.getMessage() for r in caplog.records]
            assert len(said) == 1 and said[0].startswith("could not look for changes to the clients (MySQL unavailable")
            assert watch.alive and seen == []
        finally:
            watch.stop()


def test_watching_a_counter_that_does_not_exist_is_refused(engines):
    with pytest.raises(ValueError, match="no such change counter"):
        Watch(engines(), "tasks_version", "tasks", lambda value: None)


def _connection_id(held: HeldConnection) -> int:
    with held.use() as conn:
        return int(conn.exec_driver_sql("SELECT CONNECTION_ID()").scalar())


def _kill(engine, connection_id: int) -> None:
    with engine.connect() as conn:
        conn.exec_driver_sql(f"KILL CONNECTION {connection_id}")


def test_a_held_connection_cut_in_use_fails_one_read_and_is_made_anew_for_the_next(engines):
    held = HeldConnection(engines())
    try:
        first = _connection_id(held)
        assert _connection_id(held) == first        # kept
        _kill(engines(), first)
        with pytest.raises(StoreUnavailable):
            with held.use() as conn:
                conn.exec_driver_sql("SELECT 1")
        assert _connection_id(held) != first
    finally:
        held.close()


def test_a_held_connection_cut_while_idle_is_replaced_before_the_next_read(engines, monkeypatch):
    monkeypatch.setattr(db, "PING_IDLE_S", 0.0)      # every read comes after an idle spell
    held = HeldConnection(engines())
    try:
        first = _connection_id(held)
        _kill(engines(), first)
        assert _connection_id(held) != first         # pinged, found gone, connected anew: no failed read
    finally:
        held.close()
