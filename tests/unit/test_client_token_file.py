"""`delayq clients add --exist-ok --token-file F` renews F's token when it is no longer the
client's: another checkout sharing the database may have rotated it."""
from __future__ import annotations

from delayq.access import tokens
from delayq.access.grants import Client
from delayq.ops.clients import _add


class FakeStore:
    def __init__(self, digest: str | None, revoked: bool = False):
        self.client = Client("demo", digest, revoked)
        self.rotations = 0

    def list(self):
        return [self.client]

    def load(self):
        return "1", {"demo": self.client}

    def grant(self, name, permission, pattern):
        pass

    def rotate(self, name):
        self.rotations += 1
        token, digest = tokens.new_token(name)
        self.client = Client(name, digest)
        return token


def _token_file(tmp_path, token: str):
    path = tmp_path / "demo.token"
    path.write_text(token + "\n")
    return str(path)


def test_a_token_that_is_still_the_clients_is_kept(tmp_path):
    token, digest = tokens.new_token("demo")
    store = FakeStore(digest)
    _add(store, "demo", (), False, True, _token_file(tmp_path, token))
    assert store.rotations == 0


def test_a_token_rotated_elsewhere_is_renewed_in_the_file(tmp_path):
    old, _ = tokens.new_token("demo")
    _, current = tokens.new_token("demo")
    store = FakeStore(current)
    path = _token_file(tmp_path, old)
    _add(store, "demo", (), False, True, path)
    assert store.rotations == 1
    parsed = tokens.parse(open(path).read().strip())
    assert parsed is not None and tokens.same(store.client.token, parsed[1])


def test_a_missing_file_or_a_revoked_client_gets_a_new_token(tmp_path):
    token, digest = tokens.new_token("demo")
    store = FakeStore(digest, revoked=True)
    _add(store, "demo", (), False, True, _token_file(tmp_path, token))
    assert store.rotations == 1
    store = FakeStore(digest)
    _add(store, "demo", (), False, True, str(tmp_path / "missing.token"))
    assert store.rotations == 1
