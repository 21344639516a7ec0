"""delayq's ZooKeeper identity (DELAYQ_ZK_AUTH, `user:password`, ZooKeeper's digest scheme), and
who owns delayq's znodes.

Every session delayq opens (nodes, the `delayq` command) authenticates as it, and every znode
delayq creates carries one ACL entry: that identity, with every permission. /delayq, the parent of
every cluster, is that identity's alone as well (the world may not even read it), and a node joins
a cluster only when /delayq/<cluster> is its identity's alone (`claim_cluster`). With no identity
given (DELAYQ_INSECURE development setups) znodes are created open, as ZooKeeper's default is.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from delayq.config import ZkSettings

log = logging.getLogger(__name__)


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


def connection_args(zk: "ZkSettings") -> dict[str, Any]:
    """Every KazooClient argument a session of delayq's needs: the ensemble, the identity (and the
    ACL of what it creates), and TLS when DELAYQ_ZK_TLS asks for it (the certificate verified,
    host name included, against DELAYQ_ZK_CA_FILE or the system's CAs)."""
    args: dict[str, Any] = {"hosts": zk.hosts, **kazoo_args(zk.auth)}
    if zk.tls:
        args.update(use_ssl=True, verify_certs=True, check_hostname=True, ca=zk.ca_file or None,
                    certfile=zk.cert_file or None, keyfile=zk.key_file or None)
    return args


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


def _digest(auth: str) -> Any:
    from kazoo.security import make_digest_acl
    user, _, password = auth.partition(":")
    return make_digest_acl(user, password, all=True)


def ensure_root(client: Any, auth: str, timeout: float = 5.0) -> None:
    """Create /delayq, the parent of every cluster, if it is not there, as this identity's alone:
    no one else may list it, read its ACL or create a cluster under it, so no one can take a
    cluster's name before its nodes do. A cluster of another identity gets its znode from this
    identity's operator (docs/security.md). A /delayq made open by an older delayq is left as it
    is (`warn_if_open`)."""
    from kazoo.exceptions import NodeExistsError
    # Asked first: ZooKeeper checks a create against the parent's ACL before it looks whether the
    # node exists, and the parent (a chroot) may not let this identity create.
    if client.exists_async(ROOT).get(timeout=timeout) is None:
        try:
            _create(client, ROOT, [_digest(auth)] if auth else None, timeout)
            return
        except NodeExistsError:
            pass


def warn_if_open(client: Any, timeout: float = 5.0) -> None:
    """Say in the log when /delayq lets anyone create or delete under it (an older delayq made it
    so). It is left as it is: other clusters' operators may rely on it, and closing it is its
    owner's decision. Nodes say it once as they start; commands do not repeat it."""
    from kazoo.exceptions import NoAuthError, NoNodeError
    from kazoo.security import Permissions
    try:
        acls, _ = client.get_acls_async(ROOT).get(timeout=timeout)
    except (NoAuthError, NoNodeError):
        return          # another identity's /delayq: the cluster's own znode is what is checked
    if any(a.id.scheme == "world" and a.perms & ~Permissions.READ for a in acls):
        # INFO, not a warning: a cluster znode squatted under it is refused all the same (claim_cluster).
        log.info("%s lets anyone create or delete a cluster's znode under it: close it as its owner, "
                    "keeping the identities it lists (docs/security.md, ZooKeeper)", ROOT)


def claim_cluster(client: Any, auth: str, path: str, timeout: float = 5.0) -> None:
    """Make sure the cluster's znode (`path`, /delayq/<cluster>) is this identity's: create it
    if it is not there, and refuse (ConfigError) one made by another identity or left open, so a
    node never joins a cluster whose znodes someone else could rewrite."""
    from kazoo.exceptions import NoAuthError

    from delayq.errors import ConfigError
    ensure_root(client, auth, timeout)
    if not auth:
        _create(client, path, None, timeout, exists_ok=True)
        return
    warn_if_open(client, timeout)
    try:
        if client.exists_async(path).get(timeout=timeout) is None:
            _create(client, path, [_digest(auth)], timeout, exists_ok=True)    # another node may be first
        acls, _ = client.get_acls_async(path).get(timeout=timeout)
    except NoAuthError:
        creating = client.exists_async(path).get(timeout=timeout) is None
        raise ConfigError(not_ours(path, None, creating)) from None
    problem = acl_problem(acls, auth)
    if problem is not None:
        raise ConfigError(not_ours(path, problem))


def acl_problem(acls: list, auth: str) -> str | None:
    """Why a cluster's znode with these ACL entries is not delayq's identity's alone, or None.
    Names the schemes and users it finds, never a digest (one can be guessed back offline)."""
    from kazoo.security import Permissions
    ours = _digest(auth).id
    if any(a.id == ours and a.perms == Permissions.ALL for a in acls) and len(acls) == 1:
        return None
    found = ", ".join(f"{a.id.scheme}:{a.id.id.split(':', 1)[0]}" for a in acls) or "nobody"
    return f"its ACL gives {found}, not delayq's identity alone"


def not_ours(path: str, problem: str | None, creating: bool = False) -> str:
    """The refusal a node gives (and exits with) for a cluster znode that is not its identity's."""
    if creating:
        return (f"ZooKeeper refused to create {path}: {ROOT} belongs to another DELAYQ_ZK_AUTH identity; have "
                f"its operator create {path} for this identity (docs/security.md), or use that identity")
    why = problem or "ZooKeeper refused delayq's identity (NoAuth) on it"
    return (f"{path} was created by another ZooKeeper identity ({why}): this cluster's znodes would not be "
            f"delayq's alone. Use the DELAYQ_ZK_AUTH it was created with, or remove {path} as its owner "
            "while the cluster is stopped")


def _create(client: Any, path: str, acl: list | None, timeout: float, exists_ok: bool = False) -> None:
    from kazoo.exceptions import NodeExistsError
    try:
        client.create_async(path, b"", acl=acl).get(timeout=timeout)
    except NodeExistsError:
        if not exists_ok:
            raise
