"""delayq's ZooKeeper identity (DELAYQ_ZK_AUTH, `user:password`, ZooKeeper's digest scheme).

Every session delayq opens (nodes, the `delayq` command, client discovery) authenticates as it,
and every znode delayq creates carries one ACL entry: that identity, with every permission. No
one else can read the members, write the assignment or change the intents. With no identity
given (DELAYQ_INSECURE development setups) znodes are created open, as ZooKeeper's default is.
"""
from __future__ import annotations

from typing import Any


def check(auth: str) -> None:
    """ValueError (naming the form, never the value) unless auth is `user:password`."""
    user, colon, password = auth.partition(":")
    if not (user and colon and password):
        raise ValueError("DELAYQ_ZK_AUTH must be user:password")


def kazoo_args(auth: str) -> dict[str, Any]:
    """The KazooClient arguments that authenticate a session and protect what it creates."""
    if not auth:
        return {}
    check(auth)
    from kazoo.security import make_digest_acl      # here: delayq.config checks the form without kazoo
    user, _, password = auth.partition(":")
    return {"auth_data": [("digest", auth)], "default_acl": [make_digest_acl(user, password, all=True)]}


def describe(error: Exception) -> str:
    """A ZooKeeper error as a log line can say it: kazoo's errors often have no message, and a
    refusal of the identity needs saying what it means."""
    name = type(error).__name__
    if name == "NoAuthError":
        return ("ZooKeeper refused delayq's identity (NoAuth): the znodes were created by another "
                "DELAYQ_ZK_AUTH; use that one, or remove the cluster's znodes as their owner")
    return str(error) or name


def refused(auth: str) -> str:
    """What to tell a command or client whose session ZooKeeper refused (NoAuth) on a cluster's
    znodes: which setting to give or correct (never its value)."""
    if not auth:
        return ("ZooKeeper refused to show the cluster's znodes: give delayq's ZooKeeper identity "
                "(user:password, as the nodes have it) in DELAYQ_ZK_AUTH or DELAYQ_ZK_AUTH_FILE")
    return ("ZooKeeper refused delayq's identity: DELAYQ_ZK_AUTH (or DELAYQ_ZK_AUTH_FILE) is not the "
            "identity the cluster's znodes were created with; give the nodes' one")


ROOT = "/delayq"


def ensure_root(client: Any, auth: str, timeout: float = 5.0) -> None:
    """Create /delayq, the parent of every cluster, if it is not there: anyone may list it, create
    a cluster under it and delete an empty one (ZooKeeper asks the parent for that), only its
    creator may change it. Each cluster's own znodes belong to its identity alone, and a cluster
    with znodes under it cannot be deleted, so clusters with different identities share one
    ZooKeeper."""
    from kazoo.exceptions import NodeExistsError
    from kazoo.security import ACL, Id, Permissions
    acl = None
    if auth:
        acl = [ACL(Permissions.READ | Permissions.CREATE | Permissions.DELETE, Id("world", "anyone")),
               *kazoo_args(auth)["default_acl"]]
    try:
        client.create_async(ROOT, b"", acl=acl).get(timeout=timeout)
    except NodeExistsError:
        pass
