"""The benchmark's downstream consumer: a process of its own, stamping each message's receive time.

    python -m bench.receiver --queue delayq.bench.x --bind bench.x --out recv.txt

declares the durable queue, binds it to the exchange for each routing key, consumes it with
auto_ack on a pika SelectConnection (the broker pushes without waiting for acks) and appends one line per message to --out:

    <receive time, epoch microseconds> <attempt> <due ms> <dispatched ms> <task id>

It prints "ready" once consuming, flushes every 100 ms, and on SIGTERM writes what it holds and
exits (deleting the queue with --delete). `ConsumerProcess` runs it and tails the file.

With --report-to QUEUE (a cluster's results queue, delayq.results.<cluster>) it reports SUCCESS for
every attempt it receives, as the consumer of a service with a time-to-run must: else each attempt
times out and fires again. The result carries the connection's user as user_id, which the nodes
take as their own (the bench's consumer and the nodes share a RabbitMQ user).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pika
from pika.adapters.select_connection import SelectConnection

# The nodes declare the results queue as a quorum queue (delayq.topology.QUEUE_ARGUMENTS): the same
# arguments here, or the broker refuses one of the two declarations.
RESULTS_QUEUE_ARGUMENTS = {"x-queue-type": "quorum"}
# The type of the topic queues the benchmark consumes (and of the raw publish limit's queue):
# classic by default, as every earlier run measured; bench.topologies asks for quorum queues on
# both sides, as production's consumers declare them (docs/consumers.md).
QUEUE_TYPE_ENV = "DELAYQ_BENCH_QUEUE_TYPE"
TOPIC_QUEUE_ARGUMENTS = {"x-queue-type": os.environ.get(QUEUE_TYPE_ENV, "classic")}
TASK_ID, ATTEMPT, DUE_AT, DISPATCHED_AT = "x-delayq-task-id", "x-delayq-attempt", "x-delayq-due-at", \
    "x-delayq-dispatched-at"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.receiver")
    p.add_argument("--amqp", default="amqp://guest:guest@127.0.0.1:5672/%2F")
    p.add_argument("--exchange", default="delayq")
    p.add_argument("--queue", required=True)
    p.add_argument("--bind", action="append", default=[], help="routing key to bind (repeatable)")
    p.add_argument("--out", required=True)
    p.add_argument("--delete", action="store_true", help="delete the queue on exit")
    p.add_argument("--report-to", help="results queue to report SUCCESS of each attempt to")
    args = p.parse_args(argv)
    params = pika.URLParameters(args.amqp)
    report_props = pika.BasicProperties(content_type="application/json", user_id=params.credentials.username)

    stop = False

    def on_term(*_):
        nonlocal stop
        stop = True
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)

    # SelectConnection, not BlockingConnection: about 40% more messages/s on one core.
    lines: list[str] = []
    append, clock = lines.append, time.time_ns
    out = open(args.out, "a", buffering=1 << 20)
    state: dict = {}

    def on_message(ch, _method, props, _body):
        h = props.headers or {}
        append(f"{clock() // 1000} {h.get(ATTEMPT, 0)} {h.get(DUE_AT, 0)} {h.get(DISPATCHED_AT, 0)} "
               f"{h.get(TASK_ID, props.message_id)}\n")
        if args.report_to and TASK_ID in h:
            ch.basic_publish("", args.report_to, json.dumps({"taskId": h[TASK_ID], "attempt": int(h.get(ATTEMPT, 1)),
                                                             "status": "SUCCESS"}), report_props)

    def flush():
        if lines:
            out.write("".join(lines))
            lines.clear()
            out.flush()

    def tick(conn, ch):
        flush()
        if stop:
            if args.delete:
                ch.queue_delete(args.queue, callback=lambda _f: conn.close())
            else:
                conn.close()
            return
        conn.ioloop.call_later(0.1, lambda: tick(conn, ch))

    def on_channel(conn, ch):
        if args.report_to:      # the nodes declare it too; whoever comes first
            ch.queue_declare(args.report_to, durable=True, arguments=RESULTS_QUEUE_ARGUMENTS)
        ch.exchange_declare(args.exchange, exchange_type="topic", durable=True,
                            callback=lambda _f: ch.queue_declare(args.queue, durable=True, arguments=TOPIC_QUEUE_ARGUMENTS,
                                                                 callback=lambda _f: bind(conn, ch, list(args.bind))))

    def bind(conn, ch, keys):
        if keys:
            ch.queue_bind(args.queue, args.exchange, keys[0], callback=lambda _f: bind(conn, ch, keys[1:]))
            return
        ch.basic_consume(args.queue, on_message, auto_ack=True)
        if not state.get("ready"):
            state["ready"] = True
            print("ready", flush=True)
        tick(conn, ch)

    def closed(conn, reason):
        if not stop:
            print(f"consumer: connection lost ({reason})", file=sys.stderr, flush=True)
        conn.ioloop.stop()

    try:
        while not stop:
            conn = SelectConnection(params,
                                    on_open_callback=lambda c: c.channel(on_open_callback=lambda ch: on_channel(c, ch)),
                                    on_open_error_callback=closed, on_close_callback=closed)
            conn.ioloop.start()
            flush()
            if not state.get("ready"):
                sys.exit(3)          # never got going: let the parent say so
            # RabbitMQ went away (restarted): the queue is durable, so reconnect and carry on.
            for _ in range(10):
                if not stop:
                    time.sleep(0.1)
    finally:
        flush()
        out.close()


@dataclass(frozen=True, slots=True)
class Record:
    recv_us: int
    attempt: int
    due_ms: int
    dispatched_ms: int
    task_id: str


class ConsumerProcess:
    """Runs `python -m bench.receiver` and reads what it wrote so far."""

    def __init__(self, queue: str, bind: list[str], out: Path, amqp: str, exchange: str = "delayq",
                 report_to: str | None = None):
        self.queue, self.out = queue, out
        out.touch()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.receiver", "--amqp", amqp, "--exchange", exchange, "--queue", queue,
             "--out", str(out), "--delete"] + [a for key in bind for a in ("--bind", key)]
            + (["--report-to", report_to] if report_to else []),
            stdout=subprocess.PIPE, stderr=None, text=True, cwd=Path(__file__).resolve().parent.parent)
        line = self.proc.stdout.readline()
        if line.strip() != "ready":
            self.proc.kill()
            raise RuntimeError(f"consumer did not start (exit {self.proc.wait()})")
        self.records: list[Record] = []
        self._fh = open(out, "r")
        self._rest = ""

    def poll(self) -> list[Record]:
        """All records so far (reads what was appended since the last call)."""
        chunk = self._fh.read()
        if chunk:
            text = self._rest + chunk
            lines = text.split("\n")
            self._rest = lines.pop()
            for line in lines:
                recv, att, due, disp, tid = line.split(" ", 4)
                self.records.append(Record(int(recv), int(att), int(due), int(disp), tid))
        return self.records

    def wait_count(self, count: int, timeout: float, quiet_s: float | None = None) -> list[Record]:
        """Until `count` distinct tasks arrived (a duplicate delivery does not count), `timeout`
        passed, or (quiet_s) nothing came for that long."""
        deadline = time.monotonic() + timeout
        last_n, last_change = -1, time.monotonic()
        while time.monotonic() < deadline:
            n = len({r.task_id for r in self.poll()})
            if n >= count:
                break
            if n != last_n:
                last_n, last_change = n, time.monotonic()
            elif quiet_s is not None and time.monotonic() - last_change > quiet_s:
                break
            time.sleep(0.05)
        return self.records

    def stop(self) -> list[Record]:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        records = self.poll()
        self._fh.close()
        return records


if __name__ == "__main__":
    main()
