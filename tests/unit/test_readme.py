"""The README's configuration reference and Quickstart stay true to the code."""
from __future__ import annotations

import re
from pathlib import Path

from delayq.options import SETTINGS

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_every_setting_is_documented_with_its_default():
    table = {m.group(1): m.group(2) for m in re.finditer(r"^\| `(DELAYQ_\w+)` \| `([^`]*)` \|", README, re.M)}
    for s in SETTINGS:
        assert s.env in table, f"{s.env} missing from the README"
        if not callable(s.default):
            expected = str(s.default).lower() if isinstance(s.default, bool) else str(s.default)
            assert table[s.env] == expected, f"{s.env}: README says {table[s.env]}, code says {expected}"
    assert set(table) == {s.env for s in SETTINGS}


def test_the_quickstart_has_exactly_two_commands_and_ci_runs_the_test_one():
    block = README.split("## Quickstart", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert commands == ["scripts/quickstart.sh", "scripts/test.sh"]
    assert "scripts/test.sh" in (ROOT / ".ci" / "run").read_text()
    for cmd in commands:
        assert (ROOT / cmd).stat().st_mode & 0o111, f"{cmd} is not executable"
