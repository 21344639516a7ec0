"""`delayq clients add --exist-ok --token-file F` renews F's token when it is no longer the
client's: another checkout sharing the database may have rotated it. A token is never lost: a
--token-file that cannot be written is refused before the change, and one that fails after it has
the token printed instead."""
from __future__ import annotations

import errno
import os

import click
import pytest

from delayq.access import tokens
from delayq.access.grants import Client
from delayq.ops.audit import Outcome
from delayq.ops.clients import _add, _hand_out
from delayq.ops.common import PrivateFile


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


def add(store, path: str) -> None:
    with PrivateFile(path, "--token-file") as out:
        _add(store, "demo", (), False, True, out, Outcome())


def test_a_token_that_is_still_the_clients_is_kept(tmp_path):
    token, digest = tokens.new_token("demo")
    store = FakeStore(digest)
    add(store, _token_file(tmp_path, token))
    assert store.rotations == 0


def test_a_token_rotated_elsewhere_is_renewed_in_the_file(tmp_path):
    old, _ = tokens.new_token("demo")
    _, current = tokens.new_token("demo")
    store = FakeStore(current)
    path = _token_file(tmp_path, old)
    add(store, path)
    assert store.rotations == 1
    parsed = tokens.parse(open(path).read().strip())
    assert parsed is not None and tokens.same(store.client.token, parsed[1])


def test_a_missing_file_or_a_revoked_client_gets_a_new_token(tmp_path):
    token, digest = tokens.new_token("demo")
    store = FakeStore(digest, revoked=True)
    add(store, _token_file(tmp_path, token))
    assert store.rotations == 1
    store = FakeStore(digest)
    add(store, str(tmp_path / "missing.token"))
    assert store.rotations == 1


# ---- the file ------------------------------------------------------------------------------------

def test_a_path_that_cannot_be_written_is_refused_naming_the_option_before_anything_changes(tmp_path):
    store = FakeStore(None)
    with pytest.raises(click.BadParameter) as e:
        add(store, str(tmp_path / "no-such-folder" / "demo.token"))
    assert store.rotations == 0
    assert "--token-file" in e.value.format_message() and "no-such-folder" in e.value.format_message()


def test_a_file_not_written_is_left_as_it_was_and_nothing_is_left_beside_it(tmp_path):
    path = _token_file(tmp_path, "demo.old")
    with PrivateFile(path, "--token-file"):
        pass
    assert open(path).read() == "demo.old\n"
    assert os.listdir(tmp_path) == ["demo.token"]


def test_the_written_file_is_its_owners_alone_and_replaces_the_old_one(tmp_path):
    path = _token_file(tmp_path, "demo.old")
    os.chmod(path, 0o644)
    with PrivateFile(path, "--token-file") as out:
        out.write("demo.new")
    assert open(path).read() == "demo.new\n"
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert os.listdir(tmp_path) == ["demo.token"]


class FullDisk:
    path = "/mnt/full/demo.token"

    def write(self, text: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")


def test_a_token_that_cannot_be_written_after_the_change_is_printed_not_lost(capsys):
    outcome = Outcome()
    with pytest.raises(SystemExit) as e:
        _hand_out("demo.s3cret", FullDisk(), outcome)
    out, err = capsys.readouterr()
    assert e.value.code == 1
    assert out == "demo.s3cret\n"
    assert "could not be written to /mnt/full/demo.token (No space left on device)" in err and "shown this once" in err
    assert outcome.value == "ok; token printed, --token-file not written"
