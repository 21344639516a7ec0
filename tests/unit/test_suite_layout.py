"""The suite's own layout: pytest imports test modules by file name (no packages under tests/), so
two modules of one name, one under tests/unit and one under tests/integration, stop the whole run
at collection."""
from __future__ import annotations

import collections
from pathlib import Path


def test_every_test_module_has_a_name_of_its_own():
    tests = Path(__file__).resolve().parents[1]
    names = collections.Counter(p.name for p in tests.rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []
