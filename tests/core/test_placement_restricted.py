"""``FreeIndex.restricted``: an index cut down to some nodes answers exactly what a fresh index over those
nodes answers (same placement, same reason), with or without ``prefer``, after commits and releases."""

from __future__ import annotations

import random
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.decisions import Unschedulable
from scheduler.core.placement import FreeIndex
from scheduler.core.types import Allocation, Node
from tests.core.test_placement_prefer import _seeded_cluster, clusters, committed_index

Answer = Allocation | Unschedulable


def _both(index: FreeIndex, nodes: Sequence[Node], names: set[str], **ask: object) -> tuple[Answer, Answer]:
    """(the restricted index's answer, a fresh index's answer over the same nodes and free GPUs)."""
    fresh = FreeIndex([n for n in nodes if n.name in names], index.free_map())
    return index.restricted(names).place(**ask), fresh.place(**ask)  # type: ignore[arg-type]


@settings(max_examples=400, deadline=None)
@given(
    clusters(),
    st.sets(st.sampled_from([f"n{i:02d}" for i in range(18)] + ["not-a-node"])),
    st.integers(1, 8),
    st.sampled_from([1, 1, 2, 4]),
    st.sampled_from(["V100", "A100"]),
    st.dictionaries(st.sampled_from([f"n{i:02d}" for i in range(18)]), st.integers(0, 3), max_size=4),
)
def test_restricted_answers_as_a_fresh_index(
    case: tuple[list[Node], dict[str, int]],
    names: set[str],
    replicas: int,
    gpr: int,
    gpu_type: str,
    prefer: dict[str, int],
) -> None:
    nodes, free = case
    index = FreeIndex(nodes, free)
    got, want = _both(
        index,
        nodes,
        names,
        replicas=replicas,
        gpus_per_replica=gpr,
        gpu_type=gpu_type,
        job="j",
        prefer=prefer,
    )
    assert got == want


@settings(max_examples=100, deadline=None)
@given(
    clusters(),
    st.lists(st.tuples(st.integers(1, 4), st.sampled_from([1, 2])), min_size=1, max_size=6),
    st.integers(1, 8),
    st.randoms(use_true_random=False),
)
def test_restricted_follows_the_parent_and_leaves_it_alone(
    case: tuple[list[Node], dict[str, int]], gangs: list[tuple[int, int]], replicas: int, rng: random.Random
) -> None:
    """Cut after the parent's commits and releases: the free GPUs now; its own commits stay its own."""
    nodes, free = case
    index, placed = committed_index(nodes, free, gangs)
    names = {n.name for n in nodes if rng.random() < 0.6}
    prefer = dict(placed[0].replicas_per_node) if placed else None
    ask = {"replicas": replicas, "gpus_per_replica": 1, "gpu_type": "V100", "job": "j", "prefer": prefer}
    got, want = _both(index, nodes, names, **ask)
    assert got == want
    before = index.free_map()
    cut = index.restricted(names)
    if isinstance(got, Allocation):
        cut.commit(got)
        assert cut.free_of(got.nodes[0]) < before[got.nodes[0]]
    assert index.free_map() == before


def test_restricted_matches_on_seeded_clusters() -> None:
    """Larger clusters (racks of up to 20, zones, NVLink domains), samples of 10% to all of the nodes."""
    rng = random.Random(7)
    for _ in range(300):
        nodes = _seeded_cluster(rng)
        free = {m.name: rng.randint(0, m.gpus) if rng.random() < 0.6 else 0 for m in nodes}
        index = FreeIndex(nodes, free)
        for share in (0.1, 0.5, 1.0):
            names = {m.name for m in nodes if rng.random() < share}
            prefer = {rng.choice(nodes).name: rng.randint(1, 3) for _ in range(rng.randint(0, 3))}
            ask = {
                "replicas": rng.randint(1, 10),
                "gpus_per_replica": rng.choice([1, 1, 2, 4]),
                "gpu_type": rng.choice(["V100", "A100"]),
                "job": "j",
                "prefer": prefer,
            }
            got, want = _both(index, nodes, names, **ask)
            assert got == want, (nodes, free, names, ask)
