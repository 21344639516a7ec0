"""The set-up scripts on this machine: installing with apt waits for another apt run instead of
failing at once (a fresh machine often runs unattended upgrades at boot)."""
from __future__ import annotations

import fcntl
import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
LOCK = Path("/var/lib/dpkg/lock-frontend")


def install_bash(lock_timeout_s: int) -> subprocess.CompletedProcess:
    """delayq_apt_install of a package already installed (no download), skipping apt-get update."""
    env = {**os.environ, "_DELAYQ_APT_UPDATED": "1", "DELAYQ_APT_LOCK_TIMEOUT": str(lock_timeout_s)}
    return subprocess.run(["bash", "-c", ". scripts/apt.sh && delayq_apt_install bash"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(os.geteuid() != 0 or not LOCK.exists(), reason="needs root and Debian's dpkg")
def test_apt_install_waits_for_a_held_lock_and_says_so_when_it_gives_up():
    with open(LOCK, "w") as held:
        fcntl.lockf(held, fcntl.LOCK_EX)         # what apt itself takes
        refused = install_bash(1)
        assert refused.returncode != 0
        assert "waiting up to 1s for another apt run" in refused.stderr and "failed" in refused.stderr
        release = threading.Timer(3.0, lambda: fcntl.lockf(held, fcntl.LOCK_UN))
        release.start()
        started = time.monotonic()
        try:
            waited = install_bash(60)
        finally:
            release.cancel()
    assert waited.returncode == 0, waited.stderr
    assert time.monotonic() - started >= 2.5, "it did not wait for the lock"
