"""The docs stay true to the code: the configuration reference (docs/configuration.md) names every
setting with its default, the README's Quickstart keeps its two commands, and every relative link
in the README, docs/, bench/README.md and CHANGELOG.md reaches a file (and a heading, when it names
one)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from delayq.options import SETTINGS

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
CONFIGURATION = ROOT / "docs" / "configuration.md"
LINKED_DOCS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md", ROOT / "bench" / "README.md",
               *sorted((ROOT / "docs").glob("*.md"))]


def test_every_setting_is_documented_with_its_default():
    text = CONFIGURATION.read_text()
    table = {m.group(1): m.group(2) for m in re.finditer(r"^\| `(DELAYQ_\w+)` \| `([^`]*)` \|", text, re.M)}
    for s in SETTINGS:
        assert s.env in table, f"{s.env} missing from docs/configuration.md"
        if not callable(s.default):
            expected = str(s.default).lower() if isinstance(s.default, bool) else str(s.default)
            assert table[s.env] == expected, f"{s.env}: docs/configuration.md says {table[s.env]}, code says {expected}"
    assert set(table) == {s.env for s in SETTINGS}


def test_the_readme_leads_to_the_configuration_reference():
    assert "(docs/configuration.md)" in README


def test_the_quickstart_has_exactly_two_commands_and_ci_runs_the_test_one():
    block = README.split("## Quickstart", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert commands == ["scripts/quickstart.sh", "scripts/test.sh"]
    assert "scripts/test.sh" in (ROOT / ".ci" / "run").read_text()
    for cmd in commands:
        assert (ROOT / cmd).stat().st_mode & 0o111, f"{cmd} is not executable"


def _prose(text: str) -> str:
    """The text outside fenced code blocks."""
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings (duplicates get -1, -2, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for m in re.finditer(r"^#{1,6} (.+)$", _prose(path.read_text()), re.M):
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


@pytest.mark.parametrize("doc", LINKED_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_its_heading(doc):
    assert doc.exists(), f"{doc.relative_to(ROOT)} is gone"
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", _prose(doc.read_text())):
        if re.match(r"[a-z]+:", target):         # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else doc
        if not path.exists():
            broken.append(target)
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(target)
    assert not broken, f"{doc.relative_to(ROOT)}: broken links {broken}"
