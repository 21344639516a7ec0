"""Door: how browsers reach this node's console — over TLS or not, under which names — and what
that makes of its session cookie and its transport headers.

    door = Door("delayq_console_10090", hosts=own_names("node1"), tls=True)
    door.admits("node1:10090")            # Host names the node: answered; any other: 421
    door.cookie(secure=True)              # "__Host-delayq_console_10090"

A browser that reached the console over HTTPS (or through the TLS-terminating proxy that
`plaintext` stands for) gets a `__Host-` cookie: Secure, Path=/, no Domain, so no other name or
plain-HTTP page of the machine can set or shadow it; and HSTS, so it does not come back in the
clear. Only a node without TLS (DELAYQ_INSECURE) sets a plain cookie. Pure.
"""
from __future__ import annotations

from dataclasses import dataclass

from delayq.nodes.console.hosts import allowed

HSTS = ("Strict-Transport-Security", "max-age=31536000")
SECURE_PREFIX = "__Host-"


@dataclass(frozen=True)
class Door:
    base: str                           # the cookie's name, unprefixed
    hosts: frozenset[str]               # names a Host header may give (hosts.own_names or the setting)
    tls: bool                           # the node has a certificate: the console speaks TLS only
    plaintext: bool = False             # ... but for a TLS-terminating proxy on this machine

    def admits(self, host: str | None) -> bool:
        return allowed(host, self.hosts)

    def https(self, secure: bool) -> bool:
        """The browser's page is https: the request came over TLS, or through the proxy."""
        return secure or (self.tls and self.plaintext)

    def cookie(self, secure: bool) -> str:
        return SECURE_PREFIX + self.base if self.https(secure) else self.base

    def set_cookie(self, value: str, secure: bool, expire: bool = False) -> str:
        parts = [f"{self.cookie(secure)}={value}", "Path=/", "HttpOnly", "SameSite=Strict"]
        if self.https(secure):
            parts.append("Secure")
        if expire:
            parts.append("Max-Age=0")
        return "; ".join(parts)

    def transport(self, secure: bool) -> list[tuple[str, str]]:
        """Headers for every answer to a browser that came over https."""
        return [HSTS] if self.https(secure) else []
