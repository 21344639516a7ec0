"""The node's RabbitMQ connection parameters: the URL's (amqps with the CA when set), with timeouts
on every step, one attempt per connect (the publisher and consumers reconnect themselves) and a
heartbeat."""
from __future__ import annotations

import pika

from delayq.client.amqp import parameters as amqp_url_parameters


def amqp_parameters(url: str, timeout_ms: int, ca_file: str = "") -> pika.URLParameters:
    params = amqp_url_parameters(url, ca_file)
    timeout = max(1.0, timeout_ms / 1000.0)
    params.socket_timeout = timeout
    params.stack_timeout = timeout * 2
    params.blocked_connection_timeout = max(30.0, timeout)
    params.connection_attempts = 1
    params.heartbeat = 30
    return params
