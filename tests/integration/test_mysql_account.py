"""The nodes' own MySQL account (`delayq db init --node-account`): a node runs a task's whole life
with it, and it can do nothing else: no DDL, no DROP, no other schema, no change to the audit log
but its days past retention, through the one procedure that drops them."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pymysql
import pytest
from sqlalchemy.engine import make_url

from conftest import Collector, now_ms, wait_until
from delayq import config, db as dbm
from delayq.client import CallbackService, CancelResult, TaskSpec, TaskStatus
from delayq.retention import DAY_MS, day_name, day_of
from delayq.store.audit import AuditLog, Entry
from delayq.store.clients import ClientStore
from delayq.store.retention import RetentionStore

pytestmark = pytest.mark.integration


def db_init(database, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "delayq", "db", "init", *args],
                          env={**os.environ, "DELAYQ_MYSQL_URL": database.url}, capture_output=True, text=True,
                          timeout=60)


@pytest.fixture(scope="module")
def node_url(database, tmp_path_factory):
    account = f"a_{database.name[-10:]}"      # not the harness's n_ account of the same database
    url_file = tmp_path_factory.mktemp("account") / "node-url"
    out = db_init(database, "--node-account", account, "--node-url-file", str(url_file))
    assert out.returncode == 0, out.stderr
    assert url_file.stat().st_mode & 0o077 == 0
    yield url_file.read_text().strip()
    admin = dbm.make_engine(config.load({"DELAYQ_MYSQL_URL": database.url}).mysql)
    with admin.begin() as conn:
        conn.exec_driver_sql(f"DROP USER IF EXISTS '{account}'@'%%'")
    admin.dispose()


def connect(url: str, database: str | None = "from-url") -> pymysql.Connection:
    u = make_url(url)
    return pymysql.connect(host=u.host, port=u.port or 3306, user=u.username, password=u.password or "",
                           database=u.database if database == "from-url" else database, connect_timeout=5)


def test_a_node_runs_tasks_with_its_own_account(node_factory, node_url):
    node = node_factory(DELAYQ_MYSQL_URL=node_url)
    topic = f"acct-{uuid.uuid4().hex[:6]}"
    with node.client() as c:
        c.registerService(CallbackService(topic=topic, ttrMs=0))
    collector = Collector("delayq", topic)       # a queue bound to the topic, so the task is delivered
    try:
        _life(node, topic)
    finally:
        collector.close()


def _life(node, topic: str) -> None:
    with node.client() as c:
        fired = c.submit(TaskSpec(topic=topic, delayMs=200, payload=b"x")).taskId
        kept = c.submit(TaskSpec(topic=topic, delayMs=600_000)).taskId
        c.reschedule(kept, c.get(kept).dueAtMs + 1000)
        assert c.cancel(kept) == CancelResult.CANCELLED
        wait_until(lambda: c.get(fired).status == TaskStatus.FINISHED, 15, what="the task to fire and finish")


@pytest.mark.parametrize("statement", [
    "DROP TABLE job_delay_task",
    "CREATE TABLE sneaky (id INT)",
    "ALTER TABLE job_delay_task ADD COLUMN x INT",
    "DELETE FROM job_audit",
    "UPDATE job_audit SET actor = 'someone else'",
    "REPLACE INTO job_audit (id, at_ms, actor, address, action, target, outcome) SELECT id, at_ms, 'x', address, "
    "action, target, outcome FROM job_audit",
    "ALTER TABLE job_audit ADD COLUMN x INT",
    "ALTER TABLE job_audit TRUNCATE PARTITION pmax",
    "ALTER TABLE job_audit DROP PARTITION pmax",
    "TRUNCATE TABLE job_audit",
    "DROP TABLE job_audit",
    "DROP PROCEDURE delayq_prune_audit",
    "CREATE PROCEDURE delayq_sneaky() DELETE FROM job_audit",
    "DELETE FROM job_client",
    "UPDATE job_client SET tenant = 'other'",
    "DELETE FROM job_tenant",
    "DELETE FROM delayq_schema_version",
    "SELECT user FROM mysql.user",
])
def test_the_node_account_is_refused_everything_else(node_url, statement):
    conn = connect(node_url)
    try:
        with pytest.raises(pymysql.err.MySQLError) as e:
            with conn.cursor() as cur:
                cur.execute(statement)
        # command denied (table, column, routine, database)
        assert e.value.args[0] in (1142, 1143, 1370, 1044), e.value
    finally:
        conn.close()


def test_the_node_account_cannot_read_another_schema(database, node_url):
    other = f"delayq_other_{uuid.uuid4().hex[:8]}"
    admin = connect(database.url, database=None)
    try:
        with admin.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{other}`")
            cur.execute(f"CREATE TABLE `{other}`.secrets (v INT)")
        conn = connect(node_url)
        try:
            with pytest.raises(pymysql.err.MySQLError) as e:
                with conn.cursor() as cur:
                    cur.execute(f"SELECT * FROM `{other}`.secrets")
            assert e.value.args[0] in (1142, 1044)
        finally:
            conn.close()
    finally:
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{other}`")
        admin.close()


def test_db_init_again_keeps_the_password_and_resets_the_grants(database, node_url, tmp_path):
    account = make_url(node_url).username
    url_file = tmp_path / "node-url"
    url_file.write_text(node_url + "\n")
    admin = connect(database.url, database=None)
    try:
        with admin.cursor() as cur:
            cur.execute(f"GRANT DROP ON `{database.name}`.* TO '{account}'@'%'")      # drift, by hand
    finally:
        admin.close()
    out = db_init(database, "--node-account", account, "--node-url-file", str(url_file))
    assert out.returncode == 0, out.stderr
    assert url_file.read_text().strip() == node_url
    conn = connect(node_url)
    try:
        with pytest.raises(pymysql.err.MySQLError):
            with conn.cursor() as cur:
                cur.execute("DROP TABLE job_delay_hint")
    finally:
        conn.close()


def test_a_node_account_not_yet_granted_the_retired_tokens_still_reads_its_clients(database, node_url, tmp_path):
    # An upgrade: `db migrate` ran, `db init --node-account` not yet again. A node must still start
    # and follow its clients; it only cannot tell revoked and rotated tokens from others.
    account = make_url(node_url).username
    admin = connect(database.url, database=None)
    try:
        with admin.cursor() as cur:
            cur.execute(f"REVOKE SELECT, INSERT, DELETE ON `{database.name}`.job_client_retired_token "
                        f"FROM '{account}'@'%'")
    finally:
        admin.close()
    engine = dbm.make_engine(config.load({"DELAYQ_MYSQL_URL": node_url}).mysql)
    as_admin = dbm.make_engine(config.load({"DELAYQ_MYSQL_URL": database.url}).mysql)
    try:
        name = f"app-{uuid.uuid4().hex[:6]}"
        ClientStore(as_admin).add(name)
        ClientStore(as_admin).rotate(name)      # a retired token the node account cannot see
        _, clients = ClientStore(engine).load()
        assert name in clients and clients[name].retired == ()
    finally:
        engine.dispose()
        as_admin.dispose()
        url_file = tmp_path / "node-url"
        url_file.write_text(node_url + "\n")
        out = db_init(database, "--node-account", account, "--node-url-file", str(url_file))
        assert out.returncode == 0, out.stderr


def test_the_node_account_drops_the_audit_log_s_days_past_retention_and_no_row_else(database, node_url):
    now = now_ms()
    old_day = day_of(now) - 10
    admin = connect(database.url)
    engine = dbm.make_engine(config.load({"DELAYQ_MYSQL_URL": node_url}).mysql)
    try:
        first = RetentionStore(engine).partitions("job_audit")[0]
        with admin.cursor() as cur:     # a day ten days ago gets its own partition, as if kept since
            cur.execute(f"ALTER TABLE job_audit REORGANIZE PARTITION {first.name} INTO ("
                        f"PARTITION {day_name(old_day)} VALUES LESS THAN ({(old_day + 1) * DAY_MS}), "
                        f"PARTITION {first.name} VALUES LESS THAN ({first.below_ms}))")
        log = AuditLog(engine)
        log.record(Entry(old_day * DAY_MS + 1000, "app", "10.0.0.1", "cancel", "old-task", "CANCELLED"))
        log.record(Entry(now, "app", "10.0.0.1", "cancel", "new-task", "CANCELLED"))
        report = RetentionStore(engine).prune(0, now, 1, 100, audit_days=5)
        assert not report.audit_denied and report.dropped.get("job_audit") == [day_name(old_day)], report
        assert [e.target for e in log.list(actor="app")] == ["new-task"]
    finally:
        engine.dispose()
        admin.close()


@pytest.mark.parametrize("keep_days, ahead_days", [(-1, 1), (3651, 1), (5, 0), (5, 31), (None, 1)])
def test_the_audit_log_s_procedure_refuses_days_out_of_range(node_url, keep_days, ahead_days):
    conn = connect(node_url)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM information_schema.PARTITIONS WHERE TABLE_SCHEMA = DATABASE() "
                        "AND TABLE_NAME = 'job_audit'")
            partitions = cur.fetchone()
            with pytest.raises(pymysql.err.MySQLError) as e:
                cur.execute("CALL delayq_prune_audit(%s, %s)", (keep_days, ahead_days))
            assert e.value.args[0] == 1644 and "keep_days from 0 to 3650" in e.value.args[1], e.value
            cur.execute("SELECT COUNT(*) FROM information_schema.PARTITIONS WHERE TABLE_SCHEMA = DATABASE() "
                        "AND TABLE_NAME = 'job_audit'")
            assert cur.fetchone() == partitions
    finally:
        conn.close()


def test_a_node_account_not_yet_granted_the_audit_log_s_days_prunes_the_rest(database, node_url, tmp_path):
    # An upgrade: `db migrate` ran, `db init --node-account` not yet again.
    account = make_url(node_url).username
    admin = connect(database.url, database=None)
    engine = dbm.make_engine(config.load({"DELAYQ_MYSQL_URL": node_url}).mysql)
    try:
        with admin.cursor() as cur:
            cur.execute(f"REVOKE EXECUTE ON PROCEDURE `{database.name}`.delayq_prune_audit FROM '{account}'@'%'")
        report = RetentionStore(engine).prune(0, now_ms() + 20 * DAY_MS, 1, 100, audit_days=5)
        assert report.audit_denied and "job_audit" not in report.dropped
        assert report.added.get("job_delay_task_backlog"), report     # the history tables' pass went on
    finally:
        engine.dispose()
        admin.close()
        url_file = tmp_path / "node-url"
        url_file.write_text(node_url + "\n")
        out = db_init(database, "--node-account", account, "--node-url-file", str(url_file))
        assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("args, says", [
    (("--node-account", "Bad-Name", "--node-url-file", "/tmp/x"), "account name"),
    (("--node-account", "ok_name"), "go together"),
])
def test_db_init_refuses_a_bad_account_with_exit_2(database, args, says):
    out = db_init(database, *args)
    assert out.returncode == 2 and says in out.stderr and "Traceback" not in out.stderr
