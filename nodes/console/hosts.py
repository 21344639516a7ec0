"""Which names a request to the console may give in its Host header.

A page of another site that rebinds its own name to this node's address (DNS rebinding) reaches
the console as a same-origin page of that name: its requests carry the attacker's name in Host.
The console answers only requests naming the node itself: its host and advertised names, this
machine's names and the loopback addresses, or, when set, the names DELAYQ_CONSOLE_HOSTS lists
(a proxy's or a load balancer's name). Pure, but for `own_names` reading the machine's name.
"""
from __future__ import annotations

import socket

LOOPBACK = ("localhost", "127.0.0.1", "::1")
ANY = ("", "0.0.0.0", "::")          # bind addresses that name no host


def own_names(*hosts: str) -> frozenset[str]:
    """The node's names: the given hosts (its bind and advertised addresses), the machine's name
    and the loopback addresses."""
    names = {*LOOPBACK, socket.gethostname(), socket.getfqdn(), *hosts}
    return frozenset(n.lower().rstrip(".") for n in names if n not in ANY)


def listed(setting: str) -> frozenset[str]:
    """The names of DELAYQ_CONSOLE_HOSTS (comma-separated), or none."""
    return frozenset(n.strip().lower().rstrip(".") for n in setting.split(",") if n.strip())


def name_of(host: str | None) -> str | None:
    """The name a Host header gives, without its port ("[::1]:8443" -> "::1"); None when malformed."""
    if not host or any(not 0x21 <= ord(ch) <= 0x7e for ch in host):
        return None
    if host.startswith("["):
        inner, bracket, rest = host[1:].partition("]")
        if not bracket or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
        return inner.lower()
    name, colon, port = host.partition(":")
    if colon and not port.isdigit():
        return None
    return name.lower().rstrip(".") or None


def allowed(host: str | None, names: frozenset[str]) -> bool:
    return name_of(host) in names
