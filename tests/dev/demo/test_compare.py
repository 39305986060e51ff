"""``perfsched demo --compare`` without a cluster: the two runs' plan, the JCT CDF picture, and bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import perfsched_dev.demo.compare as compare
from perfsched_dev.demo.compare import CompareRun, run_compare, write_jct_cdf
from perfsched_dev.demo.emulated import DemoOptions
from perfsched_dev.demo.report import DemoReport


def _report(jcts: tuple[float, ...], submitted: int) -> DemoReport:
    return DemoReport(
        submitted=submitted,
        succeeded=len(jcts),
        failed=0,
        unfinished=submitted - len(jcts),
        avg_jct_s=sum(jcts) / len(jcts) if jcts else None,
        p99_jct_s=max(jcts) if jcts else None,
        utilisation=0.4,
        preemptions=0,
        resizes=0,
        restarts=0,
        predictor_error=None,
        predictor_samples=0,
        jcts=jcts,
    )


def test_run_compare_runs_the_same_workload_under_each_policy_in_its_own_state_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[DemoOptions] = []

    def fake_run_demo(
        options: DemoOptions, render: Any = None, say: Any = print
    ) -> tuple[DemoReport, dict[str, Any]]:
        seen.append(options)
        return _report((10.0, 20.0), 2), {"logs": str(options.state_dir), "elapsed_s": 30.0}

    monkeypatch.setattr(compare, "run_demo", fake_run_demo)
    options = DemoOptions(duration_s=90, jobs=12, policy="las", state_dir=tmp_path / "demo")
    said: list[str] = []
    runs = run_compare(options, "las:heterogeneity=agnostic", say=said.append)
    assert [(r.role, r.policy) for r in runs] == [
        ("default", "las"),
        ("baseline", "las:heterogeneity=agnostic"),
    ]
    assert [o.policy for o in seen] == ["las", "las:heterogeneity=agnostic"]
    assert [o.state_dir for o in seen] == [tmp_path / "demo", tmp_path / "demo-baseline"]
    # everything but the policy and the state directory is the same workload
    strip = [(o.duration_s, o.jobs, o.cluster, o.nodes_per_pool, o.seed, o.time_scale) for o in seen]
    assert strip[0] == strip[1]
    assert len(said) == 2 and "run 1 of 2" in said[0] and "run 2 of 2" in said[1]


def test_jct_cdf_png_is_written_for_both_runs(tmp_path: Path) -> None:
    runs = [
        CompareRun("default", "las", _report((5.0, 9.0, 30.0), 3), {}, 100.0),
        CompareRun(
            "baseline", "las:heterogeneity=agnostic", _report((8.0, 40.0), 3), {}, 110.0
        ),  # one unfinished
        CompareRun("baseline", "fifo", _report((), 3), {}, 50.0),  # nothing finished: a flat line at 0
    ]
    path = write_jct_cdf(tmp_path / "sub" / "jct_cdf.png", runs, title="(test)")
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 5000  # axes, two curves and a legend, not an empty canvas


def _demo(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scheduler.cli", "demo", *args, "--state-dir", str(tmp_path / "s")],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--compare", "--baseline", "nope"], "--baseline: policy spec 'nope': unknown policy 'nope'"),
        (["--compare", "--baseline", "las:nosuch=1"], "--baseline: policy spec 'las:nosuch=1'"),
        (["--compare", "--baseline", "las,fifo"], "--baseline: policy spec"),
        (["--compare", "--keep"], "--compare: cannot be combined with --keep"),
        (["--compare", "--real"], "--compare: cannot be combined with --real"),
    ],
)
def test_bad_compare_input_exits_2_with_one_line_before_starting_anything(
    args: list[str], needle: str, tmp_path: Path
) -> None:
    out = _demo(*args, tmp_path=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert needle in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "s").exists()


def test_the_default_baseline_is_a_policy_spec_the_operator_accepts() -> None:
    from typing import get_args

    from perfsched_dev.commands.demo import DEFAULT_BASELINE
    from scheduler.policies import check_single_spec, make_policy_from_spec
    from scheduler.policies.config import Heterogeneity

    if "ordered" not in get_args(Heterogeneity):
        pytest.skip("heterogeneity=ordered is not in this tree's policies yet")
    make_policy_from_spec(check_single_spec(DEFAULT_BASELINE).text)
