"""Benchmark: do performance-aware decisions beat the newest-GPU-first preference admins configure?

Traces x scenarios x offered loads x oracles x seeds x policy specs. Each ordering policy (las, srsf, fifo,
ftf) runs ``heterogeneity=aware`` (the default: GPU types from the throughput matrix), ``ordered`` (the
baseline an admin without a performance model sets up: newest generation first, then most free GPUs)
and ``agnostic`` (most free GPUs only), on the same jobs, under four oracles: the ground-truth table
(``table``), the table with injected error (``mre0.25``), the operator's oracle (``predictor``: the shipped
perfmodel predictor corrected online by each running job's measured throughput,
``scheduler.oracles.learning.CorrectedOracle``, fresh for each run) and the shipped predictor alone, never
corrected (``predictor-cold``).

Traces (``--traces``): ``philly`` (the shipped Philly sample), ``alibaba`` (the Alibaba GPU 2023 pods
trace's training-like pods, read from ``--shared``'s ``traces/``: not shipped, its repository has no
licence) and ``multinode`` (a seeded mix of 70% 1-GPU, 28% 8-GPU and 2% 32-GPU jobs with durations
resampled from the Philly sample: 30% of the jobs need 8-32 GPUs across nodes); see
``scheduler.sim.mixes``. Each job is given a model as Gavel does (seeded).

Scenarios (``--scenarios``):

- ``gavel``: gavel-heterogeneous (36 K80 + 36 P100 + 36 V100, 4-GPU servers), rigid jobs; plus ``hetero``
  (Gavel LP) and ``elastic`` (Pollux-like marginal gain, here on rigid jobs);
- ``modern``: modern-mix (16 T4 + 32 V100 + 16 A100 + 16 H100), rigid jobs; plus ``hetero``, ``elastic``;
- ``homog``: homogeneous-64xV100 (one type: the three variants must tie); plus ``elastic``;
- ``elastic``: modern-mix with elastic jobs (1 .. 2x their traced GPUs); plus ``elastic``.

Each row prints avg / p99 JCT, the average queueing delay (submission to first start), the average waiting
time (all time without GPUs, also after preemptions: a preemptive policy starts each job at once) and its
share of the average JCT (``w/JCT``: a cell is contended when it is >= 0.25), churn (preemptions + migrations
per job), restarts and resizes per job, and ``ord/aware`` and ``agn/aware``: the same policy's ``ordered`` and
``agnostic`` avg JCT over the aware one's in the same cell (> 1: aware is faster). At the end, per oracle, the
targets: aware las/srsf >= 1.2x (predictor; 1.3x table) lower average JCT than the same policy ``ordered`` in
every cell and never worse by more than 3%, p99 no worse than ``ordered``'s by more than 10%, churn <= 1 per
job, and the default policy within 5% of the best spec of each cell.

Run: ``python bench/decision_quality.py [--quick] [--jobs 150] [--seeds 0] [--traces philly]
[--scenarios gavel,modern,homog,elastic] [--loads 0.8,1.5,3] [--oracles table,mre0.25,predictor,...]
[--policies las,srsf,...] [--baselines ordered,agnostic] [--shared ../shared] [--out FILE]``.
The issue's full grid:
``--traces philly,alibaba,multinode --scenarios gavel,modern --loads 1.5,3 --oracles table,predictor
--policies las,srsf --jobs 1000 --seeds 0,1,2``. ``--quick`` is sized for CI-like checks (tens of seconds):
gavel, load 1.5, 100 Philly jobs, las and srsf, table oracle. Figures are also written as JSON (default
``bench/results/decision_quality.json``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from any directory, like the other benches

from scheduler.policies import DEFAULT_POLICY_SPEC
from scheduler.sim.simulations import SimulationRequest, run_simulations

SCENARIOS: dict[str, dict[str, Any]] = {
    "gavel": {"cluster": "gavel-heterogeneous", "elastic": False, "extra": ("hetero", "elastic")},
    "modern": {"cluster": "modern-mix", "elastic": False, "extra": ("hetero", "elastic")},
    "homog": {"cluster": "homogeneous-64xV100", "elastic": False, "extra": ("elastic",)},
    "elastic": {"cluster": "modern-mix", "elastic": True, "extra": ("elastic",)},
}
#: bench name -> trace name (``scheduler.sim.traces.load_trace``); ``{seed}`` is the run's seed
TRACES = {"philly": "philly-10k", "alibaba": "alibaba-2023", "multinode": "multinode-mix:seed={seed}"}
ORDERING = ("las", "srsf", "fifo", "ftf")
BASELINES = ("ordered", "agnostic")
ORACLES = {
    "table": ("table", 0.0),
    "mre0.25": ("table", 0.25),
    "predictor": ("predictor", 0.0),
    "predictor-cold": ("predictor-cold", 0.0),
}
#: issue 30's targets: aware over ordered avg JCT per oracle, the worst allowed cell, p99 and churn
TARGET_SPEEDUP = {"predictor": 1.2, "predictor-cold": 1.2, "table": 1.3}
WORST_ALLOWED = 1 / 1.03
P99_ALLOWED = 1.10
CHURN_ALLOWED = 1.0
DEFAULT_WITHIN = 1.05


def specs_for(scenario: str, policies: tuple[str, ...], baselines: tuple[str, ...] = BASELINES) -> list[str]:
    """Policy spec strings of a scenario: each ordering policy aware and as each of ``baselines``
    (ordered, agnostic), then the extras; a spec with a config (``las:starvation_factor=null``) is run
    as given."""
    out: list[str] = []
    for p in policies:
        if ":" in p and p.partition(":")[0] in ORDERING:
            out.append(p)
        elif p in ORDERING:
            out += [p, *(f"{p}:heterogeneity={b}" for b in baselines)]
        elif p in SCENARIOS[scenario]["extra"]:
            out.append(p)
    return out


def run_one(
    trace: str, scenario: str, load: float, oracle: str, spec: str, jobs: int, seed: int
) -> dict[str, Any]:
    sc = SCENARIOS[scenario]
    kind, mre = ORACLES[oracle]
    req = SimulationRequest(
        policies=(spec,),
        trace=TRACES[trace].format(seed=seed),
        cluster=sc["cluster"],
        load=load,
        max_jobs=jobs,
        elastic=sc["elastic"],
        oracle=kind,
        mres=(mre,),
        seed=seed,
    )
    row = dict(run_simulations(req).report["results"][0])
    row.update(trace=trace, scenario=scenario, oracle=oracle, spec=spec, seed=seed)
    row["churn_per_job"] = row["preemptions_per_job"] + row["migrations_per_job"]
    return row


def _h(seconds: float) -> str:
    return f"{seconds / 3600:.2f}" if math.isfinite(seconds) else "nan"


HEADER = (
    f"{'trace':<9} {'scenario':<8} {'load':>4} {'seed':>4} {'oracle':<14} {'policy':<28} {'avgJCT h':>8} "
    f"{'p99 h':>7} {'queue h':>7} {'wait h':>7} {'w/JCT':>5} {'churn/j':>7} {'rst/j':>5} {'rsz/j':>5} "
    f"{'ord/aware':>9} {'agn/aware':>9}"
)


def _baseline(cell: list[dict[str, Any]], spec: str, kind: str) -> dict[str, Any] | None:
    return next((x for x in cell if x["spec"] == f"{spec}:heterogeneity={kind}"), None)


def print_row(r: dict[str, Any], cell: list[dict[str, Any]]) -> None:
    ratios = []
    for kind in BASELINES:
        base = _baseline(cell, r["spec"], kind) if r["spec"] in ORDERING else None
        ratios.append(f"{base['avg_jct_s'] / r['avg_jct_s']:.3f}" if base else "")
    q = r.get("avg_queueing_s", math.nan)
    w = r.get("avg_waiting_s", math.nan)
    share = w / r["avg_jct_s"] if r["avg_jct_s"] > 0 else math.nan
    print(
        f"{r['trace']:<9} {r['scenario']:<8} {r['load']:>4g} {r['seed']:>4} {r['oracle']:<14} "
        f"{r['spec']:<28} "
        f"{_h(r['avg_jct_s']):>8} {_h(r['p99_jct_s']):>7} {_h(q):>7} {_h(w):>7} {share:>5.2f} "
        f"{r['churn_per_job']:>7.2f} {r['restarts_per_job']:>5.2f} {r.get('resizes_per_job', 0.0):>5.2f} "
        f"{ratios[0]:>9} {ratios[1]:>9}",
        flush=True,
    )


def verdict(rows: list[dict[str, Any]]) -> None:
    """Issue 30's targets per oracle over every cell (trace, scenario, load, seed): see the docstring."""
    cells: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        key = (r["oracle"], r.get("trace", "philly"), r["scenario"], r["load"], r.get("seed", 0))
        cells.setdefault(key, []).append(r)
    for oracle in sorted({k[0] for k in cells}):
        want = TARGET_SPEEDUP.get(oracle)
        print(
            f"\noracle {oracle}: aware vs ordered avg JCT per cell (target >= {want or '-'}x, never < "
            f"{WORST_ALLOWED:.3f}x), p99 (<= {P99_ALLOWED:.2f}x ordered's), churn (<= {CHURN_ALLOWED:g}/job)"
        )
        print(
            f"  {'policy':<6} {'cells':>5} {'min x':>7} {'geo x':>7} {'max x':>7} {'worst p99':>9} "
            f"{'max churn':>9} {'ordered churn':>13}  verdict"
        )
        for name in ORDERING:
            speed, p99, churn, base_churn = [], [], [], []
            for key, cell in cells.items():
                if key[0] != oracle:
                    continue
                aware = next((x for x in cell if x["spec"] == name), None)
                ordered = _baseline(cell, name, "ordered")
                if aware is None or ordered is None:
                    continue
                speed.append(ordered["avg_jct_s"] / aware["avg_jct_s"])
                p99.append(aware["p99_jct_s"] / ordered["p99_jct_s"])
                churn.append(aware["churn_per_job"])
                base_churn.append(ordered["churn_per_job"])
            if not speed:
                continue
            geo = math.exp(sum(math.log(s) for s in speed) / len(speed))
            ok = (
                min(speed) >= WORST_ALLOWED
                and (want is None or min(speed) >= want)
                and max(p99) <= P99_ALLOWED
                and max(churn) <= CHURN_ALLOWED
            )
            print(
                f"  {name:<6} {len(speed):>5} {min(speed):>7.3f} {geo:>7.3f} {max(speed):>7.3f} "
                f"{max(p99):>9.3f} {max(churn):>9.2f} {max(base_churn):>13.2f}  {'meets' if ok else 'misses'}"
            )
        worst: dict[str, float] = {}
        for key, cell in cells.items():
            if key[0] != oracle:
                continue
            best = min(r["avg_jct_s"] for r in cell)
            for r in cell:
                worst[r["spec"]] = max(worst.get(r["spec"], 0.0), r["avg_jct_s"] / best)
        if DEFAULT_POLICY_SPEC in worst:
            w = worst[DEFAULT_POLICY_SPEC]
            print(
                f"  default policy {DEFAULT_POLICY_SPEC!r}: worst avg JCT / best spec of its cell {w:.3f} "
                f"({'within' if w <= DEFAULT_WITHIN else 'not within'} {DEFAULT_WITHIN - 1:.0%})"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="gavel, load 1.5, 100 jobs, las+srsf, table")
    ap.add_argument("--jobs", type=int, default=150)
    ap.add_argument("--seed", type=int, default=None, help="one seed (the same as --seeds N)")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--traces", default="philly")
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--loads", default="0.8,1.5,3")
    ap.add_argument(
        "--oracles",
        default="table,mre0.25,predictor",
        help=(
            "table (the true table), mre0.25 (with 25%% injected error), predictor (the operator's oracle: "
            "the shipped predictor corrected online by measured throughput), predictor-cold (the shipped "
            "predictor alone, never corrected)"
        ),
    )
    ap.add_argument("--policies", default="las,srsf,fifo,ftf,hetero,elastic")
    ap.add_argument(
        "--shared", default="", help="the shared data folder (for the alibaba trace: its traces/)"
    )
    ap.add_argument(
        "--baselines",
        default=",".join(BASELINES),
        help="baseline variants run beside each aware policy (ordered,agnostic; ordered alone halves a grid)",
    )
    ap.add_argument("--out", default="bench/results/decision_quality.json")
    ap.add_argument("--merge", default="", help="also count the rows of these JSON files (comma-separated)")
    a = ap.parse_args()
    if a.quick:
        a.scenarios, a.loads, a.jobs, a.policies, a.oracles = "gavel", "1.5", 100, "las,srsf", "table"
        a.traces = "philly"
    traces = [t for t in a.traces.split(",") if t]
    scenarios = [s for s in a.scenarios.split(",") if s]
    oracles = [o for o in a.oracles.split(",") if o]
    policies = tuple(p for p in a.policies.split(",") if p)
    baselines = tuple(b for b in a.baselines.split(",") if b)
    for b in baselines:
        if b not in BASELINES:
            ap.error(f"--baselines: unknown baseline {b!r}; known: {', '.join(BASELINES)}")
    try:
        loads = [float(x) for x in a.loads.split(",") if x]
        seeds = [a.seed] if a.seed is not None else [int(x) for x in a.seeds.split(",") if x]
    except ValueError as exc:
        ap.error(f"--loads / --seeds: {exc}")
    for t in traces:
        if t not in TRACES:
            ap.error(f"--traces: unknown trace {t!r}; known: {', '.join(TRACES)}")
    for s in scenarios:
        if s not in SCENARIOS:
            ap.error(f"--scenarios: unknown scenario {s!r}; known: {', '.join(SCENARIOS)}")
    for o in oracles:
        if o not in ORACLES:
            ap.error(f"--oracles: unknown oracle {o!r}; known: {', '.join(ORACLES)}")
    if a.shared:
        if not Path(a.shared).is_dir():
            ap.error(f"--shared: {a.shared!r} is not a directory")
        os.environ["PERFSCHED_TRACES_DIR"] = str(Path(a.shared) / "traces")
    elif "alibaba" in traces and not os.environ.get("PERFSCHED_TRACES_DIR"):
        ap.error("--traces alibaba: give --shared DIR (the shared data folder holding traces/)")
    print(f"decision quality: {a.jobs} jobs per run, seeds {seeds}, restart cost 30 s, rounds 360 s")
    print(HEADER)
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    for trace in traces:
        for scenario in scenarios:
            for load in loads:
                for seed in seeds:
                    for oracle in oracles:
                        cell = [
                            run_one(trace, scenario, load, oracle, spec, a.jobs, seed)
                            for spec in specs_for(scenario, policies, baselines)
                        ]
                        for r in cell:
                            print_row(r, cell)
                        rows += cell
    merged = [r for f in a.merge.split(",") if f for r in json.loads(Path(f).read_text(encoding="utf-8"))]
    verdict(merged + rows)
    print(f"\n{len(rows)} runs in {time.perf_counter() - t0:.0f} s wall")
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    keep = (
        *("trace", "scenario", "load", "seed", "oracle", "spec", "avg_jct_s", "p99_jct_s", "avg_queueing_s"),
        "avg_waiting_s",
        *("makespan_s", "preemptions_per_job", "migrations_per_job", "churn_per_job", "restarts_per_job"),
        *("resizes_per_job", "ftf_rho_avg", "unfinished"),
    )
    out.write_text(json.dumps([{k: r.get(k) for k in keep} for r in rows], indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
