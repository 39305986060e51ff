"""``perfsched operator`` refuses bad configuration at start-up with a message naming it (exit 2)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("PERFSCHED_")}
    full.update(env)
    full["KUBECONFIG"] = "/nonexistent/kubeconfig"
    return subprocess.run(
        [sys.executable, "-m", "scheduler.cli", "operator", *args],
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
        # policy specs: unknown key, value of the wrong type, not parseable, a list; each names the variable
        (
            {"PERFSCHED_OPERATOR_POLICY": "las:nosuch=1"},
            "PERFSCHED_OPERATOR_POLICY='las:nosuch=1': policy spec 'las:nosuch=1': policy 'las': "
            "unknown config field 'nosuch'",
        ),
        (
            {"PERFSCHED_OPERATOR_POLICY": "las:preemptive=sometimes"},
            "PERFSCHED_OPERATOR_POLICY='las:preemptive=sometimes': policy spec 'las:preemptive=sometimes': "
            "policy 'las' config field 'preemptive': must be true or false, got 'sometimes'",
        ),
        ({"PERFSCHED_OPERATOR_POLICY": "las:preemptive"}, "'preemptive' is not key=value"),
        ({"PERFSCHED_OPERATOR_POLICY": "las,fifo"}, "give one policy spec, not a list"),
        # the base config and the spec are checked together: the spec's policy has no such field
        (
            {"PERFSCHED_OPERATOR_POLICY": "las", "PERFSCHED_OPERATOR_POLICY_CONFIG": '{"backfill": true}'},
            "PERFSCHED_OPERATOR_POLICY='las': policy spec 'las': policy 'las': "
            "unknown config field 'backfill'",
        ),
        ({"PERFSCHED_OPERATOR_POLICY_CONFIG": "{not json"}, "operator_policy_config"),
        ({"PERFSCHED_OPERATOR_RENEW_DEADLINE_SECONDS": "20"}, "PERFSCHED_OPERATOR_RENEW_DEADLINE_SECONDS"),
        ({"PERFSCHED_OPERATOR_ROUND_PERIOD_SECONDS": "0"}, "operator_round_period_seconds"),
        (
            {"PERFSCHED_OPERATOR_SLOW_NODE_CONFIRM_SECONDS": "7200"},  # longer than the 3600 s window
            "PERFSCHED_OPERATOR_SLOW_NODE_CONFIRM_SECONDS must not exceed",
        ),
        ({"PERFSCHED_OPERATOR_SLOW_NODE_WINDOW_SECONDS": "0"}, "operator_slow_node_window_seconds"),
        ({}, "cannot load kubeconfig /nonexistent/kubeconfig"),
    ],
)
def test_bad_configuration_exits_2_naming_it(env: dict[str, str], needle: str) -> None:
    out = run(env)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert needle in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_policy_option_takes_a_spec_and_a_bad_one_is_named_as_the_option() -> None:
    out = run({}, "--policy", "srsf:preempt_margin_gpu_s=lots")
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stderr.strip() == (
        "perfsched: error: --policy: policy spec 'srsf:preempt_margin_gpu_s=lots': policy 'srsf' config "
        "field 'preempt_margin_gpu_s': must be a number, got 'lots'"
    )
    # a good spec gets past the policy to the next check (the kubeconfig), so it was accepted
    out = run({}, "--policy", "srsf:preempt_margin_gpu_s=60;preemptive=false")
    assert out.returncode == 2 and "cannot load kubeconfig" in out.stderr, out.stderr
