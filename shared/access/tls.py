"""The node's TLS context for its Thrift port. (A client's is delayq.client.security.)

TLS 1.2 at least. No TLS 1.3 session tickets: a node sends nothing on a connection between
calls, which is how a client tells a connection the node closed while it was idle
(delayq.client.scheduler.closed_by_peer); tickets would be bytes it has to read first.
"""
from __future__ import annotations

import ssl

from delayq.errors import ConfigError


def server_context(cert_file: str, key_file: str, ca_file: str = "", client_cert: str = "none") -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.num_tickets = 0
    try:
        ctx.load_cert_chain(cert_file, key_file, password=lambda: b"")      # encrypted keys: refused, never prompted
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"cannot load the node's certificate {cert_file} and key {key_file}: "
                          f"{getattr(e, 'strerror', None) or getattr(e, 'reason', None) or e}") from None
    if client_cert != "none":
        try:
            ctx.load_verify_locations(ca_file)
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"cannot load the client CA {ca_file}: "
                              f"{getattr(e, 'strerror', None) or getattr(e, 'reason', None) or e}") from None
        ctx.verify_mode = ssl.CERT_REQUIRED if client_cert == "required" else ssl.CERT_OPTIONAL
    return ctx


def common_name(cert: dict) -> str | None:
    """The subject's common name of a verified peer certificate, as ssl.SSLSocket.getpeercert() gives it."""
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return value
    return None
