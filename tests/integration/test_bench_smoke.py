"""The benchmark harness runs end to end: `python -m bench --smoke` (every scenario at tiny sizes).

No timed assertions: the benchmark reports figures, this only checks that each scenario produced
them, that nothing was lost on the way, and that RESULTS.md was written.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ["limits", "submit", "security", "steady", "burst", "scale", "restart", "failover"]


def _bench(*args: str, timeout: float = 240) -> tuple[list[dict], str]:
    """Run `python -m bench ARGS`; its JSON lines and stderr, after checking it ran without error."""
    proc = subprocess.Popen([sys.executable, "-m", "bench", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)      # the harness stops its nodes and drops its databases
        try:
            stdout, stderr = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
        pytest.fail(f"the bench run took more than {timeout} s\n{stdout[-2000:]}\n{stderr[-3000:]}")
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    errors = [line for line in lines if "error" in line]
    assert proc.returncode == 0 and not errors, f"{errors}\n{stderr[-3000:]}"
    return lines, stderr


def test_every_scenario_reports_its_figures_and_loses_nothing(tmp_path):
    out = tmp_path / "RESULTS.md"
    lines, stderr = _bench("--smoke", "--out", str(out))

    figures = [line for line in lines if "figure" in line]
    for f in figures:
        assert set(f) >= {"scenario", "figure", "value", "unit", "target"}, f
    by_scenario = {s: {f["figure"]: f for f in figures if f["scenario"] == s} for s in SCENARIOS}
    assert all(by_scenario.values()), {s: sorted(f) for s, f in by_scenario.items()}

    lost = [f for f in figures if f["figure"] == "lost"]
    assert {f["scenario"] for f in lost} >= {"steady", "burst", "scale", "restart", "failover"}
    assert all(f["value"] == 0 for f in lost), "\n".join(json.dumps(f) for f in lost) + "\n" + stderr[-3000:]
    # A crash may send a task again as a further attempt; never the same attempt twice.
    repeated = [f for f in figures if f["figure"] == "repeated_attempts"]
    assert {f["scenario"] for f in repeated} >= {"steady", "burst", "restart", "failover"}
    assert all(f["value"] == 0 for f in repeated), "\n".join(json.dumps(f) for f in repeated)
    assert by_scenario["limits"]["mysql_insert_rows"]["value"] > 0
    assert by_scenario["limits"]["rabbitmq_confirmed_publishes"]["value"] > 0
    assert by_scenario["burst"]["drain_rate"]["ratio_to_limit"] is not None
    # What each side's CPU cost, to tell a busy machine from a slow node.
    single = by_scenario["submit"]["single_8_clients_node_cpu"]
    assert single["unit"] == "us/task" and single["value"] > 0, single
    assert all(word in single["note"] for word in ("node", "clients", "MariaDB", "machine")), single
    drained = by_scenario["burst"]["node_cpu_during_drain"]["note"]
    assert all(word in drained for word in ("consumer", "RabbitMQ", "MariaDB", "machine")), drained
    # What security costs, each side measured on the same host: the cost is the two sides' ratio.
    sec = by_scenario["security"]
    for kind in ("single_submit", "batch_100", "single_2_clients"):
        on, off = sec[f"{kind}_node_cpu_secured"], sec[f"{kind}_node_cpu_insecure"]
        assert on["unit"] == off["unit"] == "us/task" and on["value"] > 0 and off["value"] > 0, (on, off)
        cost = sec[f"{kind}_node_cpu_secured_vs_insecure"]
        assert cost["unit"] == "%" and cost["target"] == "<= 10", cost
        assert cost["value"] == pytest.approx(100 * (on["value"] / off["value"] - 1), abs=0.01), (cost, on, off)
        assert sec[f"{kind}_latency_secured"]["value"] > 0 and sec[f"{kind}_latency_insecure"]["value"] > 0
    # How fast the host itself ran around each scenario, to tell a slow machine from a slow change.
    for s in SCENARIOS:
        speed = by_scenario[s]["machine_speed"]
        assert speed["unit"] == "M ops/s" and speed["value"] > 0 and "before" in speed["note"], speed

    text = out.read_text()
    assert "python -m bench --smoke" in text
    for s in SCENARIOS:
        assert f"| {s} |" in text


def test_several_runs_report_each_figure_as_the_median_of_them(tmp_path):
    out = tmp_path / "RESULTS.md"
    # The raw limits alone: the quickest scenario, and every round's first.
    lines, _ = _bench("--smoke", "--runs", "2", "--scenario", "limits", "--out", str(out), timeout=120)
    runs: dict[tuple[str, str], list[int]] = {}
    for f in lines:
        runs.setdefault((f["scenario"], f["figure"]), []).append(f["run"])
    assert ("limits", "mysql_insert_rows") in runs
    assert all(r == [1, 2] for r in runs.values()), runs

    text = out.read_text()
    assert "every scenario ran 2 times" in text
    row = next(line for line in text.splitlines() if line.startswith("| limits | mysql_insert_rows |"))
    values = [f["value"] for f in lines if f["figure"] == "mysql_insert_rows"]
    assert f"median of 2 runs ({values[0]:,.0f}, {values[1]:,.0f})" in row, row


def test_the_faults_scenario_reports_what_a_killed_node_cost(tmp_path):
    """Only when asked for (it can stop shared services); the smoke size kills one node of three."""
    out = tmp_path / "RESULTS.md"
    lines, stderr = _bench("--smoke", "--scenario", "faults", "--out", str(out), timeout=200)
    got = {f["figure"]: f for f in lines if f.get("scenario") == "faults.node_kill"}
    assert set(got) == {"due_during_fault_max_lateness", "on_time_again_after", "from_recovery_max_lateness",
                        "from_recovery_p99_lateness", "lost", "early", "repeated_attempts",
                        "further_attempts"}, sorted(got)
    assert "SIGKILL" in got["due_during_fault_max_lateness"]["note"]
    assert got["from_recovery_max_lateness"]["target"] == "<= 2"
    assert got["lost"]["value"] == 0 and got["repeated_attempts"]["value"] == 0, stderr[-3000:]
    assert got["early"]["value"] == 0
    assert "| faults.node_kill | on_time_again_after |" in out.read_text()
    assert not any(f.get("scenario") in ("steady", "burst") for f in lines), "faults runs only with limits"


def test_the_rolling_restarts_stop_and_start_every_node_in_turn(tmp_path):
    """By SIGTERM and by SIGKILL; no timed assertion (the lateness is what the scenario measures)."""
    out = tmp_path / "RESULTS.md"
    lines, stderr = _bench("--smoke", "--scenario", "faults", "--set", "faults.faults=rolling_term,rolling_kill",
                           "--out", str(out), timeout=280)
    for kind, sig in (("rolling_term", "SIGTERM"), ("rolling_kill", "SIGKILL")):
        got = {f["figure"]: f for f in lines if f.get("scenario") == f"faults.{kind}"}
        assert set(got) == {"from_recovery_max_lateness", "from_recovery_p99_lateness", "lost", "early",
                            "repeated_attempts", "further_attempts"}, sorted(got)
        note = got["from_recovery_max_lateness"]["note"]
        assert all(f"{what} n{i}" in note for i in (1, 2, 3) for what in (sig, "start")), note
        assert got["from_recovery_max_lateness"]["value"] is not None, note
        assert got["lost"]["value"] == 0 and got["repeated_attempts"]["value"] == 0, stderr[-3000:]
        assert got["early"]["value"] == 0
    assert "| faults.rolling_kill | from_recovery_p99_lateness |" in out.read_text()


def test_the_key_bulk_console_and_retention_scenarios_report_their_figures_against_their_targets(tmp_path):
    """Only when asked for (at full size each fills tables of millions of rows first); tiny here."""
    out = tmp_path / "RESULTS.md"
    lines, stderr = _bench("--smoke", "--scenario", "keys", "--scenario", "bulk", "--scenario", "console",
                           "--scenario", "retention", "--out", str(out), timeout=200)
    got = {(f["scenario"], f["figure"]): f for f in lines if "figure" in f}
    targets = {("keys", "submit_with_key_vs_without"): ">= 0.9", ("keys", "find_by_key_p99"): "<= 5",
               ("keys", "cancel_by_key_p99"): "<= 10", ("keys", "replace_race_live_tasks"): "== 1",
               ("bulk", "cancel_rate"): ">= 20000", ("bulk", "lateness_p99_during_cancel"): "<= 10",
               ("console", "list_p95"): "<= 300", ("console", "search_p95"): "<= 300",
               ("console", "task_page_p95"): "<= 200", ("console", "lateness_p99_consoles_minus_none"): "<= 1",
               ("retention", "drop_ms"): "<= 1000", ("retention", "lateness_p99_drop_minus_quiet"): "<= 1"}
    for key, target in targets.items():
        assert key in got, (key, sorted(got))
        assert got[key]["target"] == target and got[key]["value"] is not None, got[key]
    # What holds at any size: one live task after the REPLACE race, every tagged task cancelled,
    # nothing of the steady loads lost.
    assert got[("keys", "replace_race_live_tasks")]["value"] == 1, got[("keys", "replace_race_live_tasks")]
    assert got[("keys", "replace_race_answered")]["met"], got[("keys", "replace_race_answered")]
    assert got[("bulk", "cancelled")]["value"] == got[("bulk", "tagged")]["value"] > 0, stderr[-3000:]
    move = got[("bulk", "mysql_move_rows")]["value"]
    rate = got[("bulk", "cancel_rate")]
    assert move > 0 and abs(rate["ratio_to_limit"] - rate["value"] / move) <= 0.001, (rate, move)
    lost = [f for (s, name), f in got.items() if name == "lost"]
    assert {f["scenario"] for f in lost} == {"bulk", "console_quiet", "console_5_consoles", "retention_quiet",
                                             "retention_drop"}
    assert all(f["value"] == 0 for f in lost), lost
    assert 0 < got[("keys", "submit_with_key_vs_without")]["value"] < 10
    assert "| console | search_p95 |" in out.read_text()
    assert got[("retention", "partition_rows")]["value"] == 5_000


def test_the_lanes_bench_cancels_every_task_at_each_lane_count():
    proc = subprocess.run([sys.executable, "-m", "bench.lanes", "--tasks", "3000", "--lanes", "1", "3",
                           "--rounds", "1"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]      # it asserts every task of each job was cancelled
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(out["tasks_per_s"]) == {"1", "3"} and all(r[0] > 0 for r in out["tasks_per_s"].values()), out
    assert out["ratio_to_one_lane"]["1"] == 1.0, out
