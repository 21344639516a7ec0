"""Unit tests for delayq.nodes.amqp.frames.publish_frames: the publisher writes the frames of a publish
itself; they must be byte for byte what pika's basic_publish would have sent (pure)."""
from __future__ import annotations

import math

import pika
import pytest
from pika import frame, spec

from delayq.nodes.amqp.frames import Outgoing, publish_frames


def _pikas(channel: int, msg: Outgoing, timestamp: int, body_max: int) -> list[bytes]:
    """What pika's Connection._send_message marshals for basic_publish(..., mandatory=True)."""
    props = pika.BasicProperties(delivery_mode=2, message_id=msg.message_id, headers=msg.headers,
                                 timestamp=timestamp)
    out = [frame.Method(channel, spec.Basic.Publish(exchange=msg.exchange, routing_key=msg.routing_key,
                                                    mandatory=True)).marshal(),
           frame.Header(channel, len(msg.body), props).marshal()]
    for i in range(math.ceil(len(msg.body) / body_max)):
        out.append(frame.Body(channel, msg.body[i * body_max:(i + 1) * body_max]).marshal())
    return out


@pytest.mark.parametrize("headers, body", [
    ({"x-delayq-task-id": "0190abcdef0123456789", "x-delayq-topic": "order.cancel", "x-delayq-attempt": 1,
      "x-delayq-due-at": 1_795_000_000_000, "x-delayq-dispatched-at": 1_795_000_000_003}, b"payload"),
    ({"x-delayq-status": "FAILED", "x-delayq-reason": "gave up: caf\u00e9 \u2603", "x-delayq-attempt": 4}, b""),
    ({"small": -5, "edge": 2 ** 31 - 1, "over": 2 ** 31, "under": -2 ** 31 - 1, "yes": True, "no": False}, b"x"),
    ({}, bytes(range(256)) * 600),          # a body over several frames
])
def test_the_frames_are_the_ones_pika_writes(headers, body):
    msg = Outgoing("delayq", "order.cancel", body, "0190abcdef0123456789:1", headers, ref=None)
    assert publish_frames(1, msg, 1_795_000_000, 131_064) == _pikas(1, msg, 1_795_000_000, 131_064)
    assert publish_frames(7, msg, 0, 4_096) == _pikas(7, msg, 0, 4_096)


@pytest.mark.parametrize("value", [b"raw bytes", 1.5, None, {"nested": 1}, [1, 2]])
def test_a_header_value_of_another_type_is_left_to_pika(value):
    msg = Outgoing("delayq", "k", b"", "id:1", {"h": value}, ref=None)
    assert publish_frames(1, msg, 0, 4_096) is None


def test_a_name_over_255_bytes_is_refused_rather_than_cut():
    msg = Outgoing("delayq", "k" * 256, b"", "id:1", {}, ref=None)
    with pytest.raises(ValueError):
        publish_frames(1, msg, 0, 4_096)
