"""The harness's ports: out of reach of outgoing connections, free, never handed out twice."""
import socket
from pathlib import Path

from delayq.testing.ports import free_port


def test_ports_are_free_distinct_and_below_the_ephemeral_range():
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    assert all(p < low for p in ports), [p for p in ports if p >= low]
    with socket.socket() as s:          # free: a node can listen on it
        s.bind(("127.0.0.1", ports[-1]))
        s.listen()


def test_a_port_in_use_is_not_handed_out(monkeypatch):
    from delayq.testing import ports
    held = socket.socket()
    for candidate in range(24000, 25000):       # bound here, not by free_port
        try:
            held.bind(("127.0.0.1", candidate))
            break
        except OSError:
            continue
    try:
        taken = held.getsockname()[1]
        # The port in use first, then others (some may have been handed out already in this process).
        picks = iter([taken, *range(taken + 1000, taken + 3000)])
        monkeypatch.setattr(ports, "_RNG", type("Picks", (), {"randrange": lambda self, a, b: next(picks)})())
        assert free_port() >= taken + 1000
    finally:
        held.close()
