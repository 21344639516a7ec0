"""One service's exchange must not stop the others: delayq checks exchanges on connections of its
own, refuses a service it cannot publish for, holds back the tasks of an exchange that went bad
while every other topic keeps firing, and retries dead letters with a backoff, never in a loop."""
from __future__ import annotations

import contextlib
import threading
import uuid

import pika
import pytest

from delayq.client import CallbackService, DelayqClient, TaskSpec, TaskStatus
from delayq.client.consumer import TaskConsumer
from delayq.client.gen.delayq_thrift import ttypes
from conftest import AMQP_URL, Collector, NodeFactory, fresh_database, now_ms, wait_until

pytestmark = pytest.mark.integration


@contextlib.contextmanager
def channel():
    conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    try:
        yield conn.channel()
    finally:
        conn.close()


def make_exchange(name: str, kind: str) -> None:
    with channel() as ch:
        ch.exchange_delete(name)
        ch.exchange_declare(name, exchange_type=kind, durable=True)


def delete_exchange(name: str) -> None:
    with channel() as ch:
        ch.exchange_delete(name)


def readyz(node) -> dict:
    return node.readyz()[1]


def test_register_service_refuses_an_exchange_it_cannot_publish_to_and_changes_none(node):
    fanout = f"ex.fanout.{uuid.uuid4().hex[:8]}"
    make_exchange(fanout, "fanout")
    try:
        with node.client() as c:
            with pytest.raises(ttypes.InvalidService) as e:
                c.registerService(CallbackService(topic=f"t.{uuid.uuid4().hex[:8]}", exchange=fanout))
            assert e.value.field == "exchange" and "fanout" in e.value.reason and fanout in e.value.reason
            with pytest.raises(ttypes.InvalidService) as e:
                c.registerService(CallbackService(topic=f"t.{uuid.uuid4().hex[:8]}", deadLetterExchange=fanout))
            assert e.value.field == "deadLetterExchange" and "fanout" in e.value.reason
            # A missing exchange is created, as a durable topic exchange.
            fresh = f"ex.new.{uuid.uuid4().hex[:8]}"
            c.registerService(CallbackService(topic=f"t.{uuid.uuid4().hex[:8]}", exchange=fresh))
        with channel() as ch:       # still the fanout exchange the business system made
            ch.exchange_declare(fanout, exchange_type="fanout", durable=True, passive=False)
            ch.exchange_declare(fresh, exchange_type="topic", durable=True)
        delete_exchange(fresh)
    finally:
        delete_exchange(fanout)


def test_an_exchange_that_went_bad_holds_back_its_topic_only_and_fires_once_fixed(tmp_path):
    bad_ex = f"ex.a.{uuid.uuid4().hex[:8]}"
    topic_a, topic_b = f"a.{uuid.uuid4().hex[:8]}", f"b.{uuid.uuid4().hex[:8]}"
    with fresh_database(8) as db:
        factory = NodeFactory(db, tmp_path)
        first = factory(DELAYQ_EXCHANGE_RECHECK_MS="1000")
        with first.client() as c:
            c.registerService(CallbackService(topic=topic_a, exchange=bad_ex, ttrMs=0))
            c.registerService(CallbackService(topic=topic_b, ttrMs=0))
        first.stop()
        # Someone replaces A's exchange with a fanout one; the node starts again (it used to
        # re-declare every exchange on its publishing channel and lose it, for every topic, forever).
        make_exchange(bad_ex, "fanout")
        spy = f"spy.{uuid.uuid4().hex[:8]}"     # what reaches the fanout exchange
        with channel() as ch:
            ch.queue_declare(spy, durable=True)
            ch.queue_bind(spy, bad_ex)
        node = factory(DELAYQ_EXCHANGE_RECHECK_MS="1000")
        got_a, got_b = None, Collector("delayq", topic_b)
        try:
            due = now_ms() + 1500
            with node.client() as c:
                a = c.submitBatch([TaskSpec(topic=topic_a, dueAtMs=due, payload=b"a") for _ in range(5)])
                b = c.submitBatch([TaskSpec(topic=topic_b, dueAtMs=due + i * 100, payload=b"b") for i in range(10)])
            fired = got_b.wait_for(len(b), 15)
            lateness = sorted(m.at_ms - m.headers["x-delayq-due-at"] for m in fired)
            assert lateness[-1] < 500, f"topic B late (ms): {lateness}"
            wait_until(lambda: node.metrics(labelled=True).get(f'delayq_tasks_held_total{{topic="{topic_a}"}}', 0)
                       >= len(a), 10, what="A's tasks to be held back")
            held = readyz(node)["detail"]["held_topics"]
            assert "fanout" in held[topic_a] and bad_ex in held[topic_a]
            with node.client() as c:
                assert "fanout" in c.cluster().nodes[0].heldTopics[topic_a]

            with channel() as ch:
                assert ch.queue_declare(spy, passive=True).method.message_count == 0
                ch.queue_delete(spy)

            # Fixed: a topic exchange again, with a queue bound. A's tasks fire, each once.
            delete_exchange(bad_ex)
            got_a = Collector(bad_ex, topic_a)
            fixed = now_ms()
            msgs = got_a.wait_for(len(a), 30)
            assert sorted(m.headers["x-delayq-task-id"] for m in msgs) == sorted(r.taskId for r in a)
            assert all(m.headers["x-delayq-attempt"] == 1 for m in msgs), "a held task is not a failed attempt"
            print(f"A fired {(max(m.at_ms for m in msgs) - fixed) / 1000:.1f} s after its exchange was fixed")
            wait_until(lambda: topic_a not in readyz(node)["detail"]["held_topics"], 10,
                       what="A to be no longer listed as held")
        finally:
            if got_a is not None:
                got_a.close()
            got_b.close()
            factory.stop_all()
            delete_exchange(bad_ex)


def test_an_unroutable_dead_letter_is_retried_with_a_backoff_and_carries_every_header(node):
    topic, dlx = f"t.{uuid.uuid4().hex[:8]}", f"dlx.{uuid.uuid4().hex[:8]}"
    with node.client() as c:
        # No queue for the topic either: its one attempt is unroutable, the task FAILED, dead-lettered.
        c.registerService(CallbackService(topic=topic, ttrMs=0, maxRetries=0, deadLetterExchange=dlx))
        before = node.metrics(labelled=True).get('delayq_dead_letter_publishes_total{outcome="unroutable"}', 0)
        task = c.submit(TaskSpec(topic=topic, delayMs=100, payload=b"nowhere"))
    try:
        unroutable = lambda: node.metrics(labelled=True).get(  # noqa: E731
            'delayq_dead_letter_publishes_total{outcome="unroutable"}', 0) - before
        wait_until(lambda: unroutable() >= 1, 15, what="the dead letter's first, unroutable publish")
        first = now_ms()
        wait_until(lambda: now_ms() - first >= 6000, 10, 0.5, what="six seconds of retries")
        assert 1 <= unroutable() <= 4, f"{unroutable()} publishes in 6 s: a loop, not a backoff"

        dead = Collector(dlx, topic)
        try:
            [msg] = dead.wait_for(1, 30)
            h = msg.headers
            assert h["x-delayq-task-id"] == task.taskId and h["x-delayq-status"] == "FAILED"
            assert h["x-delayq-attempt"] == 1 and h["x-delayq-due-at"] == task.dueAtMs
            assert {"x-delayq-topic", "x-delayq-dispatched-at", "x-delayq-reason"} <= set(h)
            assert task.dueAtMs <= h["x-delayq-dispatched-at"] <= msg.at_ms
        finally:
            dead.close()
    finally:
        delete_exchange(dlx)


def test_re_registering_a_held_topic_on_a_good_exchange_releases_its_tasks(node_factory):
    bad_ex, good_ex = f"ex.bad.{uuid.uuid4().hex[:8]}", f"ex.good.{uuid.uuid4().hex[:8]}"
    topic = f"r.{uuid.uuid4().hex[:8]}"
    node = node_factory(DELAYQ_EXCHANGE_RECHECK_MS="1000")
    got = None
    try:
        with node.client() as c:
            c.registerService(CallbackService(topic=topic, exchange=bad_ex, ttrMs=0))
        make_exchange(bad_ex, "fanout")     # went bad after it was registered
        with node.client() as c:
            tasks = c.submitBatch([TaskSpec(topic=topic, delayMs=200, payload=b"r") for _ in range(3)])
        wait_until(lambda: topic in readyz(node)["detail"]["held_topics"], 15, what="the topic to be held")
        assert readyz(node)["status"] == "ok", "one held topic does not make the node unready"

        got = Collector(good_ex, topic)
        with node.client() as c:
            c.registerService(CallbackService(topic=topic, exchange=good_ex, ttrMs=0))
        msgs = got.wait_for(len(tasks), 30)
        assert sorted(m.headers["x-delayq-task-id"] for m in msgs) == sorted(t.taskId for t in tasks)
        wait_until(lambda: topic not in readyz(node)["detail"]["held_topics"], 10,
                   what="the topic to be no longer listed as held")
    finally:
        if got is not None:
            got.close()
        delete_exchange(bad_ex)
        delete_exchange(good_ex)


def test_the_consumer_helper_takes_the_tasks_of_a_topic_on_a_direct_exchange(node):
    """A service may name a direct exchange of its own (the nodes publish to it as it is): the
    helper, given it, binds to it as it is too (it declared it a topic exchange, which RabbitMQ
    refused, and never started)."""
    exchange, topic = f"ex.direct.{uuid.uuid4().hex[:8]}", f"d.{uuid.uuid4().hex[:8]}"
    make_exchange(exchange, "direct")
    handled: list[str] = []
    consumer = TaskConsumer(topic, lambda task: handled.append(task.task_id), results=DelayqClient([node.endpoint]),
                            amqp_url=AMQP_URL, exchange=exchange, routing_key="cancel")
    thread = threading.Thread(target=consumer.run, daemon=True)
    thread.start()
    try:
        with node.client() as c:
            c.registerService(CallbackService(topic=topic, exchange=exchange, routingKey="cancel", ttrMs=5000))
            assert consumer.wait_ready(10), "the consumer did not start on a direct exchange"
            ref = c.submit(TaskSpec(topic=topic, delayMs=200, payload=b"d"))
            wait_until(lambda: c.get(ref.taskId).status == TaskStatus.FINISHED, 15, what="the task to be handled")
        assert handled == [ref.taskId]
    finally:
        consumer.stop()
        thread.join(10)
        delete_exchange(exchange)
