"""`python -m bench.compare`: which figures of one set of runs are worse than another's."""
import json
import sys
from pathlib import Path

# The benchmark is not part of the installed package: it is tested from the checkout.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench import compare  # noqa: E402
from bench.report import figure  # noqa: E402


def _run(rate=1000.0, p99=20.0, lost=0, speed=10.0):
    return [figure("submit", "single_1_client", rate, "tasks/s", ">= 500"),
            figure("steady", "lateness_p99", p99, "ms", "<= 100"),
            figure("steady", "lost", lost, "tasks", "== 0"),
            figure("steady", "machine_speed", speed, "M ops/s")]


def _rows(a, b, worse=10.0):
    return {r["figure"]: r for r in compare.compare(a, b, worse)}


def test_a_lower_throughput_or_a_higher_latency_beyond_the_margin_is_worse():
    rows = _rows([_run(rate=850.0, p99=23.0)], [_run()])
    assert rows["single_1_client"]["change"] == -15.0 and rows["single_1_client"]["worse"]
    assert round(rows["lateness_p99"]["change"], 3) == 15.0 and rows["lateness_p99"]["worse"]


def test_within_the_margin_or_better_is_not_worse():
    rows = _rows([_run(rate=950.0, p99=10.0)], [_run()])
    assert not rows["single_1_client"]["worse"]
    assert rows["lateness_p99"]["change"] == -50.0 and not rows["lateness_p99"]["worse"]


def test_a_count_that_must_be_zero_is_worse_when_it_is_higher_than_the_other_side():
    assert _rows([_run(lost=1)], [_run()])["lost"]["worse"]
    assert not _rows([_run(lost=1)], [_run(lost=1)])["lost"]["worse"]
    assert not _rows([_run()], [_run(lost=3)])["lost"]["worse"]


def test_machine_speed_is_shown_without_a_verdict():
    row = _rows([_run(speed=5.0)], [_run(speed=10.0)])["machine_speed"]
    assert (row["a"], row["b"], row["change"], row["worse"]) == (5.0, 10.0, None, False)


def test_a_difference_of_two_figures_is_shown_without_a_verdict():
    def run(extra):
        return [figure("guarded", "p99_minus_steady_p99", extra, "ms", "<= 1")]
    row = compare.compare([run(0.9)], [run(0.1)], 10.0)[0]
    assert (row["change"], row["worse"]) == (None, False)


def test_each_side_is_the_median_of_its_runs():
    rows = _rows([_run(p99=40.0), _run(p99=21.0), _run(p99=5.0)], [_run(p99=20.0), _run(p99=90.0), _run(p99=1.0)])
    assert (rows["lateness_p99"]["a"], rows["lateness_p99"]["b"]) == (21.0, 20.0)
    assert not rows["lateness_p99"]["worse"]
    assert (rows["lateness_p99"]["a_range"], rows["lateness_p99"]["b_range"]) == ((5.0, 40.0), (1.0, 90.0))
    assert "| steady | lateness_p99 | ms | 21 | 5 - 40 | 20 | 1 - 90 | +5.0% |  |" in compare.markdown(
        list(rows.values()), 10.0)


def test_the_command_reads_run_output_prints_a_table_and_fails_on_a_worse_figure(tmp_path, capsys):
    def write(name, figures):
        path = tmp_path / name
        path.write_text("== steady: 60 s\n" + "".join(json.dumps(f) + "\n" for f in figures))
        return str(path)
    on, off = write("on.jsonl", _run(rate=700.0)), write("off.jsonl", _run())
    assert compare.main([on, "--vs", off]) == 1
    out = capsys.readouterr().out
    assert "| submit | single_1_client | tasks/s | 700 |  | 1,000 |  | -30.0% | **yes** |" in out
    assert compare.main([on, "--vs", off, "--worse", "50"]) == 0


def test_a_file_without_figures_is_refused(tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("not a run\n")
    assert compare.main([str(empty), "--vs", str(empty)]) == 2
    assert "holds no figures" in capsys.readouterr().err
