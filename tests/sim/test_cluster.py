"""Cluster specs: shipped specs, validation errors naming file and field, expansion into nodes and labels."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from scheduler.core.errors import ConfigError
from scheduler.core.types import Interconnect
from scheduler.sim.cluster import (
    homogeneous_spec,
    load_cluster_spec,
    node_labels,
    shipped_cluster_names,
    spec_to_nodes,
)


@pytest.mark.parametrize(
    ("name", "gpus", "types"),
    [
        ("homogeneous-64xV100", 64, ("V100",)),  # 8 nodes x 8
        ("gavel-heterogeneous", 108, ("K80", "P100", "V100")),  # 3 pools x 9 nodes x 4
        ("modern-mix", 80, ("A100", "H100", "T4", "V100")),  # 16 + 32 + 16 + 16
    ],
)
def test_shipped_specs(name: str, gpus: int, types: tuple[str, ...]) -> None:
    assert name in shipped_cluster_names()
    spec = load_cluster_spec(name)
    assert spec.total_gpus == gpus
    assert spec.gpu_types() == types
    nodes = spec_to_nodes(spec)
    assert sum(n.gpus for n in nodes) == gpus
    assert len({n.name for n in nodes}) == len(nodes)


def test_nodes_get_pool_names_racks_and_domains() -> None:
    nodes = {n.name: n for n in spec_to_nodes(load_cluster_spec("homogeneous-64xV100"))}
    # 8 nodes in 2 racks -> 4 per rack, in order
    assert [nodes[f"v100-{i}"].rack for i in range(8)] == ["v100-rack0"] * 4 + ["v100-rack1"] * 4
    # domain size 8 = one node per NVLink domain
    assert nodes["v100-3"].nvlink_domain == "v100-nvl3"
    assert nodes["v100-0"].interconnect is Interconnect.NVLINK
    assert nodes["v100-0"].gpu_product == "Tesla-V100-SXM2-16GB"
    gavel = {n.name: n for n in spec_to_nodes(load_cluster_spec("gavel-heterogeneous"))}
    assert gavel["k80-0"].interconnect is Interconnect.PCIE and gavel["k80-0"].nvlink_domain == ""


def test_node_labels_round_trip_the_topology() -> None:
    spec = load_cluster_spec("modern-mix")
    labels = node_labels(spec)
    h = labels["h100-1"]
    assert h["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert h["nvidia.com/gpu"] == "8"
    assert h["perfsched.dev/nvlink-domain"] == "h100-nvl1"
    assert h["topology.kubernetes.io/zone"] == "zone-b"
    assert "perfsched.dev/nvlink-domain" not in labels["t4-0"]
    assert labels["t4-0"]["perfsched.dev/interconnect"] == "pcie"


def _write(tmp_path: Path, doc: object) -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump(doc))
    return p


POOL = {
    "name": "a",
    "gpu_product": "Tesla-V100-SXM2-16GB",
    "gpus_per_node": 8,
    "nodes": 2,
    "nvlink_domain_size": 8,
}


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ({"name": "x", "pools": [POOL], "colour": "red"}, "colour: unknown field"),
        ({"name": "x", "pools": [{**POOL, "gpus_per_nod": 8}]}, "pools[0].gpus_per_nod: unknown field"),
        ({"name": "x", "pools": [{**POOL, "gpu_product": "Voodoo-5"}]}, "pools[0].gpu_product: unknown GPU"),
        ({"name": "x", "pools": [{**POOL, "nodes": 0}]}, "pools[0].nodes: must be >= 1"),
        ({"name": "x", "pools": [{**POOL, "nodes": "two"}]}, "pools[0].nodes: must be an integer"),
        ({"name": "x", "pools": [{**POOL, "nvlink_domain_size": 6}]}, "pools[0].nvlink_domain_size"),
        ({"name": "x", "pools": [{**POOL, "interconnect": "pcie"}]}, "pools[0].interconnect"),
        ({"name": "x", "pools": [{**POOL, "racks": 3}]}, "pools[0].racks: 3 racks for only 2 nodes"),
        ({"name": "x", "pools": [POOL, POOL]}, "pools[1].name: duplicate"),
        ({"name": "x", "pools": []}, "pools: must be a non-empty list"),
        ({"pools": [POOL]}, "spec.name: required"),
        (
            {"name": "x", "pools": [{k: v for k, v in POOL.items() if k != "nodes"}]},
            "pools[0].nodes: required",
        ),
    ],
)
def test_bad_spec_names_file_and_field(tmp_path: Path, doc: object, expected: str) -> None:
    path = _write(tmp_path, doc)
    with pytest.raises(ConfigError) as err:
        load_cluster_spec(str(path))
    assert str(path) in str(err.value)
    assert expected in str(err.value)


def test_multi_node_nvlink_domain_and_nodes_per_rack(tmp_path: Path) -> None:
    # 16-GPU domains over 4-GPU nodes -> 4 nodes per domain; 3 nodes per rack over 6 nodes -> 2 racks
    pool = {**POOL, "gpus_per_node": 4, "nodes": 6, "nvlink_domain_size": 16, "nodes_per_rack": 3}
    nodes = spec_to_nodes(load_cluster_spec(str(_write(tmp_path, {"name": "x", "pools": [pool]}))))
    assert [n.nvlink_domain for n in nodes] == ["a-nvl0"] * 4 + ["a-nvl1"] * 2
    assert [n.rack for n in nodes] == ["a-rack0"] * 3 + ["a-rack1"] * 3


def test_homogeneous_spec_for_gpus_option() -> None:
    spec = homogeneous_spec(64)
    assert spec.total_gpus == 64 and len(spec_to_nodes(spec)) == 8
    with pytest.raises(ConfigError, match="multiple of 8"):
        homogeneous_spec(60)


def test_missing_spec_file_lists_shipped_names() -> None:
    with pytest.raises(ConfigError, match="gavel-heterogeneous"):
        load_cluster_spec("nope.yaml")
