"""Tokens, grants and settings of security: what an operator and a client can rely on."""
from __future__ import annotations

import pytest

from delayq import config, errors, zkauth
from delayq.access import tokens
from delayq.access.grants import Client, Permission, check_grant
from delayq.errors import ConfigError
from delayq.nodes.front.access import Access
from delayq.nodes.front.caller import Caller
from delayq.nodes.metrics import Metrics
from delayq.testing.fakes import Clients


def test_a_token_names_its_client_and_only_its_digest_is_kept():
    token, digest = tokens.new_token("billing")
    name, secret = token.split(".", 1)
    assert name == "billing" and len(secret) >= 40
    assert tokens.parse(token) == ("billing", digest)
    assert secret not in digest
    assert tokens.new_token("billing")[0] != token


@pytest.mark.parametrize("text", ["", "no-dot", ".secret", "Upper.secret", "a b.secret", "x" * 201])
def test_text_that_is_not_a_token_parses_to_nothing(text):
    assert tokens.parse(text) is None


def test_digests_compare_only_when_both_exist():
    assert tokens.same("ab", "ab") and not tokens.same("ab", "ac")
    assert not tokens.same(None, None) and not tokens.same("ab", None)


def test_grants_match_topics_by_pattern():
    c = Client("orders-svc", None, grants=frozenset({(Permission.SUBMIT, "orders.*"), (Permission.READ, "*"),
                                                     (Permission.CANCEL, "orders.cancel")}))
    assert c.allows(Permission.SUBMIT, "orders.cancel") and c.allows(Permission.SUBMIT, "orders.")
    assert not c.allows(Permission.SUBMIT, "ordersX") and not c.allows(Permission.SUBMIT, "billing.orders.x")
    assert c.allows(Permission.CANCEL, "orders.cancel") and not c.allows(Permission.CANCEL, "orders.cancelled")
    assert c.allows(Permission.READ, "anything") and c.everywhere(Permission.READ)
    assert not c.everywhere(Permission.SUBMIT) and c.holds(Permission.SUBMIT)
    assert not c.holds(Permission.ADMIN) and not c.allows(Permission.REPORT, "orders.cancel")


def test_a_dot_in_a_pattern_is_a_dot():
    c = Client("x", None, grants=frozenset({(Permission.SUBMIT, "a.b")}))
    assert c.allows(Permission.SUBMIT, "a.b") and not c.allows(Permission.SUBMIT, "aXb")


@pytest.mark.parametrize("permission, pattern, says", [
    ("fly", "*", "unknown permission"), ("admin", "orders.*", "cluster-wide"),
    ("submit", "orders/x", "topic pattern"), ("submit", "", "topic pattern"), ("read", "a[b]", "topic pattern")])
def test_bad_grants_are_refused_with_the_reason(permission, pattern, says):
    with pytest.raises(ValueError, match=says):
        check_grant(permission, pattern)


def test_a_node_needs_its_certificate_unless_it_runs_insecure():
    with pytest.raises(ConfigError, match="DELAYQ_TLS_CERT_FILE"):
        config.check_node(config.load({}))
    config.check_node(config.load({"DELAYQ_INSECURE": "true"}))
    tls = {"DELAYQ_TLS_CERT_FILE": "n.pem", "DELAYQ_TLS_KEY_FILE": "n.key"}
    with pytest.raises(ConfigError, match="DELAYQ_ZK_AUTH"):
        config.check_node(config.load(tls))
    config.check_node(config.load({**tls, "DELAYQ_ZK_AUTH": "delayq:pw"}))
    config.check_node(config.load({**tls, "DELAYQ_ZK_ENABLED": "false"}))       # standalone: no ZooKeeper


@pytest.mark.parametrize("auth", ["delayq", ":pw", "delayq:"])
def test_a_zookeeper_identity_is_user_and_password_and_the_error_never_shows_it(auth):
    with pytest.raises(ConfigError) as e:
        config.load({"DELAYQ_ZK_AUTH": auth})
    assert "user:password" in str(e.value) and auth.strip(":") not in str(e.value)


def test_znodes_are_created_for_delayqs_identity_alone():
    args = zkauth.kazoo_args("delayq:s3cret")
    assert args["auth_data"] == [("digest", "delayq:s3cret")]
    (acl,) = args["default_acl"]
    assert acl.id.scheme == "digest" and acl.id.id.startswith("delayq:") and "s3cret" not in acl.id.id
    assert acl.perms == 31          # read, write, create, delete, admin
    assert zkauth.kazoo_args("") == {}


def test_a_cluster_znode_is_ours_only_when_its_acl_is_delayqs_identity_alone():
    from kazoo.security import OPEN_ACL_UNSAFE, make_digest_acl
    ours = make_digest_acl("delayq", "s3cret", all=True)
    assert zkauth.acl_problem([ours], "delayq:s3cret") is None
    for acls, says in (([make_digest_acl("intruder", "pw", all=True)], "digest:intruder"),
                       ([ours, *OPEN_ACL_UNSAFE], "digest:delayq, world:anyone"),
                       ([make_digest_acl("delayq", "s3cret", read=True)], "digest:delayq"),
                       ([make_digest_acl("delayq", "other", all=True)], "digest:delayq"),
                       ([], "nobody")):
        problem = zkauth.acl_problem(acls, "delayq:s3cret")
        assert problem == f"its ACL gives {says}, not delayq's identity alone"
        assert "s3cret" not in problem and ours.id.id.split(":")[1] not in problem


def test_client_certificates_need_a_ca():
    with pytest.raises(ConfigError, match="DELAYQ_TLS_CA_FILE"):
        config.load({"DELAYQ_TLS_CLIENT_CERT": "required"})
    assert config.load({"DELAYQ_TLS_CA_FILE": "ca.pem"}).security.tls_client_cert == "optional"
    assert config.load({}).security.tls_client_cert == "none"


def test_secrets_come_from_files_and_errors_never_show_them(tmp_path):
    secret = tmp_path / "mysql-url"
    secret.write_text("mysql+pymysql://delayq:s3cret@db:3306/delayq\n")
    assert config.load({"DELAYQ_MYSQL_URL_FILE": str(secret)}).mysql.url == "mysql+pymysql://delayq:s3cret@db:3306/delayq"
    with pytest.raises(ConfigError) as e:
        config.load({"DELAYQ_AMQP_URL_FILE": str(tmp_path / "missing")})
    assert "DELAYQ_AMQP_URL_FILE" in str(e.value)


def test_help_never_shows_a_secret_default():
    from delayq.options import reference
    text = "\n".join(reference())
    assert "guest:guest" not in text and "DELAYQ_MYSQL_URL = (secret)" in text


def _refusal(access, token: str) -> tuple[str, str]:
    """(why, reason) of an authenticate refused."""
    with pytest.raises(errors.Unauthenticated) as e:
        access.authenticate(Caller(("127.0.0.1", 1)), token)
    return e.value.why, e.value.reason


def test_a_revoked_or_rotated_token_is_refused_as_such_and_a_token_never_valid_as_bad():
    current, digest = tokens.new_token("billing")
    rotated, rotated_digest = tokens.new_token("billing")
    revoked, revoked_digest = tokens.new_token("billing")
    metrics = Metrics()
    access = Access(Clients(Client("billing", digest, retired=((rotated_digest, "rotated"),
                                                                (revoked_digest, "revoked")))), metrics, enabled=True)
    access.load()

    assert _refusal(access, rotated)[0] == "rotated" and "new token" in _refusal(access, rotated)[1]
    assert _refusal(access, revoked) == ("revoked", "the token was revoked")
    never = "billing." + rotated.partition(".")[2][::-1]
    stranger = "nobody." + rotated.partition(".")[2]      # a real secret, of another client's name
    for token in (never, stranger):
        assert _refusal(access, token) == ("bad_token", "the token is not valid")
    assert metrics.refusals.labels("rotated")._value.get() == 2
    assert metrics.refusals.labels("revoked")._value.get() == 1
    assert metrics.refusals.labels("bad_token")._value.get() == 2
    assert access.authenticate(Caller(("127.0.0.1", 1)), current) == "billing"
