"""The pika internals delayq.nodes.amqp.pikaio relies on are still there, in the shape it uses.

A pika release that renames or reshapes any of them fails here, before a node's publishes do.
"""
from __future__ import annotations

import importlib.metadata
import inspect

import pika
import pika.adapters.base_connection
from pika.adapters.select_connection import SelectConnection
from pika.adapters.utils import io_services_utils

from delayq.nodes.amqp.pikaio import BatchingConnection

TESTED = ("1.4.",)


def test_pika_is_a_version_the_private_parts_were_tested_with():
    version = importlib.metadata.version("pika")
    assert version.startswith(TESTED), f"pika {version}: check delayq.nodes.amqp.pikaio"


def test_the_connection_methods_it_overrides_and_calls_keep_their_signatures():
    assert list(inspect.signature(SelectConnection._output_marshaled_frames).parameters) == \
        ["self", "marshaled_frames"]
    assert list(inspect.signature(SelectConnection._adapter_emit_data).parameters) == ["self", "data"]
    assert BatchingConnection._output_marshaled_frames is not SelectConnection._output_marshaled_frames


def test_the_connection_keeps_its_body_size_and_transport_attributes():
    connection = inspect.getsource(pika.connection.Connection)
    assert "self._body_max_length = " in connection
    adapter = inspect.getsource(pika.adapters.base_connection.BaseConnection)
    assert "self._transport = " in adapter


def test_the_plaintext_transport_keeps_its_socket_and_buffer_size():
    transport = io_services_utils._AsyncPlaintextTransport
    assert "get_write_buffer_size" in vars(io_services_utils._AsyncTransportBase)
    source = inspect.getsource(transport.__mro__[1].__init__)
    assert "self._sock = sock" in source


def test_a_connection_error_pika_prints_as_nothing_is_told_by_its_innermost_reason():
    from pika.adapters.utils.connection_workflow import AMQPConnectionWorkflowFailed, AMQPConnectorSocketConnectError

    from delayq.nodes.amqp.params import connect_error
    refused = AMQPConnectorSocketConnectError(ConnectionRefusedError(111, "Connection refused"))
    wrapped = pika.exceptions.AMQPConnectionError(AMQPConnectionWorkflowFailed([refused]))
    assert str(wrapped) == ""          # what a log line showed: "cannot connect to RabbitMQ: ; retrying"
    assert connect_error(wrapped) == "[Errno 111] Connection refused"
    assert connect_error(pika.exceptions.AMQPConnectionError()) == "AMQPConnectionError"
