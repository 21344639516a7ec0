"""Two sets of benchmark runs side by side: what a setting costs.

    python -m bench --out /tmp/on1.md > /tmp/on1.jsonl               # security on
    python -m bench --insecure --out /tmp/off1.md > /tmp/off1.jsonl  # security off
    ...                                                              # alternate, to share the host's drift
    python -m bench.compare /tmp/on*.jsonl --vs /tmp/off*.jsonl --worse 10

Each side's figure is combined over its runs as `--runs` combines them (bench.report.combine: the
median, the worst where the target is "== 0"). A figure is worse on the first side when it is a
throughput that is lower, or a time, a CPU cost or a memory size that is higher, by more than
--worse percent, or a count that must be 0 (lost, duplicates) and is higher. Other figures
(counts, ratios to limits, differences of two figures, machine_speed) are shown without a
verdict; machine_speed says whether the host ran as fast for both sides. Beside each side's value
stands the range of its runs: where the runs of one side differ by more than the margin, so may
the two sides without any cost of the setting. Exit status 1 when a figure is worse.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from bench.report import fmt, combine

HIGHER_IS_BETTER = {"tasks/s", "msg/s", "rows/s"}
LOWER_IS_BETTER = {"ms", "s", "us/task", "% of a core", "MB"}
# A figure that is the difference of two others (guarded's p99_minus_steady_p99, scale's
# lateness_p99_vs_empty_table): near zero, its percent change says nothing; its two figures are judged.
_DIFFERENCE = re.compile(r"_minus_|_vs_")


def load(path: Path) -> list[dict]:
    """The figures one run printed (its JSON lines; anything else on stdout is skipped)."""
    out = []
    for line in path.read_text().splitlines():
        if line.startswith("{"):
            f = json.loads(line)
            if "figure" in f:
                out.append(f)
    return out


def verdict(f: dict, a, b, worse_pct: float) -> tuple[float | None, bool]:
    """(change of a against b in percent, whether a is worse by more than worse_pct)."""
    if (f.get("target") or "").startswith("=="):
        return None, (a or 0) > (b or 0)
    if a is None or b is None or not b or f["unit"] not in HIGHER_IS_BETTER | LOWER_IS_BETTER \
            or _DIFFERENCE.search(f["figure"]):
        return None, False
    change = (a - b) / abs(b) * 100
    worse = -change if f["unit"] in HIGHER_IS_BETTER else change
    return change, worse > worse_pct


def _ranges(side: list[list[dict]]) -> dict[tuple[str, str], tuple]:
    """Per figure, the lowest and highest value of the side's runs."""
    values: dict[tuple[str, str], list] = {}
    for figures in side:
        for f in figures:
            if f["value"] is not None:
                values.setdefault((f["scenario"], f["figure"]), []).append(f["value"])
    return {key: (min(v), max(v)) for key, v in values.items()}


def compare(side_a: list[list[dict]], side_b: list[list[dict]], worse_pct: float) -> list[dict]:
    """One row per figure of side a: scenario, figure, unit, a, b, change (%), worse, and each
    side's (lowest, highest) run as a_range and b_range."""
    b_of = {(f["scenario"], f["figure"]): f["value"] for f in combine(side_b)}
    a_ranges, b_ranges = _ranges(side_a), _ranges(side_b)
    rows = []
    for f in combine(side_a):
        key = (f["scenario"], f["figure"])
        a, b = f["value"], b_of.get(key)
        change, worse = verdict(f, a, b, worse_pct)
        rows.append({"scenario": f["scenario"], "figure": f["figure"], "unit": f["unit"], "a": a, "b": b,
                     "change": change, "worse": worse, "a_range": a_ranges.get(key), "b_range": b_ranges.get(key)})
    return rows


def _span(r: tuple | None) -> str:
    return "" if r is None or fmt(r[0]) == fmt(r[1]) else f"{fmt(r[0])} - {fmt(r[1])}"


def markdown(rows: list[dict], worse_pct: float) -> str:
    out = ["| scenario | figure | unit | a | a's runs | b | b's runs | change | worse by > %g%% |" % worse_pct,
           "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        change = "" if r["change"] is None else f"{r['change']:+.1f}%"
        out.append(f"| {r['scenario']} | {r['figure']} | {r['unit']} | {fmt(r['a'])} | {_span(r['a_range'])} | "
                   f"{fmt(r['b'])} | {_span(r['b_range'])} | {change} | {'**yes**' if r['worse'] else ''} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.split("\n\n")[0])
    p.add_argument("a", nargs="+", type=Path, help="the JSON lines of side a's runs (python -m bench > FILE)")
    p.add_argument("--vs", nargs="+", type=Path, required=True, help="the JSON lines of side b's runs")
    p.add_argument("--worse", type=float, default=10.0, help="percent by which a figure may be worse (10)")
    args = p.parse_args(argv)
    try:
        side_a, side_b = [load(f) for f in args.a], [load(f) for f in args.vs]
    except (OSError, ValueError) as e:
        print(f"bench.compare: {e}", file=sys.stderr)
        return 2
    if not all(side_a) or not all(side_b):
        print("bench.compare: a file holds no figures", file=sys.stderr)
        return 2
    rows = compare(side_a, side_b, args.worse)
    print(markdown(rows, args.worse))
    return 1 if any(r["worse"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
