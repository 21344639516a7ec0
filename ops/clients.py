"""`delayq clients ...`: the clients that may call the nodes, their tokens and grants.

Written straight to MySQL with the operator's database account (delayq.store.clients); every node
applies a change within DELAYQ_CLIENTS_POLL_MS (250 ms), without a restart. A token is printed
once, when it is made (or written to --token-file, readable by its owner only), and never again.
A --token-file that cannot be written is refused before anything changes; should writing it still
fail after the change, the token is printed on stdout rather than lost (exit 1).
"""
from __future__ import annotations

import contextlib
import json
import os
from typing import Iterator

import click

from delayq.access import tokens
from delayq.db import make_engine
from delayq.ops.audit import Outcome, recorded
from delayq.ops.common import EXIT_FAILURE, EXIT_USAGE, PrivateFile, fail, load_settings, run
from delayq.store.clients import ClientStore, NoSuchClient

GRANT_HELP = ("PERMISSION:PATTERN, e.g. submit:orders.* (permissions: submit, cancel, read, report on "
              "topics matching the pattern; admin:* cluster-wide).")


@contextlib.contextmanager
def _store(config_file: str | None, action: str, target: str, token_file: str | None = None
           ) -> Iterator[tuple[ClientStore, PrivateFile | None, Outcome]]:
    """The store, inside the audit record of this action (`delayq audit`), with --token-file
    readied first (a path that cannot be written is refused before anything changes)."""
    settings = load_settings(config_file)
    with PrivateFile(token_file, "--token-file") if token_file else contextlib.nullcontext() as out:
        with recorded(settings, f"clients.{action}", target) as outcome:
            yield ClientStore(make_engine(settings.mysql)), out, outcome


def _grant(text: str) -> tuple[str, str]:
    permission, colon, pattern = text.partition(":")
    if not colon:
        raise click.BadParameter(f"{text!r}: expected {GRANT_HELP}")
    return permission, pattern


def _checked(fn):
    """Run fn: a bad name, grant or unknown client is a usage error (exit 2)."""
    try:
        return run(fn)
    except (ValueError, NoSuchClient) as e:
        fail(str(e).strip('"'), EXIT_USAGE)


def _hand_out(token: str, out: PrivateFile | None, outcome: Outcome) -> None:
    """The token on stdout, or in --token-file; never lost: the change that made it is done."""
    if out is None:
        click.echo(token)
        return
    try:
        out.write(token)
    except OSError as e:
        click.echo(token)
        outcome.value = "ok; token printed, --token-file not written"
        fail(f"the token could not be written to {out.path} ({e.strerror or e}); it is printed above, on "
             "stdout, and shown this once", EXIT_FAILURE)
    click.echo(f"token written to {out.path}", err=True)


config_option = click.option("--config", "config_file", type=click.Path(dir_okay=False))
token_file_option = click.option("--token-file", type=click.Path(dir_okay=False),
                                 help="Write the token to this file (mode 0600) instead of printing it.")


@click.group()
def clients() -> None:
    """Add clients, grant and revoke their permissions, rotate their tokens."""


@clients.command("add")
@click.argument("name")
@click.option("--grant", "grants", multiple=True, help=GRANT_HELP + " Repeat for several.")
@click.option("--certificate-only", is_flag=True,
              help="No token: the client connects with a certificate whose common name is NAME.")
@click.option("--exist-ok", is_flag=True,
              help="For scripts: a client NAME that exists is kept and given the grants; with --token-file, "
                   "it gets a new token only when that file is missing or its token is no longer NAME's "
                   "(rotated or revoked since).")
@token_file_option
@config_option
def add(name: str, grants: tuple[str, ...], certificate_only: bool, exist_ok: bool, token_file: str | None,
        config_file: str | None) -> None:
    """Add a client; print its token (shown this once)."""
    parsed = tuple(_grant(g) for g in grants)
    with _store(config_file, "add", " ".join([name, *grants]), token_file) as (store, out, outcome):
        _add(store, name, parsed, certificate_only, exist_ok, out, outcome)


def _add(store: ClientStore, name: str, parsed, certificate_only: bool, exist_ok: bool, out: PrivateFile | None,
         outcome: Outcome) -> None:
    if exist_ok and _checked(lambda: any(c.name == name for c in store.list())):
        for g in parsed:
            _checked(lambda: store.grant(name, *g))
        if out is not None and not certificate_only and not _holds_token(store, name, out.path):
            _hand_out(_checked(lambda: store.rotate(name)), out, outcome)
        return
    token = _checked(lambda: store.add(name, token=not certificate_only, grants=parsed))
    if token is not None:
        _hand_out(token, out, outcome)


def _holds_token(store: ClientStore, name: str, token_file: str) -> bool:
    """token_file holds a token that is client `name`'s now. Another checkout sharing the database
    may have rotated it (its own Quickstart, say): the file is then stale, and so renewed."""
    if not os.path.exists(token_file):
        return False
    with open(token_file) as f:
        parsed = tokens.parse(f.read().strip())
    client = run(store.load)[1].get(name)
    if (parsed is not None and parsed[0] == name and client is not None and not client.revoked
            and tokens.same(client.token, parsed[1])):
        return True
    click.echo(f"the token in {token_file} is no longer {name}'s (rotated or revoked since): renewing it",
               err=True)
    return False


@clients.command("grant")
@click.argument("name")
@click.argument("grant")
@config_option
def grant(name: str, grant: str, config_file: str | None) -> None:
    """Give client NAME a permission on a topic pattern (PERMISSION:PATTERN)."""
    with _store(config_file, "grant", f"{name} {grant}") as (store, _, _):
        _checked(lambda: store.grant(name, *_grant(grant)))


@clients.command("revoke")
@click.argument("name")
@click.argument("grant", required=False)
@config_option
def revoke(name: str, grant: str | None, config_file: str | None) -> None:
    """Take one grant (PERMISSION:PATTERN) from client NAME, or, with no grant, revoke the client
    itself: its token and certificate stop working on every node (`rotate` reinstates it)."""
    with _store(config_file, "revoke", f"{name} {grant or ''}".strip()) as (store, _, _):
        if grant is None:
            _checked(lambda: store.revoke(name))
            return
        if not _checked(lambda: store.ungrant(name, *_grant(grant))):
            fail(f"client {name!r} does not hold {grant}", EXIT_USAGE)


@clients.command("rotate")
@click.argument("name")
@token_file_option
@config_option
def rotate(name: str, token_file: str | None, config_file: str | None) -> None:
    """Give client NAME a new token; its old one stops working on every node."""
    with _store(config_file, "rotate", name, token_file) as (store, out, outcome):
        _hand_out(_checked(lambda: store.rotate(name)), out, outcome)


@clients.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")
@config_option
def list_clients(as_json: bool, config_file: str | None) -> None:
    """List the clients, their tenants and grants (never their tokens)."""
    listed = run(ClientStore(make_engine(load_settings(config_file).mysql)).list, as_json)
    if as_json:
        click.echo(json.dumps([{"name": c.name, "token": c.token, "revoked": c.revoked, "tenant": c.tenant,
                                "grants": [f"{p}:{pat}" for p, pat in c.grants]} for c in listed], indent=2))
        return
    for c in listed:
        state = "revoked" if c.revoked else ("token" if c.token else "certificate only")
        grants = " ".join(f"{p}:{pat}" for p, pat in c.grants) or "-"
        click.echo(f"{c.name:24} {state:17} {c.tenant or '-':16} {grants}")
