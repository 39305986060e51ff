"""Benchmark: slow-node detection on the synthetic trial (``scheduler.sim.slow_nodes``), several seeds.

Prints, per seed, when the slow node (0.6x) was first flagged and how many flags healthy nodes got over
48 h (15 healthy nodes x 48 h, evaluated every 10 min), at the default ``SlowNodeConfig``; then the same
for a milder slowdown. Run: ``python bench/slow_nodes.py [--seeds N] [--slow-factor F] [--job-sigma S]``.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from scheduler.core.slow_nodes import SlowNodeConfig
from scheduler.sim.slow_nodes import TrialSpec, run_trial


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--slow-factor", type=float, default=0.6)
    ap.add_argument("--job-sigma", type=float, default=0.1)
    args = ap.parse_args()
    if args.seeds < 1 or not 0 < args.slow_factor <= 1 or args.job_sigma < 0:
        ap.error("--seeds must be >= 1, --slow-factor in (0, 1], --job-sigma >= 0")
    spec = replace(TrialSpec(), slow_factor=args.slow_factor, job_sigma=args.job_sigma)
    config = SlowNodeConfig()
    flagged, false = [], 0
    for seed in range(args.seeds):
        r = run_trial(seed, spec, config)
        flagged.append(r.first_flag_s)
        false += len(r.false_flags)
        when = "never" if r.first_flag_s is None else f"{r.first_flag_s / 60:.0f} min"
        print(f"seed {seed}: slow node flagged after {when}, {len(r.false_flags)} false flag(s)")
    hours = args.seeds * spec.hours * (spec.nodes - 1)
    found = [f for f in flagged if f is not None]
    slowest = f"{max(found) / 60:.0f} min" if found else "-"
    print(f"{len(found)}/{args.seeds} flagged, slowest after {slowest}; ", end="")
    print(f"{false} false flags over {hours:.0f} healthy node-hours")


if __name__ == "__main__":
    main()
