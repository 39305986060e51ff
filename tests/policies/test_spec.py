"""Policy spec strings ``NAME[:key=value;...]``: what parses to what, and each error naming what is wrong."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.core.errors import ConfigError
from scheduler.policies import (
    DEFAULT_POLICY_SPEC,
    POLICIES,
    make_policy_from_spec,
    parse_policy_spec,
    parse_policy_specs,
    split_policy_specs,
)
from scheduler.policies.fifo import FifoPolicy
from scheduler.policies.las import LasPolicy

VALID = [
    # (spec, name, config, canonical text)
    ("las", "las", {}, "las"),
    ("  las  ", "las", {}, "las"),
    ("fifo:backfill=true", "fifo", {"backfill": True}, "fifo:backfill=true"),
    # whitespace around names, keys and values is dropped; a trailing ';' is allowed
    ("las: preemptive = false ;", "las", {"preemptive": False}, "las:preemptive=false"),
    # JSON literals: numbers, null, lists (a list keeps its commas)
    ("srsf:preempt_margin_gpu_s=60", "srsf", {"preempt_margin_gpu_s": 60}, "srsf:preempt_margin_gpu_s=60"),
    ("ftf:preempt_margin=0.5", "ftf", {"preempt_margin": 0.5}, "ftf:preempt_margin=0.5"),
    ("las:promote_knob=null", "las", {"promote_knob": None}, "las:promote_knob=null"),
    ("srsf:lease_s=0", "srsf", {"lease_s": 0}, "srsf:lease_s=0"),
    (
        "las:thresholds_gpu_hours=[1, 10];preemptive=false",
        "las",
        {"thresholds_gpu_hours": [1, 10], "preemptive": False},
        "las:thresholds_gpu_hours=[1, 10];preemptive=false",
    ),
    # anything else is a bare string, checked by the policy's typed config (a Literal here)
    ("deadline:rejected=drop", "deadline", {"rejected": "drop"}, "deadline:rejected=drop"),
    ('deadline:rejected="best_effort"', "deadline", {"rejected": "best_effort"},
     'deadline:rejected="best_effort"'),
]  # fmt: skip


@pytest.mark.parametrize(("text", "name", "config", "canonical"), VALID)
def test_valid_specs_parse_and_build(text: str, name: str, config: dict[str, Any], canonical: str) -> None:
    spec = parse_policy_spec(text)
    assert (spec.name, spec.config, spec.text) == (name, config, canonical)
    assert make_policy_from_spec(spec).name == name
    assert parse_policy_spec(spec.text) == spec  # the canonical text parses to the same spec


def test_values_reach_the_policys_typed_config() -> None:
    pol = make_policy_from_spec("las:thresholds_gpu_hours=[2,20];preemptive=false")
    assert isinstance(pol, LasPolicy)
    assert pol.config.thresholds_gpu_hours == (2.0, 20.0) and pol.config.preemptive is False


def test_spec_keys_override_a_base_config() -> None:
    pol = make_policy_from_spec("fifo:backfill=false", {"backfill": True, "use_priority": False})
    assert isinstance(pol, FifoPolicy)
    assert pol.config.backfill is False and pol.config.use_priority is False


KNOWN = ", ".join(sorted(POLICIES))
INVALID = [
    # (spec, the exact message: one line naming the spec and the thing at fault)
    ("nosuch", f"policy spec 'nosuch': unknown policy 'nosuch'; known policies: {KNOWN}"),
    ("LAS", f"policy spec 'LAS': unknown policy 'LAS'; known policies: {KNOWN}"),
    (":backfill=true", "policy spec ':backfill=true': no policy name (expected NAME[:key=value;...])"),
    ("las:", "policy spec 'las:': nothing after ':' (expected key=value;...)"),
    ("las:preemptive", "policy spec 'las:preemptive': 'preemptive' is not key=value"),
    ("las:=true", "policy spec 'las:=true': '' is not a config key"),
    ("las:pre-emptive=true", "policy spec 'las:pre-emptive=true': 'pre-emptive' is not a config key"),
    ("las:preemptive=", "policy spec 'las:preemptive=': no value for key 'preemptive'"),
    ("las:preemptive=true;preemptive=false", "policy spec 'las:preemptive=true;preemptive=false': "
     "key 'preemptive' given twice"),
    # checked by the policy's own typed config (scheduler.policies.config.parse_config)
    ("las:nosuch=1", "policy spec 'las:nosuch=1': policy 'las': unknown config field 'nosuch'; "
     "known fields: consolidate, heterogeneity, horizon_s, preemptive, promote_knob, starvation_factor, "
     "thresholds_gpu_hours, type_order"),
    ("las:preemptive=yes", "policy spec 'las:preemptive=yes': policy 'las' config field 'preemptive': "
     "must be true or false, got 'yes'"),
    ("srsf:preempt_margin_gpu_s=lots", "policy spec 'srsf:preempt_margin_gpu_s=lots': policy 'srsf' config "
     "field 'preempt_margin_gpu_s': must be a number, got 'lots'"),
    ("srsf:lease_after_restarts=often", "policy spec 'srsf:lease_after_restarts=often': policy 'srsf' "
     "config field 'lease_after_restarts': must be an integer, got 'often'"),
    ("srsf:lease_after_restarts=0", "policy spec 'srsf:lease_after_restarts=0': policy 'srsf': config "
     "field 'lease_after_restarts': must be >= 1 (or null: no lease)"),
    ("srsf:lease_s=-1", "policy spec 'srsf:lease_s=-1': policy 'srsf': config field 'lease_s': must be "
     ">= 0 and finite"),
    ("las:thresholds_gpu_hours=1", "policy spec 'las:thresholds_gpu_hours=1': policy 'las' config field "
     "'thresholds_gpu_hours': must be a list, got 1"),
    ("las:thresholds_gpu_hours=[10,1]", "policy spec 'las:thresholds_gpu_hours=[10,1]': policy 'las': "
     "config field 'thresholds_gpu_hours': must increase"),
    ("deadline:rejected=later", "policy spec 'deadline:rejected=later': policy 'deadline' config field "
     "'rejected': must be one of 'best_effort', 'drop', got 'later'"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "message"), INVALID)
def test_invalid_specs_fail_with_one_line_naming_the_fault(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        make_policy_from_spec(text)
    assert str(err.value) == message
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("text", "items"),
    [
        ("las,fifo", ["las", "fifo"]),
        (" las , ,fifo,", ["las", "fifo"]),  # empty items are dropped
        # commas inside [...] belong to the value
        ("las:thresholds_gpu_hours=[1,10];preemptive=false,fifo",
         ["las:thresholds_gpu_hours=[1,10];preemptive=false", "fifo"]),
        ("las", ["las"]),
        ("", []),
    ],
)  # fmt: skip
def test_lists_split_at_commas_outside_brackets(text: str, items: list[str]) -> None:
    assert split_policy_specs(text) == items


def test_a_list_keeps_each_distinct_spec_once_in_order() -> None:
    specs = parse_policy_specs("las, las:preemptive=false,las ,fifo")
    assert [s.text for s in specs] == ["las", "las:preemptive=false", "fifo"]
    with pytest.raises(ConfigError, match="no policy spec given"):
        parse_policy_specs(" , ")
    # a list value without brackets is split by the list's commas: the error says how to write it
    with pytest.raises(ConfigError) as err:
        parse_policy_specs("las:thresholds_gpu_hours=1,10")
    assert str(err.value) == (
        f"policy spec '10': unknown policy '10'; known policies: {KNOWN} "
        "(a list value needs brackets: key=[a,b])"
    )


def test_the_default_spec_builds_and_every_entry_point_runs_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from typer.testing import CliRunner

    import perfsched_dev.demo.emulated as demo_runner
    from scheduler.cli import build_app
    from scheduler.settings import Settings

    assert make_policy_from_spec(DEFAULT_POLICY_SPEC).name == parse_policy_spec(DEFAULT_POLICY_SPEC).name
    # the operator (and Helm, whose default `operator.policy` is empty) read it through the settings
    assert Settings.model_fields["operator_policy"].default == DEFAULT_POLICY_SPEC
    app = build_app()
    # simulate without --policy runs it
    result = CliRunner().invoke(app, ["simulate", "--jobs", "5", "--gpus", "8", "--json", "--out", ""])
    assert result.exit_code == 0, result.output
    assert [r["policy"] for r in json.loads(result.stdout)["results"]] == [DEFAULT_POLICY_SPEC]
    # the demo without --policy hands it to the operator it starts
    seen = []

    def fake_run_demo(options: demo_runner.DemoOptions, **_: object) -> None:
        seen.append(options.policy)
        raise demo_runner.DemoError("stopped by the test")

    monkeypatch.setattr(demo_runner, "run_demo", fake_run_demo)
    result = CliRunner().invoke(app, ["demo"])
    assert result.exit_code == 1 and seen == [DEFAULT_POLICY_SPEC], result.output
