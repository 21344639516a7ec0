"""The console's form and query fields, read and checked: a refusal names the field as the page
labels it and says what it takes ("in minutes: must be 0 or more, not -5"), never a message of
Python's own ("invalid literal for int()").

Pure: the pages call these before any Thrift call; the calls still check what they check.
"""
from __future__ import annotations

import math
import re
from typing import Iterable

from delayq.clock import LATEST_MS

MAX_MS = LATEST_MS                  # as the delayq command's times (delayq.clock)
_WHOLE = re.compile(r"[+-]?[0-9]{1,19}")
_DECIMAL = re.compile(r"[+-]?([0-9]{1,19}(\.[0-9]*)?|\.[0-9]+)")


class ActionRefused(Exception):
    """What a page tells the person when an action or a read could not be done."""


def shown(value: str, limit: int = 40) -> str:
    """A value the person gave, quoted for a message: control characters visible, long ones cut."""
    return repr(value[:limit]) + ("…" if len(value) > limit else "")


def _blank(value: str | None) -> bool:
    return value is None or value.strip() == ""


def _span(least: int | None, most: int | None) -> str:
    if least is not None and most is not None:
        return f"from {least:,} to {most:,}"
    return f"{least:,} or more" if least is not None else f"{most:,} or less"


def whole(value: str | None, label: str, least: int | None = None, most: int | None = None) -> int | None:
    """A whole number (None when left blank) within [least, most]."""
    if _blank(value):
        return None
    assert value is not None
    text = value.strip()
    if not _WHOLE.fullmatch(text):
        raise ActionRefused(f"{label}: not a whole number: {shown(value)}")
    n = int(text)
    if (least is not None and n < least) or (most is not None and n > most):
        raise ActionRefused(f"{label}: must be {_span(least, most)}, not {n:,}")
    return n


def needed(n: int | None, label: str, what: str) -> int:
    """A field the form always sends: refused when it is blank."""
    if n is None:
        raise ActionRefused(f"{label}: missing: {what}")
    return n


def decimal(value: str | None, label: str) -> float | None:
    """A finite decimal number, such as 2.5 (None when blank); its range is the call's to check."""
    if _blank(value):
        return None
    assert value is not None
    if not _DECIMAL.fullmatch(value.strip()) or not math.isfinite(float(value)):
        raise ActionRefused(f"{label}: not a number: {shown(value)}")
    return float(value)


def instant(value: str | None, label: str) -> int | None:
    """A time as epoch milliseconds (what the pages' time pickers send), None when blank."""
    try:
        return whole(value, label, 0, MAX_MS)
    except ActionRefused:
        raise ActionRefused(f"{label}: not a time: expected epoch milliseconds from 0 to {MAX_MS}, "
                            f"not {shown(value or '')}") from None


def one_of(value: str | None, label: str, choices: Iterable[str]) -> str:
    options = list(choices)
    if value not in options:
        raise ActionRefused(f"{label}: {shown(value or '')} is not one of {', '.join(options)}")
    return value


def page_mark(value: str | None, label: str = "after") -> tuple[int, str] | None:
    """A keyset page's start as the pages write it: "<epoch ms>:<task id>" (None when blank)."""
    if _blank(value):
        return None
    assert value is not None
    ms, sep, last = value.partition(":")
    if not sep or not last or not _WHOLE.fullmatch(ms) or not 0 <= int(ms) <= MAX_MS:
        raise ActionRefused(f"{label}: not a page of this search (expected <epoch ms>:<task id>, "
                            f"as its Next link gives): {shown(value)}")
    return int(ms), last
