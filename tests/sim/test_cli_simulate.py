"""`perfsched simulate` / `perfsched experiment survey-mre` from the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from scheduler.cli import build_app

REQUIRED = (
    "policy",
    "mre",
    "jobs",
    "avg_jct_s",
    "p50_jct_s",
    "p99_jct_s",
    "makespan_s",
    "utilization",
    "preemptions",
)


def _cli_json(args: list[str]) -> dict[str, Any]:
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def test_simulate_json_has_a_row_per_policy_and_mre(tmp_path: Path) -> None:
    out = tmp_path / "out"
    report = _cli_json(
        ["simulate", "--policy", "fifo,las", "--mre", "0,0.5", "--jobs", "150", "--json", "--out", str(out)]
    )
    rows = report["results"]
    assert [(r["policy"], r["mre"]) for r in rows] == [
        ("fifo", 0.0),
        ("fifo", 0.5),
        ("las", 0.0),
        ("las", 0.5),
    ]
    for row in rows:
        for key in REQUIRED:
            assert row[key] is not None, key
        assert row["jobs"] == 150
        assert 0 < row["utilization"] <= 1
    assert report["cluster"] == "homogeneous-64xV100" and report["cluster_gpus"] == 64
    assert "drawn with seed 0" in report["model_assignment"]
    assert report["load"]["target"] == 0.8
    for name in (
        "report.json",
        "summary.csv",
        "jct_cdf.svg",
        "utilization.svg",
        "queue_length.svg",
        "jobs-las-mre0.5.csv",
    ):
        assert (out / name).is_file(), name
    assert not list(out.glob("*.png"))
    # one line per run in each plot, labelled with its run
    cdf = (out / "jct_cdf.svg").read_text()
    assert cdf.count("<path ") == 4 and ">las-mre0.5</text>" in cdf
    assert (out / "summary.csv").read_text().splitlines()[0].startswith("policy,mre,")


def _stable(report: dict[str, Any]) -> list[dict[str, Any]]:
    timing = ("wall_s", "cpu_s", "round_wall_s", "events_per_s")
    return [{k: v for k, v in r.items() if k not in timing} for r in report["results"]]


def test_same_seed_same_report_other_seed_other_report(tmp_path: Path) -> None:
    args = [
        "simulate",
        "--policy",
        "srsf",
        "--mre",
        "0.25",
        "--jobs",
        "120",
        "--gpus",
        "16",
        "--json",
        "--out",
        "",
    ]
    one = _cli_json([*args, "--seed", "3"])
    two = _cli_json([*args, "--seed", "3"])
    other = _cli_json([*args, "--seed", "4"])
    assert _stable(one) == _stable(two)
    assert _stable(one) != _stable(other)


def test_heterogeneous_cluster_and_elastic_jobs_run() -> None:
    report = _cli_json(
        ["simulate", "--policy", "hetero,elastic", "--cluster", "gavel-heterogeneous", "--elastic",
         "--jobs", "80", "--json", "--out", ""]
    )  # fmt: skip
    assert [r["policy"] for r in report["results"]] == ["hetero", "elastic"]
    assert all(r["jobs"] == 80 for r in report["results"])
    assert report["cluster_gpu_types"] == ["K80", "P100", "V100"]


def test_deadline_policy_meets_deadlines_the_elastic_policy_misses_when_slack_is_tight() -> None:
    # 200 elastic Philly jobs on modern-mix, each due at submit + 1.5 x its traced duration, load 1.5: both
    # policies resize elastic jobs, but `deadline` admits jobs with deadlines at their minimum share first,
    # while `elastic` hands GPUs out by goodput alone and lets some deadlines slip. (With loose slack or a
    # small trace nothing contends and the two coincide; this is a setting where they must differ.)
    report = _cli_json(
        ["simulate", "--policy", "elastic,deadline", "--cluster", "modern-mix", "--elastic",
         "--deadline-slack", "1.5", "--load", "1.5", "--jobs", "200", "--json", "--out", ""]
    )  # fmt: skip
    met = {r["policy"]: r["deadline_met_ratio"] for r in report["results"]}
    assert all(r["deadline_jobs"] == 200 for r in report["results"])
    assert met["deadline"] >= 0.99 and met["deadline"] > met["elastic"], met


def _perfsched(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scheduler.cli", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("content", "args", "expected"),
    [
        ("job_id,submit_time,num_gpus\nj,0,1\n", [], ["line 1", "duration"]),
        ("job_id,submit_time,num_gpus,duration\nj,0,1,-5\n", [], ["line 2", "'duration'"]),
        ("job_id,submit_time,num_gpus,duration\nj,0,0,5\n", [], ["line 2", "'num_gpus'"]),
    ],
)
def test_bad_trace_exits_2_with_one_message(
    tmp_path: Path, content: str, args: list[str], expected: list[str]
) -> None:
    trace = tmp_path / "bad.csv"
    trace.write_text(content)
    proc = _perfsched("simulate", "--policy", "fifo", "--trace", str(trace), "--out", "", *args)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert str(trace) in proc.stderr
    for part in expected:
        assert part in proc.stderr


def test_bad_spec_and_bad_options_exit_2(tmp_path: Path) -> None:
    spec = tmp_path / "c.yaml"
    spec.write_text(
        "name: x\npools:\n  - {name: a, gpu_product: Tesla-T4, gpus_per_node: 4, nodes: 1, colour: red}\n"
    )
    proc = _perfsched("simulate", "--policy", "fifo", "--cluster", str(spec), "--out", "")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{spec}: pools[0].colour: unknown field" in proc.stderr
    proc = _perfsched("simulate", "--policy", "nosuch", "--out", "")
    assert proc.returncode == 2 and "unknown policy 'nosuch'" in proc.stderr
    proc = _perfsched("simulate", "--policy", "fifo", "--load", "lots", "--out", "")
    assert proc.returncode == 2 and "--load" in proc.stderr
    proc = _perfsched("simulate", "--policy", "fifo", "--plot-format", "gif", "--out", "")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "--plot-format: expected one of svg, png, got 'gif'" in proc.stderr


def test_plot_format_png_draws_the_three_plots_with_matplotlib(tmp_path: Path) -> None:
    out = tmp_path / "out"
    _cli_json(
        ["simulate", "--policy", "fifo", "--jobs", "60", "--json", "--plot-format", "png", "--out", str(out)]
    )
    for name in ("jct_cdf.png", "utilization.png", "queue_length.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
    assert not list(out.glob("*.svg"))


def test_policy_variants_run_and_are_reported_under_their_full_spec(tmp_path: Path) -> None:
    # the same policy twice with different configs, plus a list value with its own commas;
    # --policy-config is the base that a spec's keys override
    base = tmp_path / "policies.yaml"
    base.write_text("las:\n  preemptive: false\n")
    specs = "las,las:preemptive=true,las:thresholds_gpu_hours=[0.5,5]"
    out = tmp_path / "out"
    report = _cli_json(
        ["simulate", "--policy", specs, "--policy-config", str(base), "--jobs", "60", "--gpus", "16",
         "--json", "--out", str(out)]
    )  # fmt: skip
    rows = report["results"]
    assert [r["policy"] for r in rows] == ["las", "las:preemptive=true", "las:thresholds_gpu_hours=[0.5,5]"]
    # non-preemptive LAS (from the file) preempts nobody; the spec that turns preemption back on may
    assert rows[0]["preemptions"] == 0
    assert (out / "jobs-las_preemptive=true.csv").is_file()
    summary = (out / "summary.csv").read_text()
    assert "las:thresholds_gpu_hours=[0.5,5]" in summary
    # the table shows each full spec string too
    result = CliRunner().invoke(build_app(), ["simulate", "--policy", specs, "--jobs", "20", "--out", ""])
    assert result.exit_code == 0, result.output
    for spec in ("las:preemptive=true", "las:thresholds_gpu_hours=[0.5,5]"):
        assert spec in result.output


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ("las,nosuch", "--policy: policy spec 'nosuch': unknown policy 'nosuch'; known policies: deadline"),
        ("las:nosuch=1", "--policy: policy spec 'las:nosuch=1': policy 'las': unknown config field 'nosuch'"),
        ("las:preemptive=often", "--policy: policy spec 'las:preemptive=often': policy 'las' config field "
         "'preemptive': must be true or false, got 'often'"),
        ("las:preemptive", "--policy: policy spec 'las:preemptive': 'preemptive' is not key=value"),
        (",", "--policy: no policy spec given"),
    ],
)  # fmt: skip
def test_bad_policy_spec_exits_2_with_one_line_naming_it(policy: str, message: str) -> None:
    proc = _perfsched("simulate", "--policy", policy, "--jobs", "5", "--out", "")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"perfsched: error: {message}"), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_survey_mre_small_run_srsf_beats_las_beats_fifo(tmp_path: Path) -> None:
    # 400 Philly jobs on 16 GPUs at load 1.0: contended enough for the order to matter. Robust facts only:
    # exact SRSF beats LAS, and both preemptive policies beat FIFO by a wide margin.
    report = _cli_json(
        ["experiment", "survey-mre", "--jobs", "400", "--gpus", "16", "--load", "1.0", "--mre", "0,0.5",
         "--json", "--out", str(tmp_path)]
    )  # fmt: skip
    avg = {(r["policy"], r["mre"]): r["avg_jct_s"] for r in report["results"]}
    assert avg[("srsf", 0.0)] < avg[("las", 0.0)] < avg[("fifo", 0.0)]
    assert avg[("fifo", 0.0)] > 2 * avg[("las", 0.0)]
    assert report["restart_cost_s"] == 0.0 and report["round_seconds"] == 0.0
    assert (tmp_path / "survey_mre.png").is_file()
    ratios = {r["policy"]: r["jct_ratio_to_srsf_mre0"] for r in report["results"] if r["mre"] == 0.0}
    assert ratios["srsf"] == 1.0


def test_oracle_names_map_to_the_operators_learning_oracle_and_the_cold_predictor() -> None:
    from perfmodel.truth import GroundTruth
    from scheduler.oracles.learning import CorrectedOracle
    from scheduler.oracles.predictor import PredictorOracle
    from scheduler.oracles.table import TableOracle
    from scheduler.sim.simulations import ORACLES, SimulationRequest, _make_oracles

    assert set(ORACLES) == {"table", "predictor", "predictor-cold"}
    table = GroundTruth.load()
    kinds = {}
    for name in ORACLES:
        req = SimulationRequest(policies=("las",), oracle=name)
        req.validate()
        told, truth = _make_oracles(req, table, 0.0)
        assert type(truth) is TableOracle
        kinds[name] = type(told)
    assert kinds == {"table": TableOracle, "predictor": CorrectedOracle, "predictor-cold": PredictorOracle}
    # each run learns afresh: two runs never share a learning oracle
    req = SimulationRequest(policies=("las",), oracle="predictor")
    assert _make_oracles(req, table, 0.0)[0] is not _make_oracles(req, table, 0.0)[0]


def test_a_bad_oracle_name_exits_2_with_one_line_naming_the_known_ones() -> None:
    proc = _perfsched("simulate", "--policy", "las", "--oracle", "predictr", "--jobs", "5", "--out", "")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(
        "perfsched: error: --oracle: must be one of table, predictor, predictor-cold, got 'predictr'"
    ), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_the_learning_predictor_runs_from_the_command_line() -> None:
    report = _cli_json(
        ["simulate", "--policy", "las", "--oracle", "predictor", "--jobs", "30", "--cluster",
         "gavel-heterogeneous", "--json", "--out", ""]
    )  # fmt: skip
    (row,) = report["results"]
    assert report["oracle"] == "predictor" and row["jobs"] == 30 and row["avg_jct_s"] > 0
