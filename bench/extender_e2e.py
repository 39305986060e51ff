"""End-to-end scheduling throughput with the perfsched extender vs the same kube-scheduler without it.

Same run, same machine: the harness's ``run_scheduling_bench`` (``bench/kube_scheduler_baseline.py``) brings
up a dev cluster with N KWOK nodes (8 GPUs each) and M one-GPU pods created before the scheduler starts,
then times the real kube-scheduler until every pod is bound: once with the ``default-scheduler`` profile
(no extender), once with the ``perfsched`` profile calling ``perfsched extender`` for filter, prioritize
and bind. Target: with the extender >= 70% of the baseline's pods/s.

Run: ``python bench/extender_e2e.py [--nodes 500] [--pods 2000] [--json]``; writes
``bench/results/extender_e2e.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from kube_scheduler_baseline import perfsched_extender_argv, run_scheduling_bench  # noqa: E402

from scheduler.devcluster.configs import SchedulerTuning  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--pods", type=int, default=2000)
    ap.add_argument("--qps", type=float, default=50.0, help="kube-scheduler client QPS (upstream default 50)")
    ap.add_argument(
        "--burst", type=int, default=100, help="kube-scheduler client burst (upstream default 100)"
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    tuning = SchedulerTuning(qps=args.qps, burst=args.burst)
    t0 = time.monotonic()
    load_before = os.getloadavg()[0]
    base = run_scheduling_bench(args.nodes, args.pods, None, tuning)
    ext = run_scheduling_bench(args.nodes, args.pods, perfsched_extender_argv, tuning)
    ratio = ext.pods_per_s / base.pods_per_s if base.pods_per_s else 0.0
    record = {
        "baseline": asdict(base),
        "extender": asdict(ext),
        "ratio": round(ratio, 3),
        "target_ratio": 0.7,
        "bench_seconds": round(time.monotonic() - t0, 1),
        "load_avg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "extender_e2e.json").write_text(json.dumps(record, indent=2))
    if args.json:
        print(json.dumps(record, indent=2))
        return
    print(
        f"{args.pods} one-GPU pods on {args.nodes} KWOK nodes, "
        f"kube-scheduler client qps {args.qps:g}/burst {args.burst}; "
        f"1-min load average {record['load_avg_1m'][0]} -> {record['load_avg_1m'][1]}"
    )
    for label, r in (("without extender (default-scheduler)", base), ("with perfsched extender", ext)):
        print(
            f"  {label:<38} {r.pods_per_s:>7.1f} pods/s  (first to last bind {r.first_to_last_bind_s} s, "
            f"scheduler start to all bound {r.wall_s} s)"
        )
    print(f"  ratio with/without: {ratio:.2f} (target >= 0.70)")


if __name__ == "__main__":
    main()
