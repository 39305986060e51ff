"""Gang placement: NVLink domain > node > rack > zone > cluster, fewest nodes, then best fit."""

from __future__ import annotations

import pytest

from scheduler.core.decisions import Unschedulable
from scheduler.core.placement import FreeIndex, LocalityLevel, locality_level, place_gang, spread_of
from scheduler.core.types import Allocation, Interconnect
from tests.builders import alloc, node


def placed(result: Allocation | Unschedulable) -> dict[str, int]:
    assert isinstance(result, Allocation), result
    return dict(result.replicas_per_node)


# Each row: nodes, free GPUs, replicas x GPUs per replica -> expected replicas per node.
PREFERENCE_TABLE = [
    pytest.param(
        # one NVLink node with 8 free beats a PCIe node with exactly 4 (NVLink > node, even over best fit)
        [node("a").gpus(8).nvlink().build(), node("b").gpus(4).pcie().build()],
        {"a": 8, "b": 4},
        (2, 2),
        {"a": 2},
        id="nvlink-node-over-pcie-node",
    ),
    pytest.param(
        # a 2-node NVLink domain (4+4) beats a single PCIe node with 8 free: one domain > one node
        [
            node("d1").gpus(4).nvlink("nvl72").build(),
            node("d2").gpus(4).nvlink("nvl72").build(),
            node("p").gpus(8).pcie().build(),
        ],
        {"d1": 4, "d2": 4, "p": 8},
        (4, 2),
        {"d1": 2, "d2": 2},
        id="nvlink-domain-over-single-pcie-node",
    ),
    pytest.param(
        # best fit: need 4; free 8, 4, 6 -> the node left with 0 (b)
        [node("a").gpus(8).build(), node("b").gpus(8).build(), node("c").gpus(8).build()],
        {"a": 8, "b": 4, "c": 6},
        (2, 2),
        {"b": 2},
        id="best-fit-single-node",
    ),
    pytest.param(
        # no node holds 8: rack r2 (4+4 free) beats spreading over racks; leftover 0 in r2
        [
            node("a").gpus(8).rack("r1").build(),
            node("b").gpus(8).rack("r2").build(),
            node("c").gpus(8).rack("r2").build(),
        ],
        {"a": 6, "b": 4, "c": 4},
        (8, 1),
        {"b": 4, "c": 4},
        id="one-rack-over-cluster",
    ),
    pytest.param(
        # rack r1: 6+6 free (leftover 12-10=2); rack r2: 8+2 (leftover 0, fewest... both need 2 nodes)
        # -> same level, same node count, r2 has less leftover
        [
            node("a").gpus(8).rack("r1").build(),
            node("b").gpus(8).rack("r1").build(),
            node("c").gpus(8).rack("r2").build(),
            node("d").gpus(8).rack("r2").build(),
        ],
        {"a": 6, "b": 6, "c": 8, "d": 2},
        (10, 1),
        {"c": 8, "d": 2},
        id="rack-best-fit",
    ),
    pytest.param(
        # spans racks but one zone: zone z1 (4+4) over the cluster-wide 6+2 in different zones
        [
            node("a").gpus(8).rack("r1").zone("z1").build(),
            node("b").gpus(8).rack("r2").zone("z1").build(),
            node("c").gpus(8).rack("r3").zone("z2").build(),
            node("d").gpus(8).rack("r4").zone("z3").build(),
        ],
        {"a": 4, "b": 4, "c": 6, "d": 2},
        (8, 1),
        {"a": 4, "b": 4},
        id="one-zone-over-cluster",
    ),
    pytest.param(
        # cluster-wide: fewest nodes (largest holes first: 6 then 2 of the remaining best fit)
        [node(n).gpus(8).build() for n in "abcd"],
        {"a": 6, "b": 3, "c": 2, "d": 5},
        (8, 1),
        {"a": 6, "c": 2},
        id="cluster-fewest-nodes-then-best-fit",
    ),
    pytest.param(
        # whole replicas only: 2 GPUs per replica, free 3+3+2 holds 1+1+1 = 3 replicas
        [node(n).gpus(8).build() for n in "abc"],
        {"a": 3, "b": 3, "c": 2},
        (3, 2),
        {"a": 1, "b": 1, "c": 1},
        id="whole-replicas",
    ),
]


@pytest.mark.parametrize(("nodes", "free", "shape", "expected"), PREFERENCE_TABLE)
def test_preference_table(nodes, free, shape, expected) -> None:  # type: ignore[no-untyped-def]
    replicas, gpr = shape
    res = place_gang(nodes, free, replicas=replicas, gpus_per_replica=gpr, gpu_type="V100", job="j")
    assert placed(res) == expected


def test_wrong_type_and_too_big_are_unresolvable_and_short_is_resolvable() -> None:
    nodes = [node("a").gpus(8, "V100").build(), node("b").gpus(8, "V100").build()]
    wrong = place_gang(nodes, {}, replicas=1, gpus_per_replica=1, gpu_type="A100", job="j")
    assert isinstance(wrong, Unschedulable) and not wrong.resolvable and "A100" in wrong.reason
    big = place_gang(nodes, {}, replicas=1, gpus_per_replica=16, gpu_type="V100", job="j")
    assert isinstance(big, Unschedulable) and not big.resolvable
    huge = place_gang(nodes, {}, replicas=3, gpus_per_replica=8, gpu_type="V100", job="j")
    assert isinstance(huge, Unschedulable) and not huge.resolvable and "cluster has 16" in huge.reason
    busy = place_gang(nodes, {"a": 2, "b": 1}, replicas=4, gpus_per_replica=1, gpu_type="V100", job="j")
    assert isinstance(busy, Unschedulable) and busy.resolvable and "3 free" in busy.reason


def test_fragmented_free_gpus_do_not_make_a_replica() -> None:
    nodes = [node(n).gpus(8).build() for n in "ab"]
    # 3 + 3 free GPUs = 6, but a replica needs 4 on one node
    res = place_gang(nodes, {"a": 3, "b": 3}, replicas=1, gpus_per_replica=4, gpu_type="V100", job="j")
    assert isinstance(res, Unschedulable) and res.resolvable and "no set of nodes" in res.reason


def test_prefer_keeps_the_gang_together() -> None:
    # the gang already has 2 replicas on b (rack r2); a has the better single-node fit elsewhere
    nodes = [
        node("a").gpus(8).rack("r1").build(),
        node("b").gpus(8).rack("r2").build(),
        node("c").gpus(8).rack("r2").build(),
    ]
    res = place_gang(
        nodes,
        {"a": 2, "b": 4, "c": 8},
        replicas=2,
        gpus_per_replica=1,
        gpu_type="V100",
        job="j",
        prefer={"b": 2},
    )
    assert placed(res) == {"b": 2}
    # b is full: the new replicas go to c (same rack as b), not a (best fit but other rack)
    res = place_gang(
        nodes,
        {"a": 2, "b": 0, "c": 8},
        replicas=2,
        gpus_per_replica=1,
        gpu_type="V100",
        job="j",
        prefer={"b": 2},
    )
    assert placed(res) == {"c": 2}


def test_cordoned_and_external_gpus_are_not_used() -> None:
    nodes = [node("a").gpus(8).cordoned().build(), node("b").gpus(8).external(6).build()]
    res = place_gang(nodes, {}, replicas=1, gpus_per_replica=2, gpu_type="V100", job="j")
    assert placed(res) == {"b": 1}
    res = place_gang(nodes, {}, replicas=2, gpus_per_replica=2, gpu_type="V100", job="j")
    assert isinstance(res, Unschedulable) and not res.resolvable


def test_ties_broken_by_node_name() -> None:
    nodes = [node(n).gpus(8).build() for n in ("z", "m", "b")]
    res = place_gang(nodes, {}, replicas=1, gpus_per_replica=8, gpu_type="V100", job="j")
    assert placed(res) == {"b": 1}


def test_index_commit_release_roundtrip() -> None:
    nodes = [node("a").gpus(8).build(), node("b").gpus(4).build()]
    index = FreeIndex(nodes)
    first = index.place(replicas=1, gpus_per_replica=4, gpu_type="V100", job="x")
    assert isinstance(first, Allocation) and first.nodes == ("b",)  # best fit
    index.commit(first)
    assert index.type_free("V100") == 8
    second = index.place(replicas=1, gpus_per_replica=4, gpu_type="V100", job="y")
    assert isinstance(second, Allocation) and second.nodes == ("a",)
    index.release(first)
    assert index.free_of("b") == 4 and index.type_free("V100") == 12
    with pytest.raises(ValueError, match="does not fit"):
        index.commit(alloc("z", "V100", 8, {"b": 1}))


def test_locality_and_spread() -> None:
    nodes = {
        "a": node("a").gpus(8).rack("r1").zone("z").network(100).build(),
        "b": node("b").gpus(8).rack("r1").zone("z").network(25).build(),
        "c": node("c").gpus(8).pcie().rack("r2").zone("z").build(),
    }
    assert locality_level(["a"], nodes) is LocalityLevel.NVLINK_DOMAIN
    assert locality_level(["c"], nodes) is LocalityLevel.NODE
    assert locality_level(["a", "b"], nodes) is LocalityLevel.RACK
    assert locality_level(["a", "c"], nodes) is LocalityLevel.ZONE
    shape = spread_of(alloc("j", "V100", 2, {"a": 3, "b": 1}), nodes)
    # 4 replicas x 2 GPUs = 8 GPUs, on 2 nodes, at most 3 x 2 = 6 on one node, slowest NIC 25 Gb/s
    assert (shape.num_gpus, shape.num_nodes, shape.gpus_per_node, shape.network_gbps) == (8, 2, 6, 25)
    assert shape.interconnect is Interconnect.PCIE
    assert spread_of(alloc("j", "V100", 2, {"a": 2}), nodes).interconnect is Interconnect.NVLINK
