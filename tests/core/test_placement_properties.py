"""Placement properties on random clusters (hypothesis): all or nothing, within free GPUs, best fit."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.placement import FreeIndex, place_gang
from scheduler.core.types import Allocation, Interconnect, Node
from tests.builders import node


@st.composite
def clusters(draw: Any) -> tuple[list[Node], dict[str, int]]:
    nodes = []
    free = {}
    for i in range(draw(st.integers(1, 12))):
        b = node(f"n{i:02d}").gpus(draw(st.sampled_from([2, 4, 8])), draw(st.sampled_from(["V100", "A100"])))
        b.rack(draw(st.sampled_from(["", "r1", "r2", "r3"]))).zone(draw(st.sampled_from(["", "z1"])))
        if draw(st.booleans()):
            b.pcie()
        elif draw(st.booleans()):
            b.nvlink(draw(st.sampled_from(["d1", "d2"])))
        n = b.build()
        nodes.append(n)
        free[n.name] = draw(st.integers(0, n.gpus))
    return nodes, free


@settings(max_examples=150, deadline=None)
@given(clusters(), st.integers(1, 6), st.sampled_from([1, 2, 4]), st.sampled_from(["V100", "A100"]))
def test_gang_fits_free_gpus_all_or_nothing(
    case: tuple[list[Node], dict[str, int]], replicas: int, gpr: int, gpu_type: str
) -> None:
    nodes, free = case
    res = place_gang(nodes, free, replicas=replicas, gpus_per_replica=gpr, gpu_type=gpu_type, job="j")
    by_name = {n.name: n for n in nodes}
    slots = sum(free[n.name] // gpr for n in nodes if n.gpu_type == gpu_type)
    if isinstance(res, Allocation):
        assert res.replicas == replicas and res.gpus_per_replica == gpr
        for name, r in res.replicas_per_node:
            assert by_name[name].gpu_type == gpu_type
            assert r * gpr <= free[name]
    else:
        # it only fails when whole replicas really do not fit
        assert slots < replicas
    # whenever whole replicas fit somewhere, it finds a placement
    assert isinstance(res, Allocation) == (slots >= replicas)
    # a single NVLink node that holds the whole gang is always used, and the tightest such node
    need = replicas * gpr
    singles = sorted(
        (free[n.name], n.name)
        for n in nodes
        if n.gpu_type == gpu_type and n.interconnect is Interconnect.NVLINK and free[n.name] >= need
    )
    if singles:
        assert isinstance(res, Allocation) and res.nodes == (singles[0][1],)


@settings(max_examples=60, deadline=None)
@given(clusters(), st.lists(st.tuples(st.integers(1, 3), st.sampled_from([1, 2, 4])), max_size=8))
def test_index_bookkeeping_matches_a_recount(
    case: tuple[list[Node], dict[str, int]], gangs: list[tuple[int, int]]
) -> None:
    nodes, free = case
    index = FreeIndex(nodes, free)
    placed = []
    for i, (r, g) in enumerate(gangs):
        res = index.place(replicas=r, gpus_per_replica=g, gpu_type="V100", job=f"j{i}")
        if isinstance(res, Allocation):
            index.commit(res)
            placed.append(res)
    for a in placed[::2]:
        index.release(a)
    for t in ("V100", "A100"):
        assert index.type_free(t) == sum(index.free_of(n.name) for n in nodes if n.gpu_type == t)
    for n in nodes:
        assert 0 <= index.free_of(n.name) <= n.capacity_for_jobs


@settings(max_examples=150, deadline=None)
@given(
    clusters(),
    st.lists(st.integers(1, 6), min_size=1, max_size=3),
    st.sampled_from([1, 2, 4, 16]),
    st.lists(st.sampled_from(["V100", "A100", "K80"]), min_size=1, max_size=3, unique=True),
)
def test_short_of_gpus_agrees_with_place(
    case: tuple[list[Node], dict[str, int]], replicas: list[int], gpr: int, types: list[str]
) -> None:
    """``short_of_gpus`` is True exactly when ``place`` answers every option "waiting for N GPUs"."""
    nodes, free = case
    index = FreeIndex(nodes, free)
    answers = [
        index.place(replicas=r, gpus_per_replica=gpr, gpu_type=t, job="j") for r in replicas for t in types
    ]
    by_count = [
        not isinstance(a, Allocation)
        and a.resolvable
        and a.reason.startswith("waiting for ")
        and "free but" not in a.reason
        for a in answers
    ]
    assert index.short_of_gpus(replicas, gpr, types) == all(by_count)
