"""Benchmark: scheduling quality from the simulator, as average-JCT ratio tables.

1. The survey's experiment (seed 000, section 1.3, Figure 4): Philly jobs on 64 homogeneous GPUs, SRSF with
   execution-time error MRE 0 / 10 / 25 / 50 / 75 % against LAS and FIFO (with backfill), survey semantics
   (event-driven, no restart cost). Ratio = avg JCT / avg JCT of SRSF with MRE 0.
2. The heterogeneous cluster (``gavel-heterogeneous``: 36 K80 + 36 P100 + 36 V100): ``hetero``
   (Gavel-style LP) vs ``las`` vs ``fifo``, rigid jobs; and elastic vs non-elastic: the ``elastic``
   policy with elastic jobs (1 .. 2x their traced GPUs) against the same policy with rigid jobs.
   Ratio = avg JCT / avg JCT of FIFO (the baseline, measured in the same run).

Run: ``python bench/sim_quality.py [--survey-jobs 10000] [--hetero-jobs 2000] [--load 1.0]``.
Figures are also written to ``bench/results/sim_quality.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from scheduler.sim.simulations import SURVEY_MRES, SimulationRequest, run_simulations


def _table(title: str, rows: list[dict[str, Any]], ref: float, labels: list[str]) -> None:
    print(f"\n{title}")
    print(f"{'setting':<28} {'avg JCT h':>10} {'ratio':>7} {'p99 JCT h':>10} {'util':>6} {'preempt/job':>12}")
    for label, r in zip(labels, rows, strict=True):
        print(
            f"{label:<28} {r['avg_jct_s'] / 3600:>10.2f} {r['avg_jct_s'] / ref:>7.2f} "
            f"{r['p99_jct_s'] / 3600:>10.2f} {r['utilization']:>6.2f} {r['preemptions_per_job']:>12.2f}"
        )


def survey(jobs: int, load: float, seed: int) -> dict[str, Any]:
    plan = (*(("srsf", m) for m in SURVEY_MRES), ("las", 0.0), ("fifo", 0.0))
    rows: list[dict[str, Any]] = []
    rep: dict[str, Any] = {}
    print(f"survey-mre: {jobs} Philly jobs, 64 GPUs, load {load:g}", flush=True)
    for item in plan:  # one run at a time, printed as it finishes
        req = SimulationRequest(
            policies=(item[0],),
            gpus=64,
            load=load,
            max_jobs=jobs,
            survey=True,
            seed=seed,
            plan=(item,),
            policy_configs={"fifo": {"backfill": True}},
        )
        rep = run_simulations(req).report
        row = rep["results"][0]
        rows.append(row)
        print(
            f"  {item[0]} MRE {item[1]:g}: avg JCT {row['avg_jct_s'] / 3600:.3f} h, CPU {row['cpu_s']:.0f} s",
            flush=True,
        )
    rep["results"] = rows
    ref = rows[0]["avg_jct_s"]
    labels = [f"SRSF MRE {100 * r['mre']:g}%" if r["policy"] == "srsf" else r["policy"].upper() for r in rows]
    _table(
        f"survey-mre: {jobs} Philly jobs, 64 GPUs, load {load:g} (raw offered load "
        f"{rep['load']['raw_offered_load']:.1f}); ratio to SRSF MRE 0",
        rows,
        ref,
        labels,
    )
    return rep


def hetero(jobs: int, load: float, seed: int) -> list[dict[str, Any]]:
    reports = []
    common = {"cluster": "gavel-heterogeneous", "load": load, "max_jobs": jobs, "seed": seed}
    rigid = run_simulations(SimulationRequest(policies=("fifo", "las", "hetero", "elastic"), **common))  # type: ignore[arg-type]
    elastic = run_simulations(SimulationRequest(policies=("elastic",), elastic=True, **common))  # type: ignore[arg-type]
    reports += [rigid.report, elastic.report]
    rows = rigid.report["results"] + elastic.report["results"]
    ref = rows[0]["avg_jct_s"]
    labels = [
        "fifo (rigid)",
        "las (rigid)",
        "hetero (rigid)",
        "elastic policy (rigid jobs)",
        "elastic (elastic jobs)",
    ]
    _table(
        f"gavel-heterogeneous (108 GPUs): {jobs} Philly jobs, load {load:g}; ratio to FIFO", rows, ref, labels
    )
    return reports


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--survey-jobs", type=int, default=10_000)
    ap.add_argument("--hetero-jobs", type=int, default=2000)
    ap.add_argument("--load", type=float, default=1.0, help="offered load of the survey run")
    ap.add_argument("--hetero-load", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-survey", action="store_true")
    ap.add_argument("--skip-hetero", action="store_true")
    args = ap.parse_args()
    t0 = time.perf_counter()
    out: dict[str, Any] = {}
    if not args.skip_survey:
        out["survey"] = survey(args.survey_jobs, args.load, args.seed)
    if not args.skip_hetero:
        out["hetero"] = hetero(args.hetero_jobs, args.hetero_load, args.seed)
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")
    path = Path(__file__).parent / "results"
    path.mkdir(exist_ok=True)
    (path / "sim_quality.json").write_text(json.dumps(out, indent=2, default=str))


if __name__ == "__main__":
    main()
