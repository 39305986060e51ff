"""``FreeIndex.place`` with ``prefer`` (a gang's replicas already placed) against a plain reference.

The reference below scores every candidate the module docstring names — each single node, each NVLink
domain, rack and zone packed largest holes first (the gang's nodes first), the whole type packed the
same way — and keeps the least by (level, -nodes of the gang reused, nodes, leftover, group free, group,
names). The index prunes and walks buckets; it must pick exactly the same allocation.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.decisions import Unschedulable
from scheduler.core.placement import FreeIndex, locality_level
from scheduler.core.types import Allocation, Interconnect, Node
from tests.builders import node

Key = tuple[int, int, int, int, int, str, tuple[str, ...]]


def _pack(
    names: Sequence[str], free: Mapping[str, int], replicas: int, gpr: int, prefer: Mapping[str, int]
) -> dict[str, int] | None:
    """Gang's nodes first, then largest holes, names on ties; best fit for the last piece."""
    order = sorted(
        ((n, free[n] // gpr) for n in names if free[n] // gpr > 0),
        key=lambda x: (x[0] not in prefer, -x[1], x[0]),
    )
    if sum(s for _, s in order) < replicas:
        return None
    chosen: dict[str, int] = {}
    remaining = replicas
    for i, (name, s) in enumerate(order):
        if s >= remaining:
            same = [
                (s2, n2) for n2, s2 in order[i:] if s2 >= remaining and (n2 in prefer) == (name in prefer)
            ]
            chosen[min(same)[1]] = remaining
            return chosen
        chosen[name] = s
        remaining -= s
    raise AssertionError("slots were counted")


def reference(
    nodes: Sequence[Node],
    free: Mapping[str, int],
    replicas: int,
    gpr: int,
    gpu_type: str,
    prefer: Mapping[str, int],
) -> dict[str, int] | None:
    usable = sorted((n for n in nodes if n.capacity_for_jobs > 0), key=lambda n: n.name)
    by_name = {n.name: n for n in usable}
    of_type = [n.name for n in usable if n.gpu_type == gpu_type]
    prefer = {n: r for n, r in prefer.items() if r > 0}
    need = replicas * gpr
    best: tuple[Key, dict[str, int]] | None = None

    def consider(chosen: dict[str, int], group_free: int, group: str) -> None:
        nonlocal best
        level = locality_level([*chosen, *prefer], by_name)
        leftover = sum(free[n] for n in chosen) - need
        key: Key = (
            int(level),
            -sum(1 for n in chosen if n in prefer),
            len(chosen),
            leftover,
            group_free,
            group,
            tuple(sorted(chosen)),
        )
        if best is None or key < best[0]:
            best = (key, chosen)

    # single nodes: the gang's own, and the best fit among NVLink and among PCIe nodes
    singles = [n for n in prefer if n in of_type]
    for nvlink in (True, False):
        fits = [(free[n], n) for n in of_type if (by_name[n].interconnect is Interconnect.NVLINK) == nvlink]
        singles += [min(f for f in fits if f[0] >= need)[1]] if any(f >= need for f, _ in fits) else []
    for name in singles:
        if free[name] >= need:
            consider({name: replicas}, free[name], name)
    for kind in ("domain", "rack", "zone"):
        labels: dict[str, list[str]] = {}
        for name in of_type:
            n = by_name[name]
            label = {"domain": n.nvlink_domain, "rack": n.rack, "zone": n.zone}[kind]
            if label:
                labels.setdefault(label, []).append(name)
        for label, names in labels.items():
            if len(names) < 2:
                continue
            packed = _pack(names, free, replicas, gpr, prefer)
            if packed is not None:
                consider(packed, sum(free[n] for n in names), label)
    packed = _pack(of_type, free, replicas, gpr, prefer)
    if packed is not None:
        consider(packed, sum(free[n] for n in of_type), "")
    return None if best is None else best[1]


@st.composite
def clusters(draw: Any) -> tuple[list[Node], dict[str, int]]:
    """Up to 16 nodes of two types in shared NVLink domains, racks and zones, some partly used."""
    nodes = []
    free = {}
    for i in range(draw(st.integers(1, 16))):
        b = node(f"n{i:02d}").gpus(
            draw(st.sampled_from([2, 4, 8])), draw(st.sampled_from(["V100", "V100", "A100"]))
        )
        b.rack(draw(st.sampled_from(["", "r1", "r2", "r3"]))).zone(draw(st.sampled_from(["", "z1", "z2"])))
        if draw(st.booleans()):
            b.pcie()
        else:
            b.nvlink(draw(st.sampled_from(["", "d1", "d2", "d3"])))
        if draw(st.integers(0, 9)) == 0:
            b.cordoned()
        n = b.build()
        nodes.append(n)
        free[n.name] = draw(st.integers(0, n.gpus))
    return nodes, free


@settings(max_examples=400, deadline=None)
@given(
    clusters(),
    st.integers(1, 8),
    st.sampled_from([1, 1, 2, 4]),
    st.sampled_from(["V100", "A100"]),
    st.dictionaries(st.sampled_from([f"n{i:02d}" for i in range(18)]), st.integers(0, 3), max_size=4),
)
def test_prefer_matches_the_reference(
    case: tuple[list[Node], dict[str, int]], replicas: int, gpr: int, gpu_type: str, prefer: dict[str, int]
) -> None:
    nodes, free = case
    index = FreeIndex(nodes, free)
    got = index.place(replicas=replicas, gpus_per_replica=gpr, gpu_type=gpu_type, job="j", prefer=prefer)
    if not any(prefer.values()):
        return  # the plain path (tested elsewhere)
    want = reference(nodes, free, replicas, gpr, gpu_type, prefer)
    if want is None:
        assert isinstance(got, Unschedulable)
    else:
        assert isinstance(got, Allocation), got
        assert dict(got.replicas_per_node) == want


def committed_index(
    nodes: list[Node], free: dict[str, int], gangs: Sequence[tuple[int, int]]
) -> tuple[FreeIndex, list[Allocation]]:
    """An index after a history: each gang (replicas, GPUs per replica) placed on V100s and committed where
    it fits, then every second committed gang released; the index and the gangs committed."""
    index = FreeIndex(nodes, free)
    placed: list[Allocation] = []
    for i, (r, g) in enumerate(gangs):
        res = index.place(replicas=r, gpus_per_replica=g, gpu_type="V100", job=f"j{i}")
        if isinstance(res, Allocation):
            index.commit(res)
            placed.append(res)
    for a in placed[1::2]:
        index.release(a)
    return index, placed


@settings(max_examples=100, deadline=None)
@given(
    clusters(),
    st.lists(st.tuples(st.integers(1, 4), st.sampled_from([1, 2])), min_size=1, max_size=6),
    st.integers(1, 8),
)
def test_prefer_after_commits_and_releases(
    case: tuple[list[Node], dict[str, int]], gangs: list[tuple[int, int]], replicas: int
) -> None:
    """The index's running totals (per type and per group) stay right through commits and releases."""
    nodes, free = case
    index, placed = committed_index(nodes, free, gangs)
    if not placed:
        return
    prefer = dict(placed[0].replicas_per_node)
    got = index.place(replicas=replicas, gpus_per_replica=1, gpu_type="V100", job="j", prefer=prefer)
    want = reference(nodes, index.free_map(), replicas, 1, "V100", prefer)
    if want is None:
        assert isinstance(got, Unschedulable)
    else:
        assert isinstance(got, Allocation) and dict(got.replicas_per_node) == want


def _seeded_cluster(rng: random.Random) -> list[Node]:
    """Up to 120 nodes: racks of 1 to 20, zones or none, NVLink domains of 1 to 4 nodes, two types."""
    n = rng.randint(1, 120)
    per_rack, per_zone, per_domain = (
        rng.choice([1, 2, 4, 20]),
        rng.choice([0, 8, 40]),
        rng.choice([0, 1, 2, 4]),
    )
    nodes = []
    for i in range(n):
        nvlink = rng.random() < 0.6
        nodes.append(
            Node(
                name=f"n{i:03d}",
                gpu_type=rng.choice(["V100", "V100", "A100"]),
                gpus=rng.choice([2, 4, 8, 8]),
                rack=f"r{i // per_rack}" if rng.random() < 0.9 else "",
                zone=f"z{i // per_zone}" if per_zone else "",
                nvlink_domain=f"d{i // per_domain}" if per_domain and nvlink else "",
                interconnect=Interconnect.NVLINK if nvlink else Interconnect.PCIE,
            )
        )
    return nodes


def test_prefer_matches_the_reference_on_seeded_clusters() -> None:
    """Larger clusters than the hypothesis cases, many equal nodes: ties and pruning bounds get tested."""
    rng = random.Random(13)
    for _ in range(500):
        nodes = _seeded_cluster(rng)
        free = {m.name: rng.randint(0, m.gpus) if rng.random() < 0.6 else 0 for m in nodes}
        index = FreeIndex(nodes, free)
        for _ in range(4):
            replicas, gpr, gpu_type = (
                rng.randint(1, 10),
                rng.choice([1, 1, 2, 4]),
                rng.choice(["V100", "A100"]),
            )
            prefer = {rng.choice(nodes).name: rng.randint(1, 3) for _ in range(rng.randint(1, 4))}
            if rng.random() < 0.2:
                prefer["not-a-node"] = 1  # e.g. a node kube-scheduler did not offer
            got = index.place(
                replicas=replicas, gpus_per_replica=gpr, gpu_type=gpu_type, job="j", prefer=prefer
            )
            want = reference(nodes, free, replicas, gpr, gpu_type, prefer)
            assert (dict(got.replicas_per_node) if isinstance(got, Allocation) else None) == want, (
                nodes,
                free,
                replicas,
                gpr,
                gpu_type,
                prefer,
            )
