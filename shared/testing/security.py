"""The security test and benchmark clusters run with, as production does: TLS on every node's
Thrift port (a development CA and node certificate, `delayq certs dev`) and an admin client,
`test-admin`, whose token every fresh database knows.

    security.install()          # this process's clients: CA and token in os.environ
    node_env(...)               # a node's: its certificate (delayq.testing.cluster)

ZooKeeper: every session authenticates as `delayq-test` (DELAYQ_ZK_AUTH), and what it creates is
that identity's alone.

The set lives in DELAYQ_TEST_TLS (default: delayq-test-tls-<uid> in the temporary folder), made
once and shared by every process of a run, under a file lock.
"""
from __future__ import annotations

import fcntl
import os
import secrets
import tempfile
from pathlib import Path

from sqlalchemy import Engine

from delayq.access import tokens
from delayq.access.grants import Permission

ADMIN = "test-admin"
FOLDER = Path(os.environ.get("DELAYQ_TEST_TLS") or Path(tempfile.gettempdir()) / f"delayq-test-tls-{os.getuid()}")


def ensure() -> Path:
    """The folder, with ca.pem, node.pem/.key, a client certificate for `test-admin`, the
    admin's token (admin.token) and the ZooKeeper identity (zk.auth)."""
    from delayq.ops.certs import dev_set
    FOLDER.mkdir(parents=True, exist_ok=True)
    with open(FOLDER / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        dev_set(FOLDER, clients=(ADMIN,))
        for name, make in (("admin.token", lambda: tokens.new_token(ADMIN)[0]),
                           ("zk.auth", lambda: f"delayq-test:{secrets.token_urlsafe(24)}")):
            if not (FOLDER / name).exists():
                fd = os.open(FOLDER / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as fh:
                    fh.write(make() + "\n")
    return FOLDER


def admin_token() -> str:
    return (ensure() / "admin.token").read_text().strip()


def zk_auth() -> str:
    return (ensure() / "zk.auth").read_text().strip()


def node_environment() -> dict[str, str]:
    folder = ensure()
    return {"DELAYQ_TLS_CERT_FILE": str(folder / "node.pem"), "DELAYQ_TLS_KEY_FILE": str(folder / "node.key"),
            "DELAYQ_TLS_CA_FILE": str(folder / "ca.pem"), "DELAYQ_ZK_AUTH_FILE": str(folder / "zk.auth")}


def client_environment() -> dict[str, str]:
    return {"DELAYQ_TLS_CA_FILE": str(ensure() / "ca.pem"), "DELAYQ_TOKEN": admin_token(),
            "DELAYQ_ZK_AUTH_FILE": str(ensure() / "zk.auth")}


def install() -> None:
    """This process's clients (and the `delayq` commands it runs) reach nodes as test-admin."""
    os.environ.update(client_environment())


def admit(engine: Engine) -> None:
    """Make test-admin a client of this database, with every permission on every topic."""
    parsed = tokens.parse(admin_token())
    assert parsed is not None, "the test-admin token does not parse"
    name, digest = parsed
    with engine.begin() as conn:
        conn.exec_driver_sql("INSERT INTO job_client (name, token_sha256, revoked, created_ms, updated_ms) "
                             "VALUES (%s, %s, 0, 0, 0)", (name, digest))
        for perm in Permission:
            conn.exec_driver_sql("INSERT INTO job_client_grant (name, permission, pattern) VALUES (%s, %s, '*')",
                                 (name, perm.value))
