"""``perfsched operator`` refuses bad configuration at start-up with a message naming it (exit 2)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("PERFSCHED_")}
    full.update(env)
    full["KUBECONFIG"] = "/nonexistent/kubeconfig"
    return subprocess.run(
        [sys.executable, "-m", "scheduler.cli", "operator"],
        capture_output=True,
        text=True,
        env=full,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        (
            {"PERFSCHED_OPERATOR_POLICY": "nope"},
            "unknown policy 'nope'; known policies: deadline, elastic, fifo",
        ),
        ({"PERFSCHED_OPERATOR_POLICY_CONFIG": "{not json"}, "operator_policy_config"),
        ({"PERFSCHED_OPERATOR_RENEW_DEADLINE_SECONDS": "20"}, "PERFSCHED_OPERATOR_RENEW_DEADLINE_SECONDS"),
        ({"PERFSCHED_OPERATOR_ROUND_PERIOD_SECONDS": "0"}, "operator_round_period_seconds"),
        ({}, "cannot load kubeconfig /nonexistent/kubeconfig"),
    ],
)
def test_bad_configuration_exits_2_naming_it(env: dict[str, str], needle: str) -> None:
    out = run(env)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert needle in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
