"""What a connect costs the node when MySQL is away: a refused connect builds no TLS context (the
driver's default built one at every connect, loading the system's CA certificates, for a TLS that
checked no certificate), unless the URL asks for TLS."""
from __future__ import annotations

import ssl
import time

import pytest
import sqlalchemy.exc
from sqlalchemy.engine import make_url

from delayq import config, db
from delayq.testing.ports import free_port

CONNECTS = 10


def test_a_refused_connect_costs_less_cpu_than_building_a_tls_context():
    # Measured on this thread in the same run, so whatever the host's load: a connect that built
    # a context cost at least one of these.
    began = time.thread_time()
    for _ in range(CONNECTS):
        ssl.create_default_context()
    context = (time.thread_time() - began) / CONNECTS
    if context < 0.003:
        pytest.skip(f"a TLS context costs {context * 1000:.1f} ms of CPU here (no CA certificates to load)")
    # A port nothing listens on refuses at once: what the connect costs is the node's own CPU.
    url = f"mysql+pymysql://delayq@127.0.0.1:{free_port()}/delayq"
    engine = db.make_engine(config.load({"DELAYQ_MYSQL_URL": url}).mysql)
    try:
        began = time.thread_time()
        for _ in range(CONNECTS):
            with pytest.raises(sqlalchemy.exc.OperationalError):
                engine.connect().close()
        per_connect = (time.thread_time() - began) / CONNECTS
    finally:
        engine.dispose()
    assert per_connect < context / 3, \
        f"a refused connect took {per_connect * 1000:.1f} ms of CPU, a TLS context {context * 1000:.1f} ms"


@pytest.mark.parametrize("query", ["ssl_ca=/etc/mysql/ca.pem", "ssl_verify_cert=true", "ssl_disabled=false"])
def test_tls_asked_for_in_the_url_is_left_to_the_driver(query):
    assert db.tls_args(make_url(f"mysql+pymysql://u:p@db:3306/delayq?{query}")) == {}


def test_without_tls_in_the_url_the_driver_tries_none():
    assert db.tls_args(make_url("mysql+pymysql://u:p@db:3306/delayq?charset=utf8mb4")) == {"ssl_disabled": True}
