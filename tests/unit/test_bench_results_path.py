"""Where `python -m bench` writes its RESULTS.md: a run of some scenarios, or at smoke sizes, never
replaces the whole run's bench/RESULTS.md unless --out asks for it."""
import sys
from pathlib import Path

# The benchmark is not part of the installed package: it is tested from the checkout.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.__main__ import results_path  # noqa: E402


def test_a_whole_run_writes_bench_results_md():
    assert results_path(None, partial=False) == Path("bench/RESULTS.md")


def test_a_partial_run_writes_nothing_unless_told_where():
    assert results_path(None, partial=True) is None
    assert results_path("/tmp/r.md", partial=True) == Path("/tmp/r.md")
