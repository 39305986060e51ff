"""Build hook for the compiled parts; everything else (metadata, dependencies, packages) is in pyproject.toml.

- ``perfmodel._forest`` (C): the predictor's tree walk. Without it the predictor walks its trees with
  numpy (same leaves, about 3x slower on the speed benchmark's batches).
- The scheduling core's hot modules (``NATIVE`` below), compiled with mypyc from the same source: the
  round's types and placement, the planner, the greedy placement and preemption, the policies'
  incremental round and SRSF's ranks for it, the table oracle and the simulator's engine.
  Without them the same modules run as Python (same results, the Philly 10k replay's rounds about
  2x slower).
  mypyc comes with mypy (the ``dev`` extra); ``PERFSCHED_NO_MYPYC=1`` builds without it.

Both are optional: where no C compiler (or no mypyc) is available the build goes on without them, and
the Makefile's ``venv`` target prints a WARNING naming what is missing.
"""

from __future__ import annotations

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

#: modules compiled with mypyc: the simulator's round loop and what it calls every round
NATIVE = [
    "scheduler/core/decisions.py",
    "scheduler/core/placement.py",
    "scheduler/core/planner.py",
    "scheduler/core/types.py",
    "scheduler/oracles/table.py",
    "scheduler/policies/greedy.py",
    "scheduler/policies/incremental.py",
    "scheduler/policies/srsf_rounds.py",
    "scheduler/sim/engine.py",
]
#: the shared library of the compiled modules (inside the package, so an editable install finds it)
NATIVE_GROUP = "scheduler._native"


def _native_extensions() -> list[Extension]:
    """mypyc's extensions for ``NATIVE``, or none (with a warning) where mypyc cannot build them."""
    if os.environ.get("PERFSCHED_NO_MYPYC"):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        sys.stderr.write("WARNING: mypyc is not installed: the scheduling core is not compiled\n")
        return []
    try:
        exts: list[Extension] = mypycify(NATIVE, opt_level="3", group_name=NATIVE_GROUP)
    except (Exception, SystemExit) as exc:  # mypyc reports a type error by exiting
        sys.stderr.write(f"WARNING: mypyc failed ({exc!r}): the scheduling core is not compiled\n")
        return []
    for ext in exts:
        ext.optional = True  # no C compiler: the pure-Python modules serve
    return exts


class BuildExt(build_ext):  # type: ignore[misc]
    """``build_ext`` that generates the mypyc extensions only when extensions are actually built
    (not for every metadata query pip makes)."""

    def finalize_options(self) -> None:
        self._native = _native_extensions()
        self.distribution.ext_modules = [*(self.distribution.ext_modules or []), *self._native]
        super().finalize_options()

    def run(self) -> None:
        super().run()
        # an unchanged module's C is not recompiled, so its .so keeps its old time: mark it as built
        # from the source now beside it (tests/conftest.py refuses a source newer than its .so)
        for ext in self._native:
            built = self.get_ext_fullpath(ext.name)
            if os.path.exists(built):
                os.utime(built)


setup(
    ext_modules=[
        Extension(
            "perfmodel._forest",
            sources=["perfmodel/_forest.c"],
            extra_compile_args=["-O3"],
            optional=True,
        )
    ],
    cmdclass={"build_ext": BuildExt},
)
