"""The scheduling core's modules compiled with mypyc (setup.py's ``NATIVE``): built, imported, and never
stale. The rest of the suite runs on whichever form is installed; its results must not depend on it."""

from __future__ import annotations

import ast
import importlib
import os
from pathlib import Path

from tests.conftest import ROOT, stale_compiled_modules


def _native_modules() -> list[str]:
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == ["NATIVE"]:
            paths = ast.literal_eval(node.value)
            return [p.removesuffix(".py").replace("/", ".") for p in paths]
    raise AssertionError("setup.py has no NATIVE list")


def test_native_modules_exist_and_include_the_engine() -> None:
    names = _native_modules()
    assert "scheduler.sim.engine" in names and "scheduler.policies.incremental" in names
    for name in names:
        assert (ROOT / (name.replace(".", "/") + ".py")).is_file(), name


def test_the_scheduling_core_is_compiled_and_imported() -> None:
    # `make venv` (pip install -e .) builds them where mypyc and a C compiler are available; without
    # them the same modules run as Python, the Philly 10k replay's rounds about 2x slower
    pure = [n for n in _native_modules() if not str(importlib.import_module(n).__file__).endswith(".so")]
    assert not pure, f"not compiled (run make venv; needs gcc and mypy): {', '.join(pure)}"


def test_a_source_edited_after_the_build_is_named(tmp_path: Path) -> None:
    pkg = tmp_path / "scheduler" / "sim"
    pkg.mkdir(parents=True)
    source, built = pkg / "engine.py", pkg / "engine.cpython-311-x86_64-linux-gnu.so"
    other, other_built = pkg / "other.py", pkg / "other.cpython-311-x86_64-linux-gnu.so"
    for path in (source, built, other, other_built):
        path.write_text("")
    os.utime(built, (1_000, 1_000))
    os.utime(source, (2_000, 2_000))  # edited after the build
    os.utime(other, (1_000, 1_000))
    os.utime(other_built, (2_000, 2_000))
    (pkg / "_forest.cpython-311-x86_64-linux-gnu.so").write_text("")  # no .py beside it: not mypyc's
    assert stale_compiled_modules(tmp_path) == ["scheduler/sim/engine.py"]
    os.utime(built, (3_000, 3_000))
    assert stale_compiled_modules(tmp_path) == []
