"""Profiles of node processes, taken with py-spy while a scenario runs, and their summary.

    python -m bench --scenario burst --profile /tmp/prof     # records, then prints the summary
    python -m bench.profile /tmp/prof/burst-*.raw            # the summary again

py-spy samples the node from outside (`--nonblocking`: the node is not paused) and writes
collapsed stacks, one thread per root frame. The summary gives each thread's busy share (samples not
waiting on a lock, a queue, a socket or a poll) and the frames that busy time is spent in.
"""
from __future__ import annotations

import collections
import re
import shutil
import subprocess
import sys
from pathlib import Path

_DIR: Path | None = None
_RUNNING: list[tuple[subprocess.Popen, Path]] = []

# A sample whose innermost frame is one of these is a thread waiting (on a lock, a queue, a socket
# or a poll), not working: such calls release the GIL.
_WAITING = re.compile(r"^(?:[\w<>.]+\.)?(wait|get|accept|poll|select|sleep|recv|recv_into|readinto|read|"
                      r"send|sendall|_sigint_safe_send|_sigint_safe_recv|_wait_for_tstate_lock|join) \(")


def enable(directory: Path) -> None:
    """Record every node started from now on into directory."""
    global _DIR
    if shutil.which("py-spy") is None:
        raise SystemExit("--profile needs py-spy on PATH (pip install py-spy)")
    directory.mkdir(parents=True, exist_ok=True)
    _DIR = directory


def attach(pid: int, name: str) -> None:
    """Called by delayq.testing.process.Node.start: sample pid until it exits (when profiling is enabled)."""
    if _DIR is None:
        return
    out = _DIR / f"{name}.raw"
    proc = subprocess.Popen(["py-spy", "record", "--pid", str(pid), "--format", "raw", "--threads",
                             "--nonblocking", "--rate", "200", "--output", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _RUNNING.append((proc, out))


def finish(scenario: str) -> list[Path]:
    """Wait for the recorders of a finished scenario (their nodes have stopped) and name their
    files after it."""
    done = []
    while _RUNNING:
        proc, out = _RUNNING.pop()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.terminate()
            proc.wait(10)
        if out.exists():
            named = out.with_name(f"{scenario}-{out.name}")
            out.rename(named)
            done.append(named)
    return sorted(done)


def summary(path: Path, threads: int = 8, frames: int = 12) -> str:
    """Busy share per thread and, for each, the frames its busy samples are in (inclusive), then
    the innermost frames they were executing (self)."""
    busy: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    inside: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    leaf: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        root, *calls = stack.split(";")
        thread = re.sub(r"^thread \(0x[0-9A-Fa-f]+\): |^thread \(\d+\): |\(\d+\)$", "", root).strip()
        total[thread] += n
        if not calls or _WAITING.match(calls[-1]):
            continue
        busy[thread] += n
        leaf[thread][re.sub(r":\d+\)$", ")", calls[-1])] += n
        for frame in {re.sub(r":\d+\)$", ")", f) for f in calls}:
            inside[thread][frame] += n
    all_samples = sum(total.values()) or 1
    lines = [f"{'thread':<20} {'busy':>7}  (share of all samples; {all_samples} samples)"]
    for thread, n in busy.most_common(threads):
        lines.append(f"{thread:<20} {100 * n / all_samples:6.1f}%")
        # Frames on (nearly) every busy path of the thread say nothing: its loop and wrappers.
        top = [(f, k) for f, k in inside[thread].most_common() if k < 0.97 * n][:frames]
        lines += [f"    {100 * k / n:5.1f}%  {f[:110]}" for f, k in top]
        lines += [f"    {100 * k / n:5.1f}%  self: {f[:104]}" for f, k in leaf[thread].most_common(4)]
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit("usage: python -m bench.profile FILE.raw...")
    for name in argv:
        print(f"-- {name}\n{summary(Path(name))}\n")


if __name__ == "__main__":
    main(sys.argv[1:])
