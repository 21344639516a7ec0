"""Pure formatting for the console's pages: numbers with thousands separators, durations and
relative times, a payload shown safely, and the fingerprint that groups dead letters.

Times reach the page as epoch milliseconds inside <time> elements: the browser's script
(static/console.js) shows them in the viewer's zone and keeps the relative text current; what is
written here is the text a page has before the script runs (UTC), and what it says without one.
"""
from __future__ import annotations

import datetime
import json
import re
from dataclasses import dataclass

PAYLOAD_SHOWN = 16 * 1024       # bytes of a payload a task's page shows


def thousands(n: int | float | None) -> str:
    if n is None:
        return "–"
    if isinstance(n, float) and not n.is_integer():
        return f"{n:,.1f}"
    return f"{int(n):,}"


def duration(ms: float | None) -> str:
    """A span of time the way a person says it: 850 ms, 2.4 s, 3 min, 5 h, 2 d."""
    if ms is None:
        return "–"
    ms = abs(ms)
    if ms < 1000:
        return f"{ms:.0f} ms"
    s = ms / 1000
    if s < 10:
        return f"{s:.1f} s"
    if s < 60:
        return f"{s:.0f} s"
    if s < 3600:
        return f"{s / 60:.0f} min"
    if s < 86400:
        return f"{s / 3600:.0f} h"
    return f"{s / 86400:.0f} d"


def relative(at_ms: int | None, now_ms: int) -> str:
    """"in 3 min" or "3 min ago"; "now" within a second."""
    if at_ms is None:
        return "–"
    delta = at_ms - now_ms
    if abs(delta) < 1000:
        return "now"
    return f"in {duration(delta)}" if delta > 0 else f"{duration(delta)} ago"


def late(lateness_ms: float | None) -> str:
    """A lateness: "on time" under a millisecond, else "2 s late"."""
    if lateness_ms is None:
        return "–"
    return "on time" if lateness_ms < 1 else f"{duration(lateness_ms)} late"


def utc(at_ms: int | None) -> str:
    if at_ms is None:
        return "–"
    return datetime.datetime.fromtimestamp(at_ms / 1000, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def iso(at_ms: int | None) -> str:
    if at_ms is None:
        return ""
    return datetime.datetime.fromtimestamp(at_ms / 1000, datetime.timezone.utc).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class PayloadView:
    size: int
    kind: str               # "empty", "json", "text" or "hex"
    text: str               # what the page shows (escaped by the template, like everything else)
    truncated: bool


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def payload(data: bytes) -> PayloadView:
    """UTF-8 text without control characters is shown as text (JSON indented); anything else as a
    hex dump. Only the first PAYLOAD_SHOWN bytes are shown."""
    shown, cut = data[:PAYLOAD_SHOWN], len(data) > PAYLOAD_SHOWN
    if not data:
        return PayloadView(0, "empty", "", False)
    try:
        text = shown.decode("utf-8")
    except UnicodeDecodeError as e:
        # A cut may split a character: the text up to it is still text.
        text = shown[:e.start].decode("utf-8") if cut and e.start >= len(shown) - 3 else ""
        if not text:
            return PayloadView(len(data), "hex", hexdump(shown), cut)
    if _CONTROL.search(text):
        return PayloadView(len(data), "hex", hexdump(shown), cut)
    if not cut:
        try:
            return PayloadView(len(data), "json", json.dumps(json.loads(text), indent=2, ensure_ascii=False), False)
        except ValueError:
            pass
    return PayloadView(len(data), "text", text, cut)


def hexdump(data: bytes) -> str:
    lines = []
    for off in range(0, len(data), 16):
        chunk = data[off:off + 16]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        printable = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{off:08x}  {hexes:<47}  {printable}")
    return "\n".join(lines)


_VARIABLE = [
    (re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"), "<uuid>"),
    (re.compile(r"\b(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{8,}\b"), "<hex>"),
    (re.compile(r"'[^']*'|\"[^\"]*\""), "<str>"),
    (re.compile(r"\d+(\.\d+)?"), "<n>"),
    (re.compile(r"\s+"), " "),
]


def fingerprint(message: str | None) -> str:
    """What stays of an error message once its variable parts (ids, numbers, quoted values) are
    blanked: "order 42 not found" and "order 97 not found" are one group, "order <n> not found"."""
    text = (message or "").strip()
    for pattern, token in _VARIABLE:
        text = pattern.sub(token, text)
    return text[:200] or "(no message)"
