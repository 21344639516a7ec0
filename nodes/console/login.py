"""The console's way in: GET /ui/login shows the form, POST /ui/login opens a session.

Two credentials, each checked by the code that checks it on the Thrift port: a client token
(`authenticate`), or the client certificate the browser presented in the TLS handshake (its common
name looked up by Access, as a Thrift connection's is). A session opened with a certificate holds
only while the browser keeps presenting it (Console checks that on every request).

Failed logins are counted per peer address (throttle.LoginThrottle): past its allowance a peer is
refused (429) without its token being looked at, and the audit log gets a summary per interval.
A session ended by the node sends the browser here with `?why=` one of WHY's words, never text
of the request's making.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Mapping

from delayq import errors
from delayq.client.gen.delayq_thrift import ttypes
from delayq.nodes.console.sessions import Full, local_path, same_origin
from delayq.nodes.front.access import NOT_VALID
from delayq.nodes.front.caller import CERTIFICATE, Caller, serving

if TYPE_CHECKING:
    from delayq.nodes.console.app import Console, Request, Response

log = logging.getLogger(__name__)

# Why a session ended, as the login page says it: the only `why` it shows.
WHY = {"revoked": "the client was revoked", "rotated": "the client's token was rotated",
       "certificate": "the browser no longer presents the certificate it logged in with",
       "ended": "the node ended it"}


def why_of(e: errors.Unauthenticated) -> str:
    """The WHY word for a session the node ended."""
    if e.why in ("revoked", "rotated"):
        return e.why
    return "certificate" if "certificate" in e.reason else "ended"


def answer(console: Console, req: Request) -> Response:
    if req.method == "GET":
        return _form(console, req, req.query, why=WHY.get(req.query.get("why") or ""))
    if not same_origin(req.origin, req.host, req.secure):
        return console.text(403, "refused: the form is not from this console")
    peer = str(req.peer[0]) if req.peer else "?"
    if not console.throttle.allows(peer):
        return _form(console, req, req.form, status=429,
                     problem="Too many failed logins from this address: try again in a minute.")
    caller = Caller(req.peer)
    serving(caller)
    try:
        if req.form.get("with") == "certificate":
            caller.certificate = req.certificate
            name = console.access.client(caller).name if req.certificate and console.access.enabled else None
        else:
            name = console.service.authenticate((req.form.get("token") or "").strip())
    except ttypes.Unauthenticated as e:
        # A token that was a client's says what became of it (revoked, rotated), as the command does.
        console.throttle.failed(peer)
        return _form(console, req, req.form, status=401,
                     problem="That token is not a valid client token of this cluster." if e.reason == NOT_VALID
                     else f"Refused: {e.reason}.")
    except errors.Unauthenticated:
        console.throttle.failed(peer)
        return _form(console, req, req.form, status=401, problem=(
            f"Your certificate ({req.certificate}) names no client of this cluster, or a revoked one."))
    finally:
        serving(None)
    if name is None:
        return _form(console, req, req.form, status=401,
                     problem="The browser presented no client certificate signed by this cluster's CA.")
    try:
        session = console.sessions.open(name, caller.credential)
    except Full:
        log.warning("console: login of %s from %s refused: the node holds its most sessions", name, peer)
        return _form(console, req, req.form, status=503,
                     problem="This node holds as many console sessions as it keeps: try another node, or later.")
    log.info("console: %s logged in from %s%s", name, peer,
             " with a client certificate" if caller.credential == CERTIFICATE else "")
    return console.redirect(local_path(req.form.get("next")) or "/ui/overview",
                            cookie=console.door.set_cookie(session.id, req.secure))


def _form(console: Console, req: Request, values: Mapping[str, str], status: int = 200, why: str | None = None,
          problem: str | None = None) -> Response:
    enabled = console.access.enabled
    return console.html(console.env.get_template("login.html").render(
        why=why, next=local_path(values.get("next")), problem=problem, insecure=not enabled,
        cluster=console.cluster, certificate=req.certificate if enabled else None), status)
