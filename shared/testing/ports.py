"""Ports for the harness's nodes to listen on.

`free_port` picks one below the kernel's range of ephemeral ports. A port the kernel hands out
(bind to 0) can be taken by any outgoing connection's local end before the node binds it, or
while it restarts on the same port, and the node then fails with "Address already in use".
"""
from __future__ import annotations

import random
import socket
from pathlib import Path


def free_port() -> int:
    """A port free now, below the ephemeral range; never the same one twice in one process."""
    for _ in range(200):
        port = _RNG.randrange(20000, _EPHEMERAL_LOW) if _EPHEMERAL_LOW > 21000 else 0
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            port = s.getsockname()[1]
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError("no free port below the ephemeral range")


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_EPHEMERAL_LOW = _ephemeral_low()
_HANDED_OUT: set[int] = set()
_RNG = random.Random()      # its own: a test that seeds the module's generator must not make two processes agree
