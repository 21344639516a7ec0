"""The Grafana dashboard only queries metrics the nodes export."""
from __future__ import annotations

import json
import re
from pathlib import Path

from delayq.nodes.metrics import _HELP, Metrics

ROOT = Path(__file__).resolve().parents[2]


def exported_names() -> set[str]:
    names = set()
    for collector in Metrics().registry._collector_to_names:       # the event metrics
        for family in collector.describe() if hasattr(collector, "describe") else []:
            names.add(family.name)
    names |= {f"delayq_{n.removesuffix('_total')}" for n in _HELP}   # the scrape-time ones
    return names


def test_every_dashboard_query_uses_an_exported_metric():
    dash = json.loads((ROOT / "deploy" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    used = {re.sub(r"_(bucket|total|count|sum)$", "", m) for e in exprs for m in re.findall(r"delayq_\w+", e)}
    known = {re.sub(r"_(total)$", "", n) for n in exported_names()}
    assert used and used <= known, sorted(used - known)
    titles = " ".join(p["title"] for p in dash["panels"]).lower()
    for topic in ("lateness", "throughput", "queue", "shards", "errors"):
        assert topic in titles
