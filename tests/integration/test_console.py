"""The web console on a real 3-node cluster (real MySQL, RabbitMQ, ZooKeeper), over HTTPS on the
nodes' HTTP ports: its protocol rules over plain HTTP requests, and what a person does in Debian's
Chromium driven by Playwright (no browser download: /usr/bin/chromium)."""
from __future__ import annotations

import http.cookiejar
import re
import shutil
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from delayq.client.gen.delayq_thrift import ttypes
from delayq import config, db as dbm
from delayq.store.audit import AuditLog
from delayq.testing import security
from conftest import wait_until, zk_cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run"]
TOPIC = "console.orders"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with zk_cluster(tmp_path_factory.mktemp("console"), shards=6, count=3) as (db, nodes):
        with nodes[0].client() as c:
            c.registerService(ttypes.CallbackService(topic=TOPIC, ttrMs=0))
            viewer = c.addClient("viewer", [ttypes.Grant("read", "*")], False)
        yield db, nodes, viewer


def base(node) -> str:
    return f"https://localhost:{node.env['DELAYQ_HTTP_PORT']}"


def opener(certificate: str | None = None, jar: http.cookiejar.CookieJar | None = None):
    """A browser-like HTTPS client trusting the cluster's CA, presenting the client certificate
    `certificate` (a name of the test set) if given; `jar` to share cookies with another."""
    ctx = ssl.create_default_context(cafile=str(security.ensure() / "ca.pem"))
    if certificate:
        ctx.load_cert_chain(security.ensure() / f"{certificate}.pem", security.ensure() / f"{certificate}.key")
    jar = jar if jar is not None else http.cookiejar.CookieJar()
    return urllib.request.build_opener(urllib.request.HTTPSHandler(context=ctx),
                                       urllib.request.HTTPCookieProcessor(jar)), jar


def submit(node, payload: bytes = b'{"order": 42}', delay_ms: int = 600_000) -> str:
    with node.client() as c:
        return c.submit(ttypes.TaskSpec(topic=TOPIC, delayMs=delay_ms, payload=payload)).taskId


def status_of(node, task_id: str) -> int:
    with node.client() as c:
        return c.get(task_id).status


# ---- HTTP: the rules every browser meets ----------------------------------------------------------


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def test_plain_http_is_sent_to_https_and_metrics_stay_plain(cluster):
    _, nodes, _ = cluster
    port = nodes[0].env["DELAYQ_HTTP_PORT"]
    plain = urllib.request.build_opener(NoRedirect)
    with pytest.raises(urllib.error.HTTPError) as e:
        plain.open(f"http://localhost:{port}/ui/overview", timeout=5)
    assert e.value.code == 303 and e.value.headers["Location"] == f"https://localhost:{port}/ui/overview"
    with urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/history", headers={
            "Authorization": f"Bearer {security.admin_token()}"}), timeout=5) as r:      # an admin's, or a node's
        assert r.status == 200 and "slots" in r.read().decode()
    assert "delayq_queue_size" in nodes[0].metrics()


def test_a_bad_token_is_refused_and_a_session_cookie_is_strict(cluster):
    _, nodes, _ = cluster
    op, jar = opener()
    with pytest.raises(urllib.error.HTTPError) as e:
        op.open(base(nodes[0]) + "/ui/login", data=b"token=nobody.secret", timeout=5)
    assert e.value.code == 401 and "nobody.secret" not in e.value.read().decode()
    r = op.open(base(nodes[0]) + "/ui/login", data=urllib.parse.urlencode({"token": security.admin_token()}).encode(),
                timeout=5)
    assert r.url.endswith("/ui/overview")
    cookie, = list(jar)
    assert cookie.secure and cookie.has_nonstandard_attr("HttpOnly")
    assert cookie.get_nonstandard_attr("SameSite") == "Strict"


def test_a_client_certificate_logs_in_over_tls_and_its_cookie_alone_does_not(cluster):
    _, nodes, _ = cluster
    with_cert, jar = opener(security.ADMIN)
    page = with_cert.open(base(nodes[0]) + "/ui/login", timeout=5).read().decode()
    assert f"Log in as <strong>{security.ADMIN}</strong> with your certificate" in page
    assert "with your certificate" not in opener()[0].open(base(nodes[0]) + "/ui/login", timeout=5).read().decode()

    r = with_cert.open(base(nodes[0]) + "/ui/login", data=b"with=certificate", timeout=5)
    assert r.url.endswith("/ui/overview") and security.ADMIN in r.read().decode()
    # The same cookie from a connection without the certificate ends the session.
    without, _ = opener(jar=jar)
    r = without.open(base(nodes[0]) + "/ui/overview", timeout=5)
    assert "/ui/login?why=" in r.url and "no longer presents the certificate" in r.read().decode()


def test_an_action_without_the_csrf_token_is_refused(cluster):
    _, nodes, _ = cluster
    task_id = submit(nodes[0])
    op, _ = opener()
    op.open(base(nodes[0]) + "/ui/login", data=urllib.parse.urlencode({"token": security.admin_token()}).encode(),
            timeout=5)
    with pytest.raises(urllib.error.HTTPError) as e:
        op.open(base(nodes[0]) + "/ui/task/cancel", data=urllib.parse.urlencode({"id": task_id}).encode(), timeout=5)
    assert e.value.code == 403
    page = op.open(base(nodes[0]) + "/ui/overview", timeout=5).read().decode()
    csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
    forged = urllib.request.Request(base(nodes[0]) + "/ui/task/cancel", headers={"Origin": "https://evil.example"},
                                    data=urllib.parse.urlencode({"id": task_id, "csrf": csrf}).encode())
    with pytest.raises(urllib.error.HTTPError) as e:
        op.open(forged, timeout=5)
    assert e.value.code == 403
    assert status_of(nodes[0], task_id) == ttypes.TaskStatus.DELAY


def test_reschedule_from_the_task_page_moves_its_due_time(cluster):
    _, nodes, _ = cluster
    task_id = submit(nodes[0], delay_ms=60_000)
    op, _ = opener()
    page = op.open(base(nodes[2]) + "/ui/login", data=urllib.parse.urlencode({"token": security.admin_token()}).encode(),
                   timeout=5).read().decode()
    csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
    before = time.time() * 1000
    done = op.open(base(nodes[2]) + "/ui/task/reschedule", timeout=10, data=urllib.parse.urlencode(
        {"id": task_id, "csrf": csrf, "in_minutes": "30"}).encode()).read().decode()
    assert "now due at" in done
    with nodes[0].client() as c:
        due = c.get(task_id).dueAtMs
    assert before + 29 * 60_000 < due < time.time() * 1000 + 31 * 60_000
    bad = op.open(base(nodes[2]) + "/ui/task/reschedule", timeout=10, data=urllib.parse.urlencode(
        {"id": task_id, "csrf": csrf, "in_minutes": "soon"}).encode()).read().decode()
    assert "in minutes: not a whole number: &#39;soon&#39;" in bad


def test_rebalance_from_the_console_is_the_admin_call_and_is_audited(cluster):
    db, nodes, _ = cluster
    op, _ = opener()
    page = op.open(base(nodes[1]) + "/ui/login", data=urllib.parse.urlencode({"token": security.admin_token()}).encode(),
                   timeout=5).read().decode()
    csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
    done = op.open(base(nodes[1]) + "/ui/cluster/layout",
                   data=urllib.parse.urlencode({"action": "rebalance", "csrf": csrf}).encode(), timeout=10).read().decode()
    assert "rebalance recorded" in done
    engine = dbm.make_engine(config.load({"DELAYQ_MYSQL_URL": db.url}).mysql)
    rows = AuditLog(engine).list(action="rebalance")
    engine.dispose()
    assert [(r.actor, r.outcome) for r in rows] == [(security.ADMIN, "ok")]


def test_a_dead_letter_group_is_shown_with_its_count_then_discarded(cluster, browser):
    db, nodes, _ = cluster
    with nodes[0].client() as c:
        c.registerService(ttypes.CallbackService(topic="console.nowhere", ttrMs=0, maxRetries=0))   # no queue bound
        ids = [c.submit(ttypes.TaskSpec(topic="console.nowhere", delayMs=0, payload=b"x")).taskId for _ in range(3)]
    wait_until(lambda: all(status_of(nodes[0], i) == ttypes.TaskStatus.FAILED for i in ids), 20, 0.2,
               what="the unroutable tasks to fail")
    page = login(browser, nodes[0], security.admin_token())
    page.goto(base(nodes[0]) + "/ui/dead")
    row = page.locator("tr", has_text="console.nowhere")
    assert row.locator("td.num").text_content() == "3"
    row.locator("a.button").click()
    assert page.text_content("#confirm-discard") == "Discard 3 tasks"
    page.click("#confirm-discard")
    page.wait_for_selector(".banner.ok")
    assert "discarded 3 failed tasks of console.nowhere" in page.text_content(".banner.ok")
    assert page.locator("tr", has_text="console.nowhere").count() == 0
    with nodes[0].client() as c:
        for i in ids:
            with pytest.raises(ttypes.NotFound):
                c.get(i)
    engine = dbm.make_engine(config.load({"DELAYQ_MYSQL_URL": db.url}).mysql)
    rows = AuditLog(engine).list(action="discard")
    engine.dispose()
    assert [(r.actor, r.outcome) for r in rows] == [(security.ADMIN, "discarded 3")]
    page.context.close()


# ---- in Chromium -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser():
    if not shutil.which(CHROMIUM):
        pytest.fail("Debian's chromium is not installed: scripts/test.sh installs it")
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, timeout=30_000)
        yield b
        b.close()


def login(browser, node, token: str):
    page = browser.new_context(ignore_https_errors=True, viewport={"width": 1280, "height": 900}).new_page()
    page.set_default_timeout(15_000)
    page.goto(base(node) + "/ui/")
    page.fill("#token", token)
    page.click("button[type=submit]")
    page.wait_for_url("**/ui/overview")
    return page


def test_a_browser_with_a_client_certificate_logs_in_with_one_click(cluster, browser):
    _, nodes, _ = cluster
    tls = security.ensure()
    context = browser.new_context(ignore_https_errors=True, client_certificates=[{
        "origin": base(nodes[0]), "certPath": str(tls / f"{security.ADMIN}.pem"), "keyPath": str(tls / f"{security.ADMIN}.key")}])
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.goto(base(nodes[0]) + "/ui/")
    page.click("form.certificate button")
    page.wait_for_url("**/ui/overview")
    assert security.ADMIN in page.locator("header").inner_text()
    context.close()


def test_overview_shows_every_node_and_the_master(cluster, browser):
    _, nodes, _ = cluster
    page = login(browser, nodes[1], security.admin_token())
    rows = page.locator("table.nodes tbody tr")
    assert rows.count() == 3
    assert page.locator("table.nodes .tag.master").count() == 1
    wait_until(lambda: page.locator("table.nodes .ok").count() == 3, 10, 0.2, what="three ready nodes")
    page.wait_for_selector(".chart .uplot")              # the charts drew (uPlot, from the package)
    page.context.close()


def test_find_a_task_by_id_see_its_payload_escaped_and_cancel_it(cluster, browser):
    db, nodes, _ = cluster
    task_id = submit(nodes[0], payload=b"<script>window.pwned = 1</script>")
    page = login(browser, nodes[2], security.admin_token())
    page.click("text=Tasks")
    page.fill("input[name=id]", task_id)
    page.click("form.search >> nth=0 >> button")
    page.wait_for_selector("#task-state")
    assert page.text_content("#task-state") == "DELAY"
    assert page.text_content("#payload") == "<script>window.pwned = 1</script>"
    assert page.evaluate("window.pwned") is None
    page.once("dialog", lambda d: d.accept())
    page.click("#cancel")
    page.wait_for_selector(".banner.ok")
    assert "CANCELLED" in page.text_content(".banner.ok")
    assert page.text_content("#task-state") == "CANCELLED"
    assert status_of(nodes[0], task_id) == ttypes.TaskStatus.CANCELLED
    engine = dbm.make_engine(config.load({"DELAYQ_MYSQL_URL": db.url}).mysql)
    rows = AuditLog(engine).list(action="cancel", actor=security.ADMIN)
    engine.dispose()
    assert any(r.target == task_id and r.outcome == "CANCELLED" for r in rows)
    # The topic's list by keyset: the task is listed with its state.
    page.goto(base(nodes[2]) + "/ui/tasks?" + urllib.parse.urlencode({"topic": TOPIC, "state": "CANCELLED"}))
    assert page.locator(f"text={task_id}").count() == 1
    page.context.close()


def test_pause_a_topic_from_the_console_then_resume(cluster, browser):
    _, nodes, _ = cluster
    page = login(browser, nodes[0], security.admin_token())
    page.goto(base(nodes[0]) + "/ui/topic?name=" + TOPIC)
    page.click("#pause")
    page.wait_for_selector("#resume")
    assert page.text_content("#topic-state") == "paused"
    with nodes[0].client() as c:
        assert {t.topic: t.paused for t in c.listTopicControls()}[TOPIC]
    # A pause holds on every node within a second (docs/flow-control.md): the task may be any node's.
    paused = f'delayq_topic_paused{{topic="{TOPIC}"}}'
    wait_until(lambda: all(n.metrics(labelled=True).get(paused) == 1 for n in nodes), 5, 0.05,
               what="every node to hold the pause")
    with nodes[0].client() as c:
        due = c.submit(ttypes.TaskSpec(topic=TOPIC, delayMs=0, payload=b"x")).taskId
    assert status_of(nodes[0], due) == ttypes.TaskStatus.DELAY
    page.click("#resume")
    page.wait_for_selector("#pause")
    wait_until(lambda: status_of(nodes[0], due) != ttypes.TaskStatus.DELAY, 15, 0.2, what="the task to fire on resume")
    page.context.close()


def test_a_read_only_client_sees_no_action_and_a_forged_one_is_refused(cluster, browser):
    _, nodes, viewer = cluster
    task_id = submit(nodes[0])
    page = login(browser, nodes[0], viewer)
    assert "read-only" in page.text_content(".who")
    page.goto(base(nodes[0]) + "/ui/task?id=" + task_id)
    assert page.text_content("#task-state") == "DELAY"
    assert page.locator("#cancel").count() == 0 and page.locator("form[action='/ui/task/cancel']").count() == 0
    csrf = page.get_attribute("form.who input[name=csrf]", "value")
    r = page.request.post(base(nodes[0]) + "/ui/task/cancel", form={"id": task_id, "csrf": csrf})
    assert r.ok and "not allowed" in r.text()           # the cancel call's own refusal, shown
    assert status_of(nodes[0], task_id) == ttypes.TaskStatus.DELAY
    r = page.request.post(base(nodes[0]) + "/ui/task/cancel", form={"id": task_id})
    assert r.status == 403
    page.goto(base(nodes[0]) + "/ui/topics")
    assert page.locator("button[value=pause]").count() == 0
    for path, text in (("/ui/access", "admin clients only"), ("/ui/cluster", "admin clients only"),
                       ("/ui/overview", "shown to admin clients"), ("/ui/dead", "Dead letters"),
                       ("/ui/load", "Upcoming load")):
        page.goto(base(nodes[0]) + path)
        assert text in page.content(), path
    assert page.locator("form[action='/ui/cluster/layout']").count() == 0
    page.context.close()


def test_an_escaped_search_and_the_pages_answer(cluster, browser):
    _, nodes, _ = cluster
    page = login(browser, nodes[0], security.admin_token())
    page.goto(base(nodes[0]) + "/ui/tasks?topic=%3Cscript%3Ewindow.pwned%3D1%3C%2Fscript%3E&state=DELAY")
    assert page.evaluate("window.pwned") is None
    assert page.input_value("input[name=topic]") == "<script>window.pwned=1</script>"
    for path, text in (("/ui/topics", TOPIC), ("/ui/load", "Upcoming load"), ("/ui/dead", "Dead letters"),
                       ("/ui/access", "viewer"), ("/ui/cluster", "Drain")):
        page.goto(base(nodes[0]) + path)
        assert text in page.content(), path
    page.set_viewport_size({"width": 390, "height": 844})         # a phone: nothing wider than the screen
    page.goto(base(nodes[0]) + "/ui/overview")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390 + 1
    page.context.close()


def test_find_by_key_then_cancel_every_match_through_a_bulk_job(cluster, browser):
    db, nodes, _ = cluster
    with nodes[0].client() as c:
        c.registerService(ttypes.CallbackService(topic="console.bulk", ttrMs=0))
        ids = [c.submit(ttypes.TaskSpec(topic="console.bulk", delayMs=600_000, payload=b"{}", key=f"order-{i % 2}",
                                        tags=["eu"])).taskId for i in range(4)]
    page = login(browser, nodes[1], security.admin_token())
    page.goto(base(nodes[1]) + "/ui/tasks?" + urllib.parse.urlencode({"topic": "console.bulk", "key": "order-1"}))
    assert page.locator("table.tasks tbody tr").count() == 2
    page.click(f"text={ids[1]}")
    assert page.text_content("#task-key") == "order-1"
    page.goto(base(nodes[1]) + "/ui/tasks?" + urllib.parse.urlencode({"topic": "console.bulk", "state": "DELAY"}))
    page.click("#bulk-cancel")
    assert page.text_content("#bulk-count") == "4"
    page.fill("input[name=reason]", "orders withdrawn")
    page.click("#bulk-start")
    page.wait_for_url("**/ui/bulk/job?id=*")
    wait_until(lambda: all(status_of(nodes[0], i) == ttypes.TaskStatus.CANCELLED for i in ids), 30, 0.2,
               what="the bulk job to cancel every match")
    page.reload()
    assert page.text_content("#bulk-changed") == "4"
    page.goto(base(nodes[1]) + "/ui/bulk")
    assert "orders withdrawn" in page.text_content("table")
    page.context.close()
