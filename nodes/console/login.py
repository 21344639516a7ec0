"""The console's way in: GET /ui/login shows the form, POST /ui/login opens a session.

Two credentials, each checked by the code that checks it on the Thrift port: a client token
(`authenticate`), or the client certificate the browser presented in the TLS handshake (its common
name looked up by Access, as a Thrift connection's is). A session opened with a certificate holds
only while the browser keeps presenting it (Console checks that on every request).
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Mapping

from delayq import errors
from delayq.client.gen.delayq_thrift import ttypes
from delayq.nodes.console.sessions import local_path, same_origin
from delayq.nodes.front.access import NOT_VALID
from delayq.nodes.front.caller import CERTIFICATE, Caller, serving

if TYPE_CHECKING:
    from delayq.nodes.console.app import Console, Request, Response

log = logging.getLogger(__name__)


def answer(console: Console, req: Request) -> Response:
    if req.method == "GET":
        return _form(console, req, req.query, why=req.query.get("why"))
    if not same_origin(req.origin, req.host, req.secure):
        return console.text(403, "refused: the form is not from this console")
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
        return _form(console, req, req.form, status=401,
                     problem="That token is not a valid client token of this cluster." if e.reason == NOT_VALID
                     else f"Refused: {e.reason}.")
    except errors.Unauthenticated:
        return _form(console, req, req.form, status=401, problem=(
            f"Your certificate ({req.certificate}) names no client of this cluster, or a revoked one."))
    finally:
        serving(None)
    if name is None:
        return _form(console, req, req.form, status=401,
                     problem="The browser presented no client certificate signed by this cluster's CA.")
    session = console.sessions.open(name, caller.credential)
    log.info("console: %s logged in from %s%s", name, req.peer[0] if req.peer else "?",
             " with a client certificate" if caller.credential == CERTIFICATE else "")
    return console.redirect(local_path(req.form.get("next")) or "/ui/overview",
                            cookie=console.cookie_header(session.id, req.secure))


def _form(console: Console, req: Request, values: Mapping[str, str], status: int = 200, why: str | None = None,
          problem: str | None = None) -> Response:
    enabled = console.access.enabled
    return console.html(console.env.get_template("login.html").render(
        why=why, next=local_path(values.get("next")), problem=problem, insecure=not enabled,
        cluster=console.cluster, certificate=req.certificate if enabled else None), status)
