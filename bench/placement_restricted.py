"""Benchmark: the extender's candidates-only gang plan, a fresh ``FreeIndex`` over kube-scheduler's
candidates (the baseline, what ``place_gang`` does) against the whole-cluster index cut down to them
(``FreeIndex.restricted``), same candidates, same run, on a 5,000-node cluster.

kube-scheduler offers a different sample of nodes on every call (``percentageOfNodesToScore``), so each
call here draws a new random sample of 500 or 5,000 candidates and plans an 8 x 1-GPU and a 4 x 2-GPU
gang on it, with no replica placed yet and with one placed (``prefer``, which searches the racks and
zones). Layouts as in ``bench/placement_prefer.py``; about 60% of the GPUs are taken at random. Both
answers are checked equal. Run: ``python bench/placement_restricted.py [--nodes 5000] [--calls 100]``.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: this file's sibling bench

from bench.placement_prefer import SHAPES, cluster
from scheduler.core.placement import FreeIndex, place_gang


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5000, help="nodes in the cluster")
    ap.add_argument("--candidates", default="500,5000", help="comma-separated candidate counts")
    ap.add_argument("--calls", type=int, default=100, help="calls per row")
    args = ap.parse_args()
    print(
        f"{'layout':9} {'cands':>6} {'gang':>5} {'prefer':>6}  {'fresh ms':>9} {'cut ms':>7} {'speedup':>7}"
    )
    for layout in ("extender", "zones"):
        nodes = cluster(layout, args.nodes)
        by_name = {n.name: n for n in nodes}
        rng = random.Random(args.nodes)
        free = {node.name: rng.choice([0, 0, 0, 1, 2, 3, 4, 8]) for node in nodes}
        index = FreeIndex(nodes, free)
        for k in (int(x) for x in args.candidates.split(",")):
            for replicas, gpr in SHAPES:
                for with_prefer in (False, True):
                    fresh = cut = 0.0
                    for _ in range(args.calls):
                        names = rng.sample(list(by_name), min(k, len(nodes)))
                        holds = [n for n in names if free[n] >= gpr]
                        prefer = {rng.choice(holds): 1} if with_prefer and holds else None
                        shape = {"replicas": replicas - 1, "gpus_per_replica": gpr}
                        start = time.perf_counter()
                        want = place_gang(
                            [by_name[n] for n in names],
                            free,
                            **shape,
                            gpu_type="V100",
                            job="j",
                            prefer=prefer,
                        )
                        mid = time.perf_counter()
                        got = index.restricted(names).place(**shape, gpu_type="V100", job="j", prefer=prefer)
                        end = time.perf_counter()
                        assert got == want, (got, want)
                        fresh += mid - start
                        cut += end - mid
                    f_ms, c_ms = fresh / args.calls * 1e3, cut / args.calls * 1e3
                    print(
                        f"{layout:9} {k:>6} {replicas}x{gpr:<3} {'yes' if with_prefer else 'no':>6}"
                        f"  {f_ms:>9.3f} {c_ms:>7.3f} {f_ms / c_ms:>6.1f}x"
                    )


if __name__ == "__main__":
    main()
