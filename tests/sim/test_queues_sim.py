"""Queues in the simulator: the cluster spec's `queues` (validated naming the field), trace tenants
mapped to queues, quotas holding through a whole run, and per-queue figures in the report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.core.errors import ConfigError
from scheduler.core.queues import FairShare
from scheduler.sim.cluster import load_cluster_spec, parse_cluster_spec
from scheduler.sim.simulations import SimulationRequest, run_simulations

POOLS = [{"name": "v100", "gpu_product": "Tesla-V100-SXM2-32GB", "gpus_per_node": 8, "nodes": 4}]


def spec(queues: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": "q", "pools": POOLS, "queues": queues}


def test_queues_parse_and_tenants_map_to_them() -> None:
    quota_a = {"gpu_type": "V100", "nominal": 8, "borrowing_limit": 4}
    a_spec = {"name": "a", "cohort": "c", "quotas": [quota_a], "tenants": ["vc1", "alice"]}
    b_spec = {"name": "b", "cohort": "c", "weight": 2, "fair_share": "gpus", "quotas": [{"gpu_type": "*"}]}
    s = parse_cluster_spec(spec([a_spec, b_spec]))
    a, b = s.queues
    assert (a.nominal("V100"), a.borrowing_limit("V100"), b.weight, b.fair_share) == (
        8,
        4,
        2.0,
        FairShare.GPUS,
    )
    # group first, then user, then a queue named like the group, else default
    assert s.queue_for("vc1", "bob") == "a" and s.queue_for("vc9", "alice") == "a"
    assert s.queue_for("b", "x") == "b" and s.queue_for("vc9", "bob") == "default"


@pytest.mark.parametrize(
    ("queues", "message"),
    [
        (
            [{"name": "a", "quotas": [{"gpu_type": "H100", "nominal": 1}]}],
            "queues[0].quotas[0].gpu_type: no pool",
        ),
        ([{"name": "a", "colour": "red"}], "queues[0].colour: unknown field"),
        (
            [{"name": "a", "quotas": [{"gpu_type": "V100", "nominal": -1}]}],
            "queues[0].quotas[0].nominal: must be >= 0",
        ),
        (
            [{"name": "a", "quotas": [{"gpu_type": "V100", "borrowing_limit": 2}]}],
            "queues[0]: queue a: quota",
        ),
        ([{"name": "a", "weight": 0}], "queues[0].weight"),
        (
            [{"name": "a", "tenants": ["t"]}, {"name": "b", "tenants": ["t"]}],
            "queues[1].tenants: 't' is already",
        ),
        ([{"name": "a"}, {"name": "a"}], "queues[1].name: duplicate"),
    ],
)
def test_bad_queues_are_rejected_naming_the_field(queues: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_cluster_spec(spec(queues), "spec.yaml")


def test_a_queue_never_exceeds_its_quota_through_a_run(tmp_path: Path) -> None:
    # every Philly job goes to the default queue, which owns 8 of the 32 V100 and has no cohort: the
    # cluster never runs more than 8 GPUs of work at once, and the report says so per queue
    path = tmp_path / "q.yaml"
    path.write_text(yaml.safe_dump(spec([{"name": "default", "quotas": [{"gpu_type": "*", "nominal": 8}]}])))
    assert load_cluster_spec(path).queues
    req = SimulationRequest(policies=("las",), cluster=str(path), max_jobs=60, load=1.0)
    outcome = run_simulations(req)
    (_, result), row = outcome.runs[0], outcome.report["results"][0]
    assert max(result.series_used) == 8
    q = row["queues"]["default"]
    assert q["jobs"] == 60 and q["finished"] == 60 and q["gpu_share"] == pytest.approx(1.0)
    free = run_simulations(SimulationRequest(policies=("las",), gpus=32, max_jobs=60, load=1.0))
    assert max(free.runs[0][1].series_used) > 8 and "queues" not in free.report["results"][0]
