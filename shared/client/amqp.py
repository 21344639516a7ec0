"""AMQP connection parameters for delayq's URLs: `amqp://` plaintext, `amqps://` TLS verified
against a CA file (DELAYQ_AMQP_CA_FILE; the system's CAs when none is given), host name included.
The node and the consumer helper both connect through it. Needs pika.
"""
from __future__ import annotations

import ssl

import pika


def parameters(url: str, ca_file: str = "") -> pika.URLParameters:
    params = pika.URLParameters(url)
    if params.ssl_options is not None:         # amqps://
        context = ssl.create_default_context(cafile=ca_file or None)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        params.ssl_options = pika.SSLOptions(context, server_hostname=params.host)
    return params
