"""CPU per publish of the frame encoders: delayq's (delayq.nodes.amqp.frames), pika's, and pamqp's
when it is installed. The figure behind keeping the hand-written encoder.

    python -m bench.frames            # best of 3 rounds of 20,000 encodes each, in this process
"""
from __future__ import annotations

import datetime
import time
from typing import Callable

import pika
from pika import frame, spec

from delayq.nodes.amqp.frames import Outgoing, publish_frames

HEADERS = {"x-delayq-task-id": "0190abcdef0123456789abcd", "x-delayq-topic": "order.cancel", "x-delayq-attempt": 1,
           "x-delayq-due-at": 1_795_000_000_000, "x-delayq-dispatched-at": 1_795_000_000_003}
MSG = Outgoing("delayq", "order.cancel", b"x" * 64, "0190abcdef0123456789abcd:1", HEADERS, ref=None)
STAMP = 1_795_000_000


def delayq_frames() -> None:
    publish_frames(1, MSG, STAMP, 131_064)


def pika_frames() -> None:
    props = pika.BasicProperties(delivery_mode=2, message_id=MSG.message_id, headers=MSG.headers, timestamp=STAMP)
    frame.Method(1, spec.Basic.Publish(exchange=MSG.exchange, routing_key=MSG.routing_key, mandatory=True)).marshal()
    frame.Header(1, len(MSG.body), props).marshal()
    frame.Body(1, MSG.body).marshal()


def pamqp_frames() -> None:
    from pamqp import body, commands, frame as pframe, header
    props = commands.Basic.Properties(delivery_mode=2, message_id=MSG.message_id, headers=MSG.headers,
                                      timestamp=datetime.datetime.fromtimestamp(STAMP))
    pframe.marshal(commands.Basic.Publish(exchange=MSG.exchange, routing_key=MSG.routing_key, mandatory=True), 1)
    pframe.marshal(header.ContentHeader(0, len(MSG.body), props), 1)
    pframe.marshal(body.ContentBody(MSG.body), 1)


def per_call_us(fn: Callable[[], None], n: int = 20_000, rounds: int = 3) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.process_time()
        for _ in range(n):
            fn()
        best = min(best, time.process_time() - started)
    return best / n * 1e6


def main() -> None:
    encoders = {"delayq.nodes.amqp.frames": delayq_frames, f"pika {pika.__version__}": pika_frames}
    try:
        import pamqp
        encoders[f"pamqp {pamqp.__version__}"] = pamqp_frames
    except ImportError:
        print("(pamqp not installed: pip install pamqp to compare it)")
    ours = None
    for name, fn in encoders.items():
        us = per_call_us(fn)
        ours = ours or us
        print(f"{name:28s} {us:6.1f} us CPU per publish  ({us / ours:.1f} x delayq's)")


if __name__ == "__main__":
    main()
