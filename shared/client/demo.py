"""The demo: registers the topic `demo`, consumes it with the TaskConsumer, submits tasks due over a
few seconds and prints each as it fires, with its lateness. One task fails its first attempt on
purpose, to show a retry; the demo ends when every task has finished."""
from __future__ import annotations

import threading
import time

import click

from delayq.client import CallbackService, DelayqClient, TaskSpec, TaskStatus
from delayq.client.consumer import Delivery, RetryLater, TaskConsumer


def run_demo(endpoints: list[str], amqp_url: str, tasks: int, spread_ms: int, timeout_s: float) -> bool:
    run = f"{int(time.time())}"
    flaky = f"demo-{run}-0"
    ids = [f"demo-{run}-{i}" for i in range(tasks)]
    finished: set[str] = set()
    lock = threading.Lock()

    def handle(task: Delivery) -> None:
        if task.task_id not in ids:     # left in the topic by an earlier demo, or sent to it by hand
            click.echo(f"  fired {task.task_id} attempt {task.attempt}: not one of this demo's tasks (finished)")
            return
        late = int(time.time() * 1000) - task.due_at_ms
        click.echo(f"  fired {task.task_id} attempt {task.attempt}: payload {task.payload.decode()!r}, "
                   f"{late} ms after its due time")
        if task.task_id == flaky and task.attempt == 1:
            raise RetryLater("failing the first attempt on purpose")
        with lock:
            finished.add(task.task_id)

    with DelayqClient(endpoints) as admin:
        admin.registerService(CallbackService(topic="demo", ttrMs=10_000, maxRetries=2, backoff="fixed",
                                              retryBackoffMs=1000))
    consumer = TaskConsumer("demo", handle, results=DelayqClient(endpoints), amqp_url=amqp_url)
    thread = threading.Thread(target=consumer.run, name="demo-consumer", daemon=True)
    thread.start()
    if not consumer.wait_ready(10):
        raise click.ClickException("the demo consumer could not reach RabbitMQ")
    step = spread_ms // max(1, tasks - 1) if tasks > 1 else 0
    with DelayqClient(endpoints) as dq:
        refs = dq.submitBatch([TaskSpec(topic="demo", taskId=tid, delayMs=1000 + i * step,
                                        payload=f"hello #{i}".encode()) for i, tid in enumerate(ids)])
        click.echo(f"submitted {len(refs)} tasks due over the next {(1000 + spread_ms) / 1000:.1f} s")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with lock:
                if len(finished) == len(ids):
                    break
            time.sleep(0.1)
        consumer.stop()
        thread.join(5)
        info = dq.get(flaky)
        click.echo(f"task {flaky}: {TaskStatus._VALUES_TO_NAMES[info.status]} after {info.attempt} attempts:")
        for a in info.attempts:
            click.echo(f"  attempt {a.attempt} on {a.nodeId}: {a.result or 'pending'} {a.message or ''}".rstrip())
    ok = len(finished) == len(ids)
    click.echo(f"{len(finished)}/{len(ids)} tasks finished" + ("" if ok else " before the timeout"))
    return ok
