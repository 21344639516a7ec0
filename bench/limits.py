"""The raw limits of this machine, measured in the same run, and the bulk loader of pending tasks.

- MariaDB: rows/s of batched INSERTs (1000 rows per statement, autocommit) into a fresh
  job_delay_task, rows shaped like the node's submits (time-ordered ids, random shard and due time).
- RabbitMQ: confirmed publishes/s through delayq.nodes.amqp.publisher.ConfirmedPublisher with a pipelined window,
  messages shaped like the node's dispatches (delayq.nodes.amqp.messages.fired) into a durable queue;
  then the rate at which bench.receiver drains them (to show the consumer is not the bottleneck).

`insert_rows` is also how scale and restart put their pending tasks straight into MySQL.
"""
from __future__ import annotations

import hashlib
import random
import threading
import time
import uuid
from pathlib import Path
from typing import Iterable, Iterator

import pymysql
from sqlalchemy.engine import make_url

from bench.machine import bench_cluster, node_amqp
from bench.receiver import TOPIC_QUEUE_ARGUMENTS, ConsumerProcess
from delayq.testing.cluster import now_ms
from delayq.testing.services import AMQP_URL

COLUMNS = ("task_id, topic, shard_id, due_ms, status, attempt, payload, spec_hash, max_retries, ttr_ms, "
           "deadline_ms, node_id, created_ms, updated_ms")


def task_rows(count: int, topic: str, shards: int, due_from_ms: int, due_span_ms: int, *, prefix: str,
              ordered: bool = False, payload: bytes = b"x" * 16, seed: int = 1) -> Iterator[str]:
    """SQL value tuples of DELAY tasks (ttr 0). ordered=True lays them out shard by shard, each in due
    order, with ids in the same order, so that both indexes fill at their ends (fast bulk loads)."""
    rng = random.Random(seed)
    now = now_ms()
    pay = payload.hex()
    spec = hashlib.blake2b(topic.encode(), digest_size=16).hexdigest()
    if ordered:
        per, extra = divmod(count, shards)
        n = 0
        for shard in range(shards):
            k = per + (1 if shard < extra else 0)
            step = due_span_ms / max(1, k)
            for j in range(k):
                due = due_from_ms + int(j * step)
                yield (f"('{prefix}{shard:05d}-{j:09d}','{topic}',{shard},{due},0,0,X'{pay}',X'{spec}',3,0,"
                       f"NULL,NULL,{now},{now})")
                n += 1
    else:
        for j in range(count):
            due = due_from_ms + rng.randrange(max(1, due_span_ms))
            yield (f"('{prefix}{now:011x}{j:09d}','{topic}',{rng.randrange(shards)},{due},0,0,X'{pay}',"
                   f"X'{spec}',3,0,NULL,NULL,{now},{now})")


def _connect(url: str):
    u = make_url(url)
    return pymysql.connect(host=u.host or "127.0.0.1", port=u.port or 3306, user=u.username or "root",
                           password=u.password or "", database=u.database, autocommit=True,
                           connect_timeout=10, read_timeout=300, write_timeout=300)


def insert_rows(url: str, rows: Iterable[str], per_statement: int = 1000, writers: int = 1) -> tuple[int, float]:
    """INSERT the rows, per_statement per statement (each its own transaction), over `writers`
    connections; returns (rows, seconds)."""
    lock = threading.Lock()
    it = iter(rows)
    total = [0]
    errors: list[BaseException] = []

    def work():
        conn = _connect(url)
        try:
            with conn.cursor() as cur:
                while True:
                    with lock:
                        chunk = [r for _, r in zip(range(per_statement), it)]
                    if not chunk:
                        return
                    cur.execute(f"INSERT INTO job_delay_task ({COLUMNS}) VALUES " + ",".join(chunk))
                    with lock:
                        total[0] += len(chunk)
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)
        finally:
            conn.close()

    started = time.perf_counter()
    threads = [threading.Thread(target=work, daemon=True) for _ in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return total[0], time.perf_counter() - started


def mysql_insert_rate(logs: Path, rows: int, shards: int = 64) -> dict:
    with bench_cluster(logs, shards=shards) as cl:
        # A table of the node's shape; rows like submits due within the next hour.
        n, secs = insert_rows(cl.url, task_rows(rows, "bench.limit", shards, now_ms() + 3_600_000, 3_600_000,
                                                prefix="l"))
    return {"rows": n, "seconds": secs, "rows_per_s": n / secs}


def amqp_confirm_rate(workdir: Path, messages: int, window: int, batch: int = 500) -> dict:
    """Confirmed publishes/s (pipelined, `window` in flight), then the consumer's drain rate."""
    import pika

    from delayq.nodes.amqp.messages import fired
    from delayq.nodes.amqp.params import amqp_parameters
    from delayq.store.values import Claimed
    from delayq.nodes.amqp.confirms import CONFIRMED
    from delayq.nodes.amqp.publisher import ConfirmedPublisher

    key = f"bench.limit.{uuid.uuid4().hex[:8]}"
    queue = f"delayq.{key}"
    conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    ch = conn.channel()
    ch.exchange_declare("delayq", exchange_type="topic", durable=True)
    ch.queue_declare(queue, durable=True, arguments=TOPIC_QUEUE_ARGUMENTS)
    ch.queue_bind(queue, "delayq", key)
    conn.close()

    done = threading.Event()
    outcomes = {"n": 0, "confirmed": 0}
    lock = threading.Lock()

    def on_outcome(_ref, outcome, _reason):
        with lock:
            outcomes["n"] += 1
            outcomes["confirmed"] += outcome == CONFIRMED
            if outcomes["n"] == messages:
                done.set()

    url, ca = node_amqp()        # the nodes' way to the broker: over TLS when security is on
    pub = ConfirmedPublisher(amqp_parameters(url, 5000, ca), max_in_flight=window,
                             exchanges=("delayq",))
    pub.start()
    consumer = None
    try:
        if not pub.wait_ready(10):
            raise RuntimeError("publisher could not connect to RabbitMQ")
        now = now_ms()
        msgs = [fired(Claimed(f"lim{i:09d}", key, 0, now, 1, b"x" * 16, 0, 3), "delayq", key, now)
                for i in range(messages)]
        started = time.perf_counter()
        for i in range(0, messages, batch):
            pub.publish(msgs[i:i + batch], on_outcome)
        if not done.wait(max(60.0, messages / 1000)):
            raise RuntimeError(f"only {outcomes['n']} of {messages} publishes settled")
        secs = time.perf_counter() - started
        result = {"messages": messages, "confirmed": outcomes["confirmed"], "seconds": secs,
                  "publishes_per_s": outcomes["confirmed"] / secs, "window": window}
        # The same messages, drained by the benchmark's consumer process.
        consumer = ConsumerProcess(queue, [key], workdir / f"{key}.txt", AMQP_URL)
        records = consumer.wait_count(messages, max(60.0, messages / 1000), quiet_s=10)
        if len(records) >= 2:
            span = (records[-1].recv_us - records[0].recv_us) / 1e6
            result["consumer_msgs_per_s"] = len(records) / span if span > 0 else float("inf")
        result["consumed"] = len(records)
        return result
    finally:
        pub.stop()
        if consumer is not None:
            consumer.stop()
        delete_queue(queue)


def delete_queue(queue: str, wait_s: float = 30.0) -> None:
    """Delete the queue (retrying while RabbitMQ is down, up to wait_s)."""
    import pika
    deadline = time.monotonic() + wait_s
    while True:
        try:
            conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
            conn.channel().queue_delete(queue)
            conn.close()
            return
        except pika.exceptions.AMQPConnectionError:
            if time.monotonic() > deadline:
                return
            time.sleep(1)
        except Exception:  # noqa: BLE001 - gone already
            return
