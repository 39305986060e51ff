"""``perfsched demo`` end to end: a short run succeeds and reports, bad input exits 2 before starting
anything, a missing tool or a component dying mid-run fails with a message naming the step, and every
process the demo started is gone afterwards (also after the failure)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from e2e.harness import REPO, wait_until
from perfsched_dev.devcluster.process import ProcessRecord, is_running


def demo(
    *args: str, env: dict[str, str] | None = None, timeout: float = 400
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scheduler.cli", "demo", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={**os.environ, "COLUMNS": "160", **(env or {})},
    )


def recorded(state_dir: Path) -> list[ProcessRecord]:
    return [
        ProcessRecord.from_json(p) for p in json.loads((state_dir / "state.json").read_text())["processes"]
    ]


def test_bad_arguments_exit_2_before_starting_anything(tmp_path: Path) -> None:
    for args, needle in [
        (["--cluster", "no-such-cluster"], "no-such-cluster"),
        (["--jobs", "0"], "--jobs"),
        (["--duration", "-5"], "--duration"),
        (["--policy", "nope"], "--policy"),
        (
            ["--policy", "las:nosuch=1"],
            "--policy: policy spec 'las:nosuch=1': policy 'las': unknown config field",
        ),
    ]:
        out = demo(*args, "--state-dir", str(tmp_path / "s"), timeout=60)
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert needle in out.stderr + out.stdout
        assert "Traceback" not in out.stderr
        assert not (tmp_path / "s" / "state.json").exists()


def test_missing_tools_fail_with_the_fix(tmp_path: Path) -> None:
    out = demo(
        "--state-dir", str(tmp_path / "s"), env={"PERFSCHED_CACHE": str(tmp_path / "empty-cache")}, timeout=60
    )
    assert out.returncode == 1
    assert "finding the control-plane binaries failed" in out.stdout
    assert "make tools" in out.stdout


def test_short_demo_runs_reports_and_cleans_up(tmp_path: Path) -> None:
    state = tmp_path / "demo"
    out = demo("--duration", "60", "--jobs", "5", "--state-dir", str(state))
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert "perfsched demo report" in text
    assert "5 submitted" in text
    assert "avg JCT" in text and "GPU utilisation" in text and "predictor error" in text
    assert "TrainingJobs by phase" in text
    # a last scrape of both components was saved next to the logs
    logs = state / "logs"
    assert "perfsched_extender_requests_total" in (logs / "extender-metrics.prom").read_text()
    assert "perfsched_operator_jobs" in (logs / "operator-metrics.prom").read_text()
    assert not (state / "state.json").exists(), "the cluster was not torn down"


def test_a_component_dying_mid_run_fails_the_demo_and_everything_is_stopped(tmp_path: Path) -> None:
    state = tmp_path / "demo"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "scheduler.cli",
            "demo",
            "--duration",
            "120",
            "--jobs",
            "4",
            "--state-dir",
            str(state),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
        env={**os.environ, "COLUMNS": "160"},
    )
    try:

        def emulator() -> ProcessRecord | None:
            try:
                state_json = json.loads((state / "state.json").read_text())
            except (OSError, ValueError):
                return None
            if state_json.get("phase") != "running":
                return None
            return next((r for r in recorded(state) if r.name == "perfsched-emulator"), None)

        victim = wait_until(emulator, 180, "the demo's cluster to run")
        started = recorded(state)
        time.sleep(3)
        os.kill(victim.pid, signal.SIGKILL)
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, output
    assert "a component stopped while the demo ran: perfsched-emulator" in output
    assert "cleaning up" in output
    assert not [r.name for r in started if is_running(r)]
    assert not (state / "state.json").exists()


def test_compare_runs_both_policies_reports_side_by_side_and_cleans_up(tmp_path: Path) -> None:
    state = tmp_path / "demo"
    out_dir = tmp_path / "out"
    out = demo(
        "--compare",
        "--baseline",
        "las:heterogeneity=agnostic",
        "--duration",
        "60",
        "--jobs",
        "8",
        "--state-dir",
        str(state),
        "--out",
        str(out_dir),
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    assert "run 1 of 2" in text and "run 2 of 2" in text
    assert "the same workload under two policies" in text
    assert "default: las" in text and "baseline: las:heterogeneity=agnostic" in text
    for row in (
        "avg JCT",
        "p99 JCT",
        "GPU utilisation",
        "preemptions / resizes / restarts",
        "predictor error",
    ):
        assert row in text
    assert "average JCT was lower" in text or "average JCT was NOT lower" in text
    assert (out_dir / "jct_cdf.png").read_bytes()[:4] == b"\x89PNG"
    reports = json.loads((out_dir / "report.json").read_text())
    assert [r["role"] for r in reports] == ["default", "baseline"]
    assert all(r["submitted"] == 8 for r in reports)
    # each run had its own control plane, and both were torn down
    for state_dir in (state, tmp_path / "demo-baseline"):
        assert (state_dir / "logs" / "perfsched-operator.log").exists()
        assert not (state_dir / "state.json").exists(), f"{state_dir}: the cluster was not torn down"
