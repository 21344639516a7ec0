"""Which characters a client's text may not hold: the one rule behind "no control characters" for
keys, tags and a bulk job's reason (delayq.nodes.validation, delayq.bulk).

Refused: Unicode's control characters (category Cc: U+0000-U+001F, U+007F and the C1 block
U+0080-U+009F, which holds NEL, U+0085) and the line and paragraph separators (Zl U+2028, Zp
U+2029). Each of them breaks a line or a record where the text is shown or carried (a log line, a
message header, a CSV export, a terminal). Format characters (Cf: zero-width joiner, soft hyphen,
bidi marks) are taken: they are part of ordinary text in several scripts and of emoji.
"""
from __future__ import annotations

import re

# Cc, Zl and Zp as ranges (a submit checks its key on the hot path: one regex search, no loop);
# tests/unit/test_text_rules.py holds them equal to unicodedata's categories over every code point.
REFUSED = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def first_control(text: str) -> str | None:
    """The first refused character of text, or None."""
    m = REFUSED.search(text)
    return None if m is None else m.group()


def control_reason(ch: str) -> str:
    """What a refusal says about the character: its code point, so an invisible one can be found."""
    return f"must not hold control characters or line separators (found U+{ord(ch):04X})"
