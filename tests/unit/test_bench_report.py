"""How `python -m bench --runs N` folds several runs into the figures it reports."""
import sys
from pathlib import Path

# The benchmark is not part of the installed package: its report module is tested from the checkout.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.report import combine, figure  # noqa: E402


def _runs(*values, target=None, notes=None):
    notes = notes or [None] * len(values)
    return [[figure("steady", "lateness_p99", v, "ms", target, note=n)] for v, n in zip(values, notes)]


def test_one_run_is_reported_as_it_is():
    rounds = _runs(7.5, target="<= 10", notes=["as measured"])
    assert combine(rounds) == rounds[0]


def test_the_median_run_is_reported_with_every_run_in_its_note_and_met_judged_on_it():
    (f,) = combine(_runs(12.0, 6.0, 9.0, target="<= 10", notes=["a", "b", "c"]))
    assert f["value"] == 9.0
    assert f["met"] is True
    assert f["note"] == "median of 3 runs (12, 6, 9); c"


def test_an_even_count_reports_the_worse_middle_run_for_the_target():
    assert combine(_runs(4.0, 1.0, 3.0, 2.0))[0]["value"] == 2.0
    assert combine(_runs(4.0, 1.0, 3.0, 2.0, target=">= 2"))[0]["value"] == 2.0
    assert combine(_runs(4.0, 1.0, 3.0, 2.0, target="<= 10"))[0]["value"] == 3.0


def test_a_zero_target_reports_the_worst_run_so_one_loss_is_never_hidden():
    (f,) = combine(_runs(0, 2, 0, target="== 0"))
    assert f["value"] == 2
    assert f["met"] is False
    assert f["note"].startswith("worst of 3 runs (0, 2, 0)")


def test_ratios_come_from_the_run_reported_and_order_is_kept():
    rounds = [[figure("submit", "batch", v, "tasks/s", ">= 40000", limit=lim), figure("submit", "one", 1, "x")]
              for v, lim in ((50_000, 100_000), (30_000, 60_000), (45_000, 50_000))]
    batch, one = combine(rounds)
    assert (batch["figure"], one["figure"]) == ("batch", "one")
    assert batch["value"] == 45_000 and batch["ratio_to_limit"] == 0.9 and batch["met"] is True


def test_a_figure_missing_from_a_failed_run_is_the_median_of_the_runs_that_have_it():
    rounds = _runs(5.0, 9.0, 7.0) + [[]]
    (f,) = combine(rounds)
    assert f["value"] == 7.0 and f["note"].startswith("median of 3 runs")


def test_a_rewrite_keeps_the_sections_measured_by_their_own_commands(tmp_path):
    from bench.report import KEPT_MARK, write_results
    path = tmp_path / "RESULTS.md"
    args = dict(command="python -m bench", started="today", seconds=1.0, machine={}, params={}, errors={})
    write_results(path, [], **args)
    assert KEPT_MARK not in path.read_text()
    path.write_text(path.read_text() + "\n" + KEPT_MARK + "\n\n## Retention\n\ndrop: 40 ms\n")
    write_results(path, [figure("steady", "lost", 0, "tasks", "== 0")], **args)
    text = path.read_text()
    assert "| steady | lost |" in text
    assert text.endswith(KEPT_MARK + "\n\n## Retention\n\ndrop: 40 ms\n")
    assert text.count(KEPT_MARK) == 1
