"""Benchmark: ``FreeIndex.place`` for a gang with replicas already placed (``prefer``) against the same
gang placed from scratch (no ``prefer``), same index, same run, at 500 and 5,000 nodes.

The extender re-plans a gang whose first replicas are bound with ``prefer``; this prints the time of one
such call, the time of one call without ``prefer`` (the baseline), and their ratio, on two layouts:
``extender`` (8-GPU NVLink nodes, one domain each, 20 to a rack, as ``bench/extender_e2e.py`` builds) and
``zones`` (8-GPU PCIe nodes, 16 to a rack, 128 to a zone). About 60% of the GPUs are taken at random.
Run: ``python bench/placement_prefer.py [--nodes 500,5000] [--gangs 200]``.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from functools import partial

from scheduler.core.placement import FreeIndex
from scheduler.core.types import Allocation, Interconnect, Node

#: (replicas, GPUs per replica) of the gangs re-planned: the extender's 8 x 1 and a 4 x 2
SHAPES = ((8, 1), (4, 2))


def cluster(layout: str, n: int) -> list[Node]:
    if layout == "extender":
        return [
            Node(
                name=f"bench-{i}",
                gpu_type="V100",
                gpus=8,
                rack=f"rack-{i // 20}",
                nvlink_domain=f"nvl-{i}",
                interconnect=Interconnect.NVLINK,
            )
            for i in range(n)
        ]
    return [
        Node(name=f"n{i:05d}", gpu_type="V100", gpus=8, rack=f"r{i // 16}", zone=f"z{i // 128}")
        for i in range(n)
    ]


def per_call(fn: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="500,5000", help="comma-separated node counts")
    ap.add_argument("--gangs", type=int, default=200, help="gangs re-planned per layout and size")
    args = ap.parse_args()
    print(f"{'layout':9} {'nodes':>6} {'gang':>5}  {'no prefer ms':>12} {'prefer ms':>10} {'ratio':>6}")
    for layout in ("extender", "zones"):
        for n in (int(x) for x in args.nodes.split(",")):
            nodes = cluster(layout, n)
            rng = random.Random(n)
            free = {node.name: rng.choice([0, 0, 0, 1, 2, 3, 4, 8]) for node in nodes}
            index = FreeIndex(nodes, free)
            for replicas, gpr in SHAPES:
                plain = prefer = 0.0
                for g in range(args.gangs):
                    # the gang's first replicas, placed at random where they fit, then the rest re-planned
                    first = rng.randrange(1, replicas)
                    used = [m.name for m in nodes if index.free_of(m.name) >= gpr]
                    placed: dict[str, int] = {}
                    for _ in range(first):
                        name = rng.choice(used)
                        if index.free_of(name) >= (placed.get(name, 0) + 1) * gpr:
                            placed[name] = placed.get(name, 0) + 1
                    if not placed:
                        continue
                    gang = Allocation.of(f"g{g}", "V100", gpr, placed)
                    index.commit(gang)
                    rest = replicas - gang.replicas
                    call = partial(index.place, replicas=rest, gpus_per_replica=gpr, gpu_type="V100", job="j")
                    plain += per_call(call, 5)
                    prefer += per_call(partial(call, prefer=placed), 5)
                    index.release(gang)
                plain_ms, prefer_ms = plain / args.gangs * 1e3, prefer / args.gangs * 1e3
                print(
                    f"{layout:9} {n:>6} {replicas}x{gpr:<3}  {plain_ms:>12.3f} {prefer_ms:>10.3f}"
                    f" {prefer_ms / plain_ms:>6.1f}"
                )


if __name__ == "__main__":
    main()
