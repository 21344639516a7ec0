"""AMQP connection parameters for delayq's URLs: `amqp://` plaintext, `amqps://` TLS verified
against a CA file (DELAYQ_AMQP_CA_FILE; the system's CAs when none is given), host name included.
The node and the consumer helper both connect through it. Needs pika.
"""
from __future__ import annotations

import logging
import ssl

import pika
import pika.exceptions

from delayq import topology

log = logging.getLogger(__name__)
PRECONDITION_FAILED = 406
NOT_FOUND = 404


def parameters(url: str, ca_file: str = "") -> pika.URLParameters:
    params = pika.URLParameters(url)
    if params.ssl_options is not None:         # amqps://
        context = ssl.create_default_context(cafile=ca_file or None)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        params.ssl_options = pika.SSLOptions(context, server_hostname=params.host)
    return params


def declare_exchange(connection: pika.BlockingConnection, channel, name: str):
    """Make sure the exchange `name` exists, as the nodes do (delayq.nodes.amqp.exchanges): one that
    exists is used as it is, a direct exchange as well as a topic one (declared as a topic exchange,
    a direct one was refused with 406 and the consumer never started); a missing one is made a
    durable topic exchange. Returns the channel to go on with (the 404 closes the one given)."""
    try:
        channel.exchange_declare(name, passive=True)
        return channel
    except pika.exceptions.ChannelClosedByBroker as e:
        if e.reply_code != NOT_FOUND:
            raise
    channel = connection.channel()
    channel.exchange_declare(name, exchange_type=topology.EXCHANGE_TYPE, durable=True)
    return channel


def declare_queue(connection: pika.BlockingConnection, channel, name: str):
    """Declare the durable quorum queue `name` (topology.QUEUE_ARGUMENTS) and return the channel to
    go on with. A queue of that name declared before as a classic queue is used as it is, with a
    warning (the broker refuses to change a queue's type; the refusal closes the channel, so the
    one returned is a new one): delete it while nothing is in it to have it made anew."""
    try:
        channel.queue_declare(name, durable=True, arguments=topology.QUEUE_ARGUMENTS)
        return channel
    except pika.exceptions.ChannelClosedByBroker as e:
        if e.reply_code != PRECONDITION_FAILED:
            raise
    log.warning("queue %s exists with other arguments (a classic queue?): used as it is; delete it "
                "while empty to have it made a quorum queue", name)
    channel = connection.channel()
    channel.queue_declare(name, passive=True)
    return channel
