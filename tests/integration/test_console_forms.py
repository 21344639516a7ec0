"""The console's forms refusing what they should, on a real node over HTTPS, as a person (or curl)
sees it: the status, and the message the next page shows naming what is wrong; never a 500 nor a
traceback in the node's log. Also the logout: CSRF-checked like every POST, and the end of the
session on the node."""
from __future__ import annotations

import html
import http.cookiejar
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request

import pytest

from delayq.client.gen.delayq_thrift import ttypes
from delayq.testing import security
from conftest import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


class Browser:
    """A logged-in session of the console: posts forms with its CSRF token, and reads the message
    the page it is sent to shows."""

    def __init__(self, node):
        self.base = f"https://localhost:{node.env['DELAYQ_HTTP_PORT']}"
        ctx = ssl.create_default_context(cafile=str(security.ensure() / "ca.pem"))
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=ctx),
                                                  urllib.request.HTTPCookieProcessor(self.jar), NoRedirect)
        status, headers, _ = self.open("/ui/login", {"token": security.admin_token()}, csrf=False)
        assert status == 303 and headers["Location"] == "/ui/overview"
        self.csrf = re.search(r'name="csrf" value="([^"]+)"', self.open("/ui/overview")[2]).group(1)

    def open(self, path: str, form: dict | None = None, csrf: bool = True, headers: dict | None = None):
        data = None
        if form is not None:
            data = urllib.parse.urlencode({**form, **({"csrf": self.csrf} if csrf else {})}).encode()
        request = urllib.request.Request(self.base + path, data=data, headers=headers or {})
        try:
            with self.opener.open(request, timeout=10) as r:
                return r.status, r.headers, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read().decode()

    def act(self, path: str, form: dict) -> str:
        """POST a form as the page would; the error the page it leads to shows (asserting it is one)."""
        status, headers, _ = self.open(path, form)
        assert status == 303, (path, form, status)
        _, _, page = self.open(headers["Location"])
        shown = re.search(r'<p class="banner (ok|error)"[^>]*>(.*?)</p>', page, re.S)
        assert shown is not None, (path, form, "no message shown")
        assert shown.group(1) == "error", (path, form, shown.group(2))
        return html.unescape(shown.group(2))

    def problem(self, path: str, status: int) -> str:
        """A page read with a bad query: its status and the message it shows."""
        got, _, page = self.open(path)
        assert got == status, (path, got)
        shown = re.search(r'<p class="banner error"[^>]*>(.*?)</p>', page, re.S)
        assert shown is not None, (path, "no message shown")
        return html.unescape(shown.group(1))


@pytest.fixture(scope="module")
def orders(node) -> str:
    with node.client() as c:
        c.registerService(ttypes.CallbackService(topic="forms.orders", ttrMs=0))
    return "forms.orders"


@pytest.fixture
def clean_log(node):
    """The node logs no traceback while the test runs."""
    before = node.log_path.read_text(errors="replace").count("Traceback")
    yield
    assert node.log_path.read_text(errors="replace").count("Traceback") == before, node.log_tail(40)


def test_a_topic_form_naming_no_topic_or_no_action_is_refused_with_a_message(node, orders, clean_log):
    b = Browser(node)
    assert b.act("/ui/topics/controls", {"topic": "nosuch.topic", "action": "pause"}) == \
        "topic: no topic 'nosuch.topic' (no enabled callback service has it)"
    assert b.act("/ui/topics/controls", {"topic": "bad\x01topic", "action": "pause"}) == \
        "topic: no topic 'bad\\x01topic' (no enabled callback service has it)"
    assert b.act("/ui/topics/controls", {"topic": "", "action": "pause"}) == "topic: missing: say which topic"
    assert b.act("/ui/topics/controls", {"topic": orders, "action": "explode"}) == \
        "action: 'explode' is not one of pause, resume, limits"
    assert b.act("/ui/topics/controls", {"topic": orders, "action": "limits", "max_fire_rate": "-5"}).startswith(
        "max fire rate: must be 0 (no limit) or a number of tasks/s")
    assert b.act("/ui/topics/controls", {"topic": orders, "action": "limits", "fire_burst": "-5"}) == \
        "burst: must be between 0 (no limit) and 10000000"
    with node.client() as c:
        controls = {t.topic: t for t in c.listTopicControls()}[orders]
    assert not controls.paused and controls.maxFireRate is None and controls.fireBurst is None


def test_a_reschedule_by_negative_minutes_is_refused_and_the_task_stays(node, orders, clean_log):
    with node.client() as c:
        ref = c.submit(ttypes.TaskSpec(topic=orders, delayMs=600_000, payload=b"{}"))
    b = Browser(node)
    assert b.act("/ui/task/reschedule", {"id": ref.taskId, "in_minutes": "-5"}) == \
        "in minutes: must be 0 or more, not -5"
    assert b.act("/ui/task/reschedule", {"id": ref.taskId, "in_minutes": "soon"}) == \
        "in minutes: not a whole number: 'soon'"
    with node.client() as c:
        info = c.get(ref.taskId)
    assert info.status == ttypes.TaskStatus.DELAY and info.dueAtMs == ref.dueAtMs


def test_a_dead_letter_group_is_redriven_only_with_a_count_it_still_holds(node, clean_log):
    with node.client() as c:
        c.registerService(ttypes.CallbackService(topic="forms.nowhere", ttrMs=0, maxRetries=0))    # no queue bound
        ids = [c.submit(ttypes.TaskSpec(topic="forms.nowhere", delayMs=0, payload=b"x")).taskId for _ in range(3)]
    wait_until(lambda: all(node_status(node, i) == ttypes.TaskStatus.FAILED for i in ids), 20, 0.2,
               what="the unroutable tasks to fail")
    with node.client() as c:       # a task redriven by mistake would wait, not fail again at once
        c.setTopicControls(ttypes.TopicControls(topic="forms.nowhere", paused=True))
    b = Browser(node)
    page = b.open("/ui/dead")[2]
    fp = html.unescape(re.search(r'href="/ui/dead\?topic=forms.nowhere&amp;fp=([^"]+)"', page).group(1))
    fp = urllib.parse.unquote_plus(fp)
    group = {"topic": "forms.nowhere", "fp": fp}
    assert b.act("/ui/dead/redrive", {**group, "count": "-1"}) == "count: must be 1 or more, not -1"
    assert b.act("/ui/dead/redrive", {**group, "count": "0"}) == "count: must be 1 or more, not 0"
    assert b.act("/ui/dead/discard", {**group, "count": "x"}) == "count: not a whole number: 'x'"
    assert b.act("/ui/dead/redrive", {**group}).startswith("count: missing")
    assert b.act("/ui/dead/redrive", {**group, "count": "4"}) == \
        "count: the group holds 3 dead letters now, fewer than the 4 asked for: look at it again"
    assert [node_status(node, i) for i in ids] == [ttypes.TaskStatus.FAILED] * 3
    assert b.problem("/ui/dead?topic=forms.nowhere&fp=nothing+like+it", 200) == \
        "that group has no dead letters any more (redriven, discarded or purged meanwhile)"


def node_status(node, task_id: str) -> int:
    with node.client() as c:
        return c.get(task_id).status


def test_a_bulk_job_starts_only_bounded_by_the_count_shown(node, orders, clean_log):
    with node.client() as c:
        c.submit(ttypes.TaskSpec(topic=orders, delayMs=600_000, payload=b"{}"))
        before = len(c.bulkList(100))
    b = Browser(node)
    job = {"action": "cancel", "topic": orders, "reason": "test"}
    assert b.act("/ui/bulk/start", job) == "count: missing: the count shown, which bounds the job, is required"
    assert b.act("/ui/bulk/start", {**job, "count": "-3"}) == "count: must be 1 or more, not -3"
    assert b.act("/ui/bulk/start", {**job, "action": "explode", "count": "1"}) == \
        "action: 'explode' is not one of cancel, reschedule, redrive"
    with node.client() as c:
        assert len(c.bulkList(100)) == before
    assert b.problem(f"/ui/bulk/new?action=cancel&topic={orders}&since=soon", 400) == \
        "from: not a time: expected epoch milliseconds from 0 to 253402300799999, not 'soon'"


def test_a_bad_search_names_the_field_and_what_it_takes(node, orders, clean_log):
    b = Browser(node)
    search = f"/ui/tasks?topic={orders}"
    assert b.problem(search + "&state=DELAY&after=garbage", 400) == (
        "bad search: after: not a page of this search (expected <epoch ms>:<task id>, as its Next link gives): "
        "'garbage'")
    assert b.problem(search + "&state=BOGUS", 400) == \
        "bad search: state: 'BOGUS' is not one of DELAY, READY, RUNNING, FINISHED, FAILED, CANCELLED"
    assert b.problem(search + "&state=DELAY&until=tomorrow", 400) == \
        "bad search: before: not a time: expected epoch milliseconds from 0 to 253402300799999, not 'tomorrow'"
    assert b.problem("/ui/load?horizon=year", 200) == \
        "horizon: 'year' is not one of hour, day, week: the next hour is shown"
    assert b.problem("/ui/access?since=yesterday", 200).startswith("audit log from: not a time")


def test_a_logout_needs_the_csrf_token_and_ends_the_session_on_the_node(node, clean_log):
    b = Browser(node)
    for forged in ({}, {"csrf": "not-the-token"}):
        status, headers, body = b.open("/ui/logout", forged, csrf=False)
        assert status == 403 and "CSRF" in body and headers["Set-Cookie"] is None
    status, _, _ = b.open("/ui/logout", {}, headers={"Origin": "https://evil.example"})
    assert status == 403
    assert b.open("/ui/overview")[0] == 200                  # still logged in
    cookie, = [f"{c.name}={c.value}" for c in b.jar]
    status, headers, _ = b.open("/ui/logout", {})
    assert status == 303 and headers["Location"] == "/ui/login" and "Max-Age=0" in headers["Set-Cookie"]
    # The old cookie, replayed, is a stranger's.
    replay = urllib.request.Request(b.base + "/ui/overview", headers={"Cookie": cookie})
    try:
        with b.opener.open(replay, timeout=10) as r:
            status, location = r.status, r.headers["Location"]
    except urllib.error.HTTPError as e:
        status, location = e.code, e.headers["Location"]
    assert status == 303 and location.startswith("/ui/login")
