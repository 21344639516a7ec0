"""The node's RabbitMQ connection parameters: the URL's (amqps with the CA when set), with timeouts
on every step, one attempt per connect (the publisher and consumers reconnect themselves) and a
heartbeat; one set per node of the cluster when DELAYQ_AMQP_HOSTS lists them, in its order.

pika's BlockingConnection takes the list and tries each in turn; the publisher's
SelectConnection takes one, and the publisher moves along the list itself."""
from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import pika

from delayq.addresses import parse_addresses
from delayq.client.amqp import parameters as amqp_url_parameters


def amqp_parameters(url: str, timeout_ms: int, ca_file: str = "", hosts: str = "") -> list[pika.ConnectionParameters]:
    """One set of parameters per broker: the URL's own, or, with `hosts`, the URL's with each
    host:port in turn (its user, password, vhost and TLS kept)."""
    urls = [url]
    addresses = parse_addresses(hosts, 5671 if url.startswith("amqps:") else 5672)
    if addresses:
        parts = urlsplit(url)
        userinfo = parts.netloc.rpartition("@")[0]
        urls = [urlunsplit(parts._replace(netloc=f"{userinfo}@{a}" if userinfo else str(a))) for a in addresses]
    return [_timed(amqp_url_parameters(u, ca_file), timeout_ms) for u in urls]


def _timed(params: pika.URLParameters, timeout_ms: int) -> pika.URLParameters:
    timeout = max(1.0, timeout_ms / 1000.0)
    params.socket_timeout = timeout
    params.stack_timeout = timeout * 2
    params.blocked_connection_timeout = max(30.0, timeout)
    params.connection_attempts = 1
    params.heartbeat = 30
    return params


def connect_error(err: BaseException) -> str:
    """What went wrong connecting, in words: pika's connection errors often print as "" (the
    reason is an exception inside one inside a list), e.g. "[Errno 111] Connection refused"."""
    seen = 0
    while seen < 5:
        seen += 1
        inner = getattr(err, "exceptions", None) or getattr(err, "exception", None) or (err.args[0] if err.args else None)
        if isinstance(inner, (list, tuple)) and inner:
            inner = inner[-1]
        if isinstance(inner, BaseException) and not str(err):
            err = inner
            continue
        break
    return str(err) or type(err).__name__
