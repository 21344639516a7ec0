"""The console's pure formatting: numbers, durations, relative times, payloads, fingerprints."""
from delayq.nodes.console import view


def test_thousands_and_durations():
    assert view.thousands(1234567) == "1,234,567"
    assert view.thousands(0) == "0"
    assert view.thousands(2.5) == "2.5"
    assert view.thousands(None) == "–"
    assert view.duration(850) == "850 ms"
    assert view.duration(2400) == "2.4 s"
    assert view.duration(45_000) == "45 s"
    assert view.duration(180_000) == "3 min"
    assert view.duration(5 * 3_600_000) == "5 h"
    assert view.duration(2 * 86_400_000) == "2 d"


def test_relative_and_late():
    now = 1_000_000_000
    assert view.relative(now + 180_000, now) == "in 3 min"
    assert view.relative(now - 2_000, now) == "2.0 s ago"
    assert view.relative(now + 300, now) == "now"
    assert view.late(2000) == "2.0 s late"
    assert view.late(0.2) == "on time"
    assert view.utc(0) == "1970-01-01 00:00:00 UTC"


def test_payload_json_text_and_binary():
    p = view.payload(b'{"order": 42}')
    assert (p.kind, p.size, p.truncated) == ("json", 13, False)
    assert '"order": 42' in p.text
    assert view.payload(b"<script>alert(1)</script>").kind == "text"      # shown as text; the template escapes it
    b = view.payload(bytes(range(20)))
    assert b.kind == "hex" and b.text.startswith("00000000  00 01 02")
    assert view.payload(b"").kind == "empty"
    assert view.payload("é".encode("latin-1")).kind == "hex"


def test_payload_is_cut_at_the_limit():
    big = view.payload(b"a" * (view.PAYLOAD_SHOWN + 10))
    assert big.truncated and len(big.text) == view.PAYLOAD_SHOWN and big.size == view.PAYLOAD_SHOWN + 10
    # A multi-byte character split by the cut keeps the text before it.
    split = view.payload("é".encode() * (view.PAYLOAD_SHOWN // 2 + 1))
    assert split.kind == "text" and split.truncated


def test_fingerprint_groups_the_same_error_with_different_values():
    a = view.fingerprint("order 42 not found (id 0193f1c2-aaaa-bbbb-cccc-1234567890ab)")
    b = view.fingerprint("order 97 not found (id 11111111-2222-3333-4444-555555555555)")
    assert a == b == "order <n> not found (id <uuid>)"
    assert view.fingerprint("timeout calling 'billing' after 3000 ms") == "timeout calling <str> after <n> ms"
    assert view.fingerprint("deadbeef01 failed") == view.fingerprint("cafebabe99 failed")
    assert view.fingerprint(None) == "(no message)"
    assert view.fingerprint("connection refused") != view.fingerprint("connection reset")
