"""The perfsched command line starts, lists its commands and prints its version."""

from __future__ import annotations

import subprocess
import sys


def test_version_prints_package_version() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "scheduler.cli", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip().startswith("perfsched 0.")
