"""Gavel's LAS experiment: its generator and table as re-implemented, and `perfsched experiment gavel-las`."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from scheduler.cli import build_app
from scheduler.core.errors import ConfigError
from scheduler.policies.las import LasConfig
from scheduler.sim.gavel import GavelLasRequest, GavelTable, generate_jobs, paper_figure, paper_value


def test_table_is_gavels_26_job_types_on_three_gpu_types() -> None:
    table = GavelTable.load()
    assert len(table.types) == 26
    assert table.gpu_types == ("K80", "P100", "V100")
    # a value read back from the shipped CSV (Gavel's simulation_throughputs.json, ResNet-50 batch 64)
    assert table.throughput("resnet50", 64, "K80", 1) == pytest.approx(0.6190282202246573)
    assert table.throughput("resnet50", 64, "K80", 2) is None  # single-GPU table only
    assert table.throughput("nosuch", 1, "V100", 1) is None


def test_generator_follows_gavels_continuous_single_distribution() -> None:
    table = GavelTable.load()
    jobs, ideal = generate_jobs(table, rate_per_h=4.0, num_jobs=4000, seed=1)
    gaps = [b.submit_time - a.submit_time for a, b in itertools.pairwise(jobs)]
    # Poisson arrivals at 4 jobs/hour: mean gap 900 s (within 5% over 4,000 jobs)
    assert statistics.fmean(gaps) == pytest.approx(900.0, rel=0.05)
    durations_min = [ideal[j.name] / 60.0 for j in jobs]
    long = [d for d in durations_min if d > 10**3]
    # 20% long jobs of 10^3..10^4 minutes, the rest 10^1.5..10^3 minutes
    assert len(long) / len(jobs) == pytest.approx(0.2, abs=0.03)
    assert min(durations_min) >= 10**1.5 - 1e-6 and max(durations_min) <= 10**4 + 1e-6
    # every job is one GPU and its work is its V100 duration x its type's V100 steps/s
    j = jobs[7]
    assert j.max_gpus == 1
    v100 = table.throughput(j.model, j.batch_size, "V100", 1)
    assert v100 is not None and j.total_work == pytest.approx(ideal[j.name] * v100)
    assert len({(j.model, j.batch_size) for j in jobs}) == 26


def test_same_seed_same_jobs_at_every_rate() -> None:
    table = GavelTable.load()
    a, _ = generate_jobs(table, 2.0, 50, seed=3)
    b, _ = generate_jobs(table, 4.0, 50, seed=3)
    c, _ = generate_jobs(table, 2.0, 50, seed=4)
    assert [(j.model, j.total_work) for j in a] == [(j.model, j.total_work) for j in b]
    assert [j.submit_time / 2 for j in a] == pytest.approx([j.submit_time for j in b])
    assert [(j.model, j.total_work) for j in a] != [(j.model, j.total_work) for j in c]


def test_paper_figure_is_figure_8_with_interpolation() -> None:
    pts = paper_figure()
    assert {p.policy for p in pts} == {"LAS", "Gavel"}
    assert paper_value(pts, "LAS", 5.6) == pytest.approx(95.99)
    assert paper_value(pts, "Gavel", 5.6) == pytest.approx(28.96)
    # halfway between 4.8 (18.97) and 5.2 (22.02)
    assert paper_value(pts, "Gavel", 5.0) == pytest.approx((18.97 + 22.02) / 2)
    assert paper_value(pts, "LAS", 6.0) is None  # LAS has no steady state there in the paper's runs


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rates": ()}, "--rates: give at least one input job rate"),
        ({"window": (50, 40)}, "--window: must be START:END"),
        ({"window": (0, 999)}, "--window: must be START:END"),
        ({"restart_cost_s": -1.0}, "--restart-cost"),
    ],
)
def test_bad_requests_name_the_option(kwargs: dict[str, object], message: str) -> None:
    req = GavelLasRequest(**{"rates": (1.0,), "jobs": 100, "window": (10, 50), **kwargs})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        req.validate()


def _pair() -> tuple[str, str]:
    """The experiment's own (aware, agnostic) specs once `las` takes `heterogeneity`; until then the Gavel
    LP (`hetero`) against today's type-agnostic `las`."""
    if "heterogeneity" in {f.name for f in dataclasses.fields(LasConfig)}:
        return "las", "las:heterogeneity=agnostic"
    return "hetero", "las"


def test_quick_experiment_prints_both_curves_and_the_papers_figures(tmp_path: Path) -> None:
    aware, agnostic = _pair()
    out = tmp_path / "out"
    args = ["experiment", "gavel-las", "--quick", "--aware", aware, "--agnostic", agnostic, "--out", str(out)]
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 0, result.output
    text = result.output
    assert "Figure 8" in text and "OSDI 2020" in text
    assert f"ours agnostic: {agnostic}\n" in text and f"ours aware: {aware}\n" in text
    assert "ours ordered: las:heterogeneity=ordered\n" in text  # the newest-first baseline
    assert "paper" in text and "LAS" in text and "Gavel" in text
    # the paper's values at the quick rates (2 and 5.6 jobs/hour) are printed beside ours
    assert "96.0" in text and "29.0" in text
    report = json.loads((out / "report.json").read_text())
    assert (out / "gavel_las.png").stat().st_size > 0
    rows = report["results"]
    assert sorted((r["input_job_rate_per_h"], r["role"], r["policy"]) for r in rows if r["seed"] == 0) == [
        (2.0, "agnostic", agnostic), (2.0, "aware", aware), (2.0, "ordered", "las:heterogeneity=ordered"),
        (5.6, "agnostic", agnostic), (5.6, "aware", aware), (5.6, "ordered", "las:heterogeneity=ordered"),
    ]  # fmt: skip
    for r in rows:
        assert r["window_jobs"] == 60 and r["unfinished"] == 0
        assert math.isfinite(r["avg_jct_h"]) and r["avg_jct_h"] > 0
    # choosing each job's GPU type by its speed beats choosing by free GPUs on this cluster
    avg = {(r["input_job_rate_per_h"], r["role"]): r["avg_jct_h"] for r in rows}
    assert avg[(2.0, "aware")] < avg[(2.0, "agnostic")]


def test_bad_spec_or_window_exits_2_naming_the_option() -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "scheduler.cli", "experiment", "gavel-las", "--out", "", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )

    # both are checked before anything runs
    proc = run("--aware", "las:nosuch=1")
    assert proc.returncode == 2
    assert "--aware: policy spec 'las:nosuch=1': policy 'las': unknown config field 'nosuch'" in proc.stderr
    proc = run("--window", "5")
    assert proc.returncode == 2 and "--window: must be START:END job ids, got '5'" in proc.stderr


def test_several_seeds_are_each_run_and_averaged_per_rate() -> None:
    args = ["experiment", "gavel-las", "--rates", "2", "--jobs", "40", "--window", "10:30", "--seeds", "0,1",
            "--aware", "las", "--agnostic", "fifo", "--ordered", "", "--json", "--out", ""]  # fmt: skip
    result = CliRunner().invoke(build_app(), args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["seeds"] == [0, 1]
    runs = {(r["seed"], r["role"]): r["avg_jct_h"] for r in report["results"]}
    # ``--ordered ''`` leaves the newest-first baseline out
    assert set(runs) == {(0, "aware"), (0, "agnostic"), (1, "aware"), (1, "agnostic")}
    assert runs[(0, "aware")] != runs[(1, "aware")]  # other jobs
    from scheduler.commands.simulate import _gavel_rows

    (row,) = _gavel_rows(report)
    assert row["aware"] == pytest.approx((runs[(0, "aware")] + runs[(1, "aware")]) / 2)
    assert row["agnostic"] == pytest.approx((runs[(0, "agnostic")] + runs[(1, "agnostic")]) / 2)
