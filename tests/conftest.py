"""Settings shared by every unit test: a failing hypothesis example prints the blob that replays it
(``@reproduce_failure``). Under CI (``CI`` set) the property tests draw the same examples on every run
(``derandomize``), so a red run is a regression in the change, never a new random draw; developers' runs
keep drawing new examples and save the failing ones in ``.hypothesis``.

A module compiled with mypyc (setup.py's ``NATIVE``) sits beside its source as a ``.so``, which Python
imports instead of the ``.py``: a source edited after the build would go untested, so the session stops
with one line naming it until the build is redone (``make venv``) or the ``.so`` removed.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("perfsched", print_blob=True)
settings.register_profile("perfsched-ci", print_blob=True, derandomize=True, database=None)
settings.load_profile("perfsched-ci" if os.environ.get("CI") else "perfsched")

ROOT = Path(__file__).resolve().parent.parent


def stale_compiled_modules(root: Path = ROOT) -> list[str]:
    """Sources under ``root``'s packages that are newer than the compiled module beside them."""
    stale = []
    for package in ("scheduler", "perfmodel"):
        for so in sorted((root / package).rglob("*.so")):
            source = so.with_name(so.name.split(".", 1)[0] + ".py")
            if source.is_file() and source.stat().st_mtime > so.stat().st_mtime:
                stale.append(str(source.relative_to(root)))
    return stale


def pytest_sessionstart(session: pytest.Session) -> None:
    stale = stale_compiled_modules()
    if stale:
        raise pytest.UsageError(
            f"{', '.join(stale)}: edited after its compiled module was built; run `make venv` "
            "(or delete the .so beside it) so the tests import this source"
        )
