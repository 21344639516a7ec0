"""Relay: a TCP relay on loopback between nodes and a server they need (MariaDB), that a test or a
benchmark cuts and restores, so that an outage of that server can be played for the nodes without
stopping the server the machine's other runs share.

    relay = Relay(("127.0.0.1", 3306))
    node = node_factory(DELAYQ_MYSQL_URL=relay.url(database.node_url))
    relay.cut()          # as the server stopping: every connection dropped, new ones refused
    relay.restore()      # the server answering again, on the same port
    relay.close()

States: OPEN (connections relayed) -> cut() -> CUT (the port refuses) -> restore() -> OPEN ...;
close() -> CLOSED.

The relaying is socat's (one process per connection, forked from a listening one), not this
process's: a relay in the test's own threads shared its interpreter with the producers and
consumers of the test, and added milliseconds to every round trip of every node once the machine
was busy, which is what such a test measures. cut() kills socat's whole process group, so every
connection ends at once, as when the server stops.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time

from sqlalchemy.engine import make_url

from delayq.testing.ports import free_port

START_S = 10.0


class Relay:
    def __init__(self, upstream: tuple[str, int], connect_timeout: float = 2.0):
        if shutil.which("socat") is None:
            raise RuntimeError("the relay needs socat (apt-get install socat; scripts/test.sh installs it)")
        self._upstream, self._connect_timeout = upstream, connect_timeout
        self.port = free_port()
        self._proc: subprocess.Popen | None = None
        self.restore()

    def url(self, url: str) -> str:
        """A SQLAlchemy URL that reaches the same database through this relay."""
        return make_url(url).set(host="127.0.0.1", port=self.port).render_as_string(hide_password=False)

    @property
    def cut_off(self) -> bool:
        return self._proc is None

    def restore(self) -> None:
        """Accept connections again, on the same port; returns once the port listens."""
        if self._proc is not None:
            return
        host, port = self._upstream
        self._proc = subprocess.Popen(
            ["socat", f"TCP-LISTEN:{self.port},bind=127.0.0.1,reuseaddr,fork",
             f"TCP:{host}:{port},connect-timeout={self._connect_timeout:g}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + START_S
        while not _listening(self.port):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.cut()
                raise RuntimeError(f"socat did not listen on 127.0.0.1:{self.port}")
            time.sleep(0.01)

    def cut(self) -> None:
        """Drop every relayed connection and refuse new ones until restore()."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)       # the listener and each connection's child
        proc.wait(5)

    def close(self) -> None:
        self.cut()


def _listening(port: int) -> bool:
    """Whether 127.0.0.1:port is in LISTEN state (read from /proc, so that no connection is made
    through the relay to find out)."""
    want = f"0100007F:{port:04X}"
    with open("/proc/net/tcp") as f:
        return any(cols[1] == want and cols[3] == "0A" for cols in (line.split() for line in f) if len(cols) > 3)
