#!/usr/bin/env python3
"""Screenshots of every console page, for docs/console.md: a 3-node cluster on the local services
(as the tests run it) with a few topics and tasks, each page opened in Debian's Chromium.

    .venv/bin/python scripts/console_screenshots.py        # writes docs/console/*.png (about a minute)
"""
from __future__ import annotations

import random
import sys
import tempfile
import time
from pathlib import Path

import pika
from playwright.sync_api import sync_playwright

from delayq.client.gen.delayq_thrift import ttypes
from delayq.testing import security
from delayq.testing.cluster import Cluster, wait_for
from delayq.testing.services import AMQP_URL

OUT = Path(__file__).resolve().parent.parent / "docs" / "console"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run"]


def main() -> int:
    security.install()
    OUT.mkdir(parents=True, exist_ok=True)
    rnd = random.Random(1)
    with tempfile.TemporaryDirectory() as logs, Cluster(Path(logs), shards=12, zk=True) as cl:
        nodes = [cl.add_node() for _ in range(3)]
        cl.wait_balanced()
        amqp = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
        ch = amqp.channel()
        queue = ch.queue_declare("", exclusive=True).method.queue
        with nodes[0].client() as c:
            for topic in ("orders.cancel", "push.morning"):
                c.registerService(ttypes.CallbackService(topic=topic, ttrMs=0))
                ch.queue_bind(queue, "delayq", routing_key=topic)
            c.registerService(ttypes.CallbackService(topic="billing.retry", ttrMs=0, maxRetries=0))   # no queue: fails
            c.setTopicControls(ttypes.TopicControls(topic="push.morning", maxFireRate=200.0))
            c.addClient("billing", [ttypes.Grant("submit", "billing.*"), ttypes.Grant("read", "billing.*")], False)
            specs = [ttypes.TaskSpec(topic=rnd.choice(["orders.cancel", "push.morning"]), delayMs=rnd.randrange(60_000, 7 * 86_400_000),
                                     payload=f'{{"order": {i}}}'.encode()) for i in range(2000)]
            specs += [ttypes.TaskSpec(topic="push.morning", delayMs=rnd.randrange(3_600_000, 3_900_000), payload=b"{}")
                      for _ in range(400)]
            for i in range(0, len(specs), 200):
                c.submitBatch(specs[i:i + 200])
            soon = [c.submit(ttypes.TaskSpec(topic="orders.cancel", delayMs=rnd.randrange(0, 15_000),
                                             payload=f'{{"order": {i}, "reason": "unpaid"}}'.encode())).taskId
                    for i in range(150)]
            for i in range(20):
                c.submit(ttypes.TaskSpec(topic="billing.retry", delayMs=rnd.randrange(0, 5_000), payload=b"\x00\x01binary"))
            waiting = c.submit(ttypes.TaskSpec(topic="orders.cancel", delayMs=1_800_000, key="order-42", tags=["eu", "web"],
                                               payload=b'{"order": 42, "customer": "c-7", "items": [1, 2, 3]}')).taskId
            c.submit(ttypes.TaskSpec(topic="orders.cancel", delayMs=3_600_000, key="order-42", payload=b'{"order": 42}'))
            job = c.bulkStart(ttypes.BulkRequest(action=ttypes.BulkAction.RESCHEDULE, reason="campaign moved by an hour",
                                                 filter=ttypes.TaskFilter(topic="push.morning", status=0,
                                                                          dueBeforeMs=int(time.time() * 1000) + 86_400_000),
                                                 shiftMs=3_600_000, opsPerSecond=20)).jobId
        wait_for(lambda: all(_fired(nodes[0], t) for t in soon[-5:]), 60, 0.5, "the soon tasks to fire")
        time.sleep(21)          # two history slots closed (the charts need points to draw)
        amqp.close()
        port = nodes[0].env["DELAYQ_HTTP_PORT"]
        base = f"https://localhost:{port}"
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
            page = b.new_context(ignore_https_errors=True, viewport={"width": 1280, "height": 860}).new_page()
            page.goto(base + "/ui/login")
            page.screenshot(path=str(OUT / "login.png"))
            page.fill("#token", security.admin_token())
            page.click("button[type=submit]")
            page.wait_for_url("**/ui/overview")
            page.wait_for_selector(".chart .uplot")
            page.wait_for_timeout(500)
            shots = [("overview", "/ui/overview"), ("topics", "/ui/topics"), ("topic", "/ui/topic?name=orders.cancel"),
                     ("load-day", "/ui/load?horizon=day"), ("load-week", "/ui/load?horizon=week"),
                     ("tasks", "/ui/tasks?topic=orders.cancel&state=DELAY"), ("task", f"/ui/task?id={soon[0]}"),
                     ("tasks-key", "/ui/tasks?topic=orders.cancel&key=order-42"),
                     ("bulk-new", "/ui/bulk/new?action=cancel&topic=push.morning"),
                     ("bulk-job", f"/ui/bulk/job?id={job}"), ("bulk", "/ui/bulk"),
                     ("task-waiting", f"/ui/task?id={waiting}"), ("dead", "/ui/dead"), ("access", "/ui/access"),
                     ("cluster", "/ui/cluster")]
            for name, path in shots:
                page.goto(base + path)
                if page.locator(".chart").count():
                    page.wait_for_selector(".chart .uplot", timeout=10_000)
                page.wait_for_timeout(300)
                page.screenshot(path=str(OUT / f"{name}.png"), full_page=True)
            phone = b.new_context(ignore_https_errors=True, viewport={"width": 390, "height": 844},
                                  device_scale_factor=2, is_mobile=True).new_page()
            phone.goto(base + "/ui/login")
            phone.fill("#token", security.admin_token())
            phone.click("button[type=submit]")
            phone.wait_for_url("**/ui/overview")
            phone.wait_for_selector(".chart .uplot")
            phone.screenshot(path=str(OUT / "overview-phone.png"))
            b.close()
    print(f"screenshots in {OUT}")
    return 0


def _fired(node, task_id: str) -> bool:
    with node.client() as c:
        return c.get(task_id).status != ttypes.TaskStatus.DELAY


if __name__ == "__main__":
    sys.exit(main())
