"""Benchmark: do performance-aware decisions beat performance-agnostic ones, on the same traces?

Scenarios (the shipped Philly sample, each job given a model as Gavel does) x offered loads x policy
specs, each policy run ``heterogeneity=aware`` (the default) and ``heterogeneity=agnostic`` (GPU type by
free GPUs only, the same-run baseline), under three oracles: the ground-truth table (``table``), the
table with injected error (``mre0.25``) and the shipped perfmodel predictor (``predictor``).

- ``gavel``: gavel-heterogeneous (36 K80 + 36 P100 + 36 V100), rigid jobs; plus ``hetero`` (Gavel LP)
  and ``elastic`` (Pollux-like marginal gain, here on rigid jobs: a non-preemptive type-aware packer);
- ``modern``: modern-mix (16 T4 + 32 V100 + 16 A100 + 16 H100), rigid jobs; plus ``hetero``, ``elastic``;
- ``homog``: homogeneous-64xV100 (one type: aware and agnostic must tie); plus ``elastic``;
- ``elastic``: modern-mix with elastic jobs (1 .. 2x their traced GPUs); plus ``elastic``.

Each row prints avg / p99 JCT, makespan, preemptions, migrations, restarts and elastic resizes per job,
finish-time fairness (mean rho) and ``aware/agn``: the row's avg JCT over the same policy's agnostic avg
JCT in the same cell (lower is better), plus ``vs las-agn``: over agnostic LAS's. At the end, per policy
spec, its worst ratio to the best policy of each cell (table oracle) and whether it is ever worse than
agnostic LAS: the default policy must be within 5% of the best everywhere and never worse than agnostic LAS.

Run: ``python bench/decision_quality.py [--quick] [--jobs 150] [--scenarios gavel,modern,homog,elastic]
[--loads 0.8,1.5,3] [--oracles table,mre0.25,predictor] [--policies las,srsf,...] [--out FILE]``.
``--quick`` is sized for CI-like checks (tens of seconds): gavel, load 1.5, 100 jobs, las and srsf,
table oracle. Figures are also written as JSON (default ``bench/results/decision_quality.json``).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

from scheduler.sim.simulations import SimulationRequest, run_simulations

SCENARIOS: dict[str, dict[str, Any]] = {
    "gavel": {"cluster": "gavel-heterogeneous", "elastic": False, "extra": ("hetero", "elastic")},
    "modern": {"cluster": "modern-mix", "elastic": False, "extra": ("hetero", "elastic")},
    "homog": {"cluster": "homogeneous-64xV100", "elastic": False, "extra": ("elastic",)},
    "elastic": {"cluster": "modern-mix", "elastic": True, "extra": ("elastic",)},
}
ORDERING = ("las", "srsf", "fifo", "ftf")
ORACLES = {"table": ("table", 0.0), "mre0.25": ("table", 0.25), "predictor": ("predictor", 0.0)}


def specs_for(scenario: str, policies: tuple[str, ...]) -> list[str]:
    """Policy spec strings of a scenario: each ordering policy aware and agnostic, then the extras; a
    spec with a config (``las:starvation_factor=null``) is run as given."""
    out: list[str] = []
    for p in policies:
        if ":" in p and p.partition(":")[0] in ORDERING:
            out.append(p)
        elif p in ORDERING:
            out += [p, f"{p}:heterogeneity=agnostic"]
        elif p in SCENARIOS[scenario]["extra"]:
            out.append(p)
    return out


def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``name[:key=value[;key=value]]`` -> (name, config) (values stay strings; configs coerce them)."""
    name, _, rest = spec.partition(":")
    config: dict[str, Any] = {}
    for item in filter(None, rest.split(";")):
        key, _, value = item.partition("=")
        config[key] = value
    return name, config


def run_one(scenario: str, load: float, oracle: str, spec: str, jobs: int, seed: int) -> dict[str, Any]:
    sc = SCENARIOS[scenario]
    kind, mre = ORACLES[oracle]
    req = SimulationRequest(
        policies=(spec,),
        cluster=sc["cluster"],
        load=load,
        max_jobs=jobs,
        elastic=sc["elastic"],
        oracle=kind,
        mres=(mre,),
        seed=seed,
    )
    row = dict(run_simulations(req).report["results"][0])
    row.update(scenario=scenario, oracle=oracle, spec=spec)
    return row


def _h(seconds: float) -> str:
    return f"{seconds / 3600:.2f}" if math.isfinite(seconds) else "nan"


HEADER = (
    f"{'scenario':<8} {'load':>4} {'oracle':<9} {'policy':<26} {'avgJCT h':>8} {'p99 h':>7} "
    f"{'mkspan h':>8} {'pre/j':>5} {'mig/j':>5} {'rst/j':>5} {'rsz/j':>5} {'rho':>5} "
    f"{'aware/agn':>9} {'vs las-agn':>10}"
)


def print_row(r: dict[str, Any], cell: list[dict[str, Any]]) -> None:
    by_spec = {x["spec"]: x for x in cell}
    name = r["spec"].split(":")[0]
    agn = by_spec.get(f"{name}:heterogeneity=agnostic")
    ratio = f"{r['avg_jct_s'] / agn['avg_jct_s']:.3f}" if agn and r["spec"] == name else ""
    las = by_spec.get("las:heterogeneity=agnostic")
    vs_las = f"{r['avg_jct_s'] / las['avg_jct_s']:.3f}" if las else ""
    print(
        f"{r['scenario']:<8} {r['load']:>4g} {r['oracle']:<9} {r['spec']:<26} {_h(r['avg_jct_s']):>8} "
        f"{_h(r['p99_jct_s']):>7} {_h(r['makespan_s']):>8} {r['preemptions_per_job']:>5.2f} "
        f"{r['migrations_per_job']:>5.2f} {r['restarts_per_job']:>5.2f} "
        f"{r.get('resizes_per_job', 0.0):>5.2f} {r['ftf_rho_avg']:>5.2f} "
        f"{ratio:>9} {vs_las:>10}",
        flush=True,
    )


def verdict(rows: list[dict[str, Any]]) -> None:
    """Per spec: worst avg JCT ratio to the best spec of each (scenario, load) cell, table oracle."""
    cells: dict[tuple[str, float], list[dict[str, Any]]] = {}
    for r in rows:
        if r["oracle"] == "table":
            cells.setdefault((r["scenario"], r["load"]), []).append(r)
    worst: dict[str, float] = {}
    vs_las: dict[str, float] = {}
    for cell in cells.values():
        best = min(r["avg_jct_s"] for r in cell)
        las = next((r for r in cell if r["spec"] == "las:heterogeneity=agnostic"), None)
        for r in cell:
            worst[r["spec"]] = max(worst.get(r["spec"], 0.0), r["avg_jct_s"] / best)
            if las is not None:
                vs_las[r["spec"]] = max(vs_las.get(r["spec"], 0.0), r["avg_jct_s"] / las["avg_jct_s"])
    print("\nper policy spec, table oracle: worst avg JCT / best of its cell; worst avg JCT / agnostic LAS's")
    for spec in sorted(worst, key=lambda s: worst[s]):
        ok = worst[spec] <= 1.05 and vs_las.get(spec, 1.0) <= 1.0 + 1e-9
        mark = "<- meets both" if ok else ""
        print(f"  {spec:<28} {worst[spec]:>6.3f} {vs_las.get(spec, math.nan):>6.3f}  {mark}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="gavel, load 1.5, 100 jobs, las+srsf, table")
    ap.add_argument("--jobs", type=int, default=150)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--loads", default="0.8,1.5,3")
    ap.add_argument("--oracles", default=",".join(ORACLES))
    ap.add_argument("--policies", default="las,srsf,fifo,ftf,hetero,elastic")
    ap.add_argument("--out", default="bench/results/decision_quality.json")
    ap.add_argument("--merge", default="", help="also count the rows of these JSON files (comma-separated)")
    a = ap.parse_args()
    if a.quick:
        a.scenarios, a.loads, a.jobs, a.policies, a.oracles = "gavel", "1.5", 100, "las,srsf", "table"
    scenarios = [s for s in a.scenarios.split(",") if s]
    loads = [float(x) for x in a.loads.split(",") if x]
    oracles = [o for o in a.oracles.split(",") if o]
    policies = tuple(p for p in a.policies.split(",") if p)
    for s in scenarios:
        if s not in SCENARIOS:
            ap.error(f"--scenarios: unknown scenario {s!r}; known: {', '.join(SCENARIOS)}")
    for o in oracles:
        if o not in ORACLES:
            ap.error(f"--oracles: unknown oracle {o!r}; known: {', '.join(ORACLES)}")
    print(f"decision quality: {a.jobs} Philly jobs per run, seed {a.seed}, restart cost 30 s, rounds 360 s")
    print(HEADER)
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    for scenario in scenarios:
        for load in loads:
            for oracle in oracles:
                cell: list[dict[str, Any]] = []
                for spec in specs_for(scenario, policies):
                    cell.append(run_one(scenario, load, oracle, spec, a.jobs, a.seed))
                for r in cell:
                    print_row(r, cell)
                rows += cell
    merged = [r for f in a.merge.split(",") if f for r in json.loads(Path(f).read_text(encoding="utf-8"))]
    verdict(merged + rows)
    print(f"\n{len(rows)} runs in {time.perf_counter() - t0:.0f} s wall")
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    keep = (
        *("scenario", "load", "oracle", "spec", "avg_jct_s", "p99_jct_s", "makespan_s"),
        *("preemptions_per_job", "migrations_per_job", "restarts_per_job", "resizes_per_job"),
        *("ftf_rho_avg", "unfinished"),
    )
    out.write_text(json.dumps([{k: r.get(k) for k in keep} for r in rows], indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
