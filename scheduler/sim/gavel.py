"""Gavel's LAS experiment on perfsched's simulator: its job generator, its throughput table, its cluster.

Narayanan et al., "Heterogeneity-Aware Cluster Scheduling Policies for Deep Learning Workloads", OSDI 2020,
Figure 8 ("Least Attained Service policy on the continuous-single trace"): average JCT against input job
rate on 36 K80 + 36 P100 + 36 V100 for heterogeneity-agnostic LAS and Gavel's heterogeneity-aware LAS.

- ``GavelTable`` reads ``data/gavel_throughputs_1gpu.csv``: Gavel's measured steps/s of its 26 job types
  alone on one K80, P100 and V100 (``simulation_throughputs.json`` at gavel@c4fa4009, MIT; per-row source).
- ``generate_jobs`` re-implements Gavel's *continuous-single* generator (written from its description in
  ``scheduler/utils.py``/``job_table.py``, not copied): Poisson arrivals at the input rate; a job type drawn
  uniformly from the 26; a duration on V100 of ``60 x 10^U(1.5, 3)`` s with probability 0.8, else
  ``60 x 10^U(3, 4)`` s (Gavel's fit to Philly); one GPU; work = duration x its V100 steps/s.
- ``run_gavel_las`` replays each (input rate, policy spec) through the same ``Engine`` and ``run_round`` as
  ``perfsched simulate`` and averages JCT over a window of job ids, as Gavel does (jobs 4000-5000 of each
  trace there), so the early empty cluster and the final drain do not count.
- ``paper_figure`` reads the figure's values (``data/gavel_fig8_las.csv``, with per-row source).

Where we differ from the paper (also in ``docs/gavel-las.md``): Gavel's LAS is max-min fairness over time
shares re-solved every 6-minute round (every job gets a share at once, so it time-slices); perfsched's
``las`` is Tiresias's discretized 2D-LAS (queues by attained GPU-service; jobs run to the next threshold or
completion), so even the agnostic baseline is another policy. Shorter traces (a few hundred jobs, not
5,000) and one seed by default (``seeds`` averages several, as the paper does over 0-2) so that a sweep
takes minutes on a laptop, not days; restarts are free by default, as in Gavel's simulator.
Pure apart from reading the two shipped CSV files.
"""

from __future__ import annotations

import csv
import logging
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from scheduler.core.errors import ConfigError
from scheduler.core.types import Job, WorkUnit
from scheduler.sim.cluster import load_cluster_spec, spec_to_nodes
from scheduler.sim.engine import Engine, EngineConfig, EngineResult

log = logging.getLogger(__name__)

TABLE_FILE = "gavel_throughputs_1gpu.csv"
FIGURE_FILE = "gavel_fig8_las.csv"
REFERENCE_GPU = "V100"
CLUSTER = "gavel-heterogeneous"
#: the paper's citation, printed with the figures
PAPER = (
    "Narayanan et al., Heterogeneity-Aware Cluster Scheduling Policies for Deep Learning Workloads, "
    "OSDI 2020, Figure 8 (LAS, continuous-single trace, 36 K80 + 36 P100 + 36 V100)"
)
# Gavel's continuous-single duration distribution (minutes = 10^U(lo, hi)): short jobs 80%, long 20%
_SHORT_EXP = (1.5, 3.0)
_LONG_EXP = (3.0, 4.0)
_LONG_P = 0.2


def _data_text(name: str) -> str:
    return (resources.files("scheduler.sim") / "data" / name).read_text(encoding="utf-8")


@dataclass(frozen=True, slots=True)
class GavelJobType:
    """One of Gavel's job types: its name there, our model name and batch, its steps/s per GPU type."""

    job_type: str
    model: str
    batch_size: int
    steps_per_s: Mapping[str, float]


class GavelTable:
    """Gavel's isolated single-GPU throughput table; answers ``TableOracle``'s questions (steps/s)."""

    def __init__(self, types: Sequence[GavelJobType]) -> None:
        self.types = tuple(types)
        self._by_key = {(t.model, t.batch_size): t for t in self.types}

    @classmethod
    def load(cls) -> GavelTable:
        rows = list(csv.DictReader(_data_text(TABLE_FILE).splitlines()))
        acc: dict[str, dict[str, Any]] = {}
        for r in rows:
            entry = acc.setdefault(
                r["job_type"],
                {"model": r["model"], "batch_size": int(r["batch_size"]), "tput": {}},
            )
            entry["tput"][r["gpu_type"]] = float(r["steps_per_s"])
        return cls(
            [GavelJobType(name, e["model"], e["batch_size"], dict(e["tput"])) for name, e in acc.items()]
        )

    @property
    def gpu_types(self) -> tuple[str, ...]:
        return tuple(sorted({g for t in self.types for g in t.steps_per_s}))

    def throughput(
        self,
        model: str,
        batch_size: int,
        gpu_type: str,
        num_gpus: int,
        num_nodes: int = 1,
        dataset: str = "",
        network_gbps: float | None = None,
    ) -> float | None:
        """Steps/s of one job of this type alone on one GPU of ``gpu_type``; None for any other shape (so
        ``network_gbps`` never matters)."""
        t = self._by_key.get((model, batch_size))
        if t is None or num_gpus != 1:
            return None
        return t.steps_per_s.get(gpu_type)


def generate_jobs(
    table: GavelTable, rate_per_h: float, num_jobs: int, seed: int
) -> tuple[list[Job], dict[str, float]]:
    """``num_jobs`` single-GPU jobs of Gavel's continuous-single trace at ``rate_per_h`` jobs per hour.

    Returns the jobs (ids ``gavel-00000`` ..., in arrival order) and each job's duration on V100.
    Deterministic for a seed; the same seed gives the same job types and durations at every rate (only
    the arrival times scale), so the rates of a sweep compare the same jobs.
    """
    if rate_per_h <= 0 or not math.isfinite(rate_per_h):
        raise ConfigError(f"--rates: each input job rate must be > 0 jobs/hour, got {rate_per_h:g}")
    rng = random.Random(seed)
    mean_gap_s = 3600.0 / rate_per_h
    jobs: list[Job] = []
    ideal: dict[str, float] = {}
    t = 0.0
    for i in range(num_jobs):
        if i > 0:
            t += rng.expovariate(1.0) * mean_gap_s
        lo, hi = _LONG_EXP if rng.random() < _LONG_P else _SHORT_EXP
        duration = 60.0 * 10.0 ** rng.uniform(lo, hi)
        jt = table.types[rng.randrange(len(table.types))]
        name = f"gavel-{i:05d}"
        jobs.append(
            Job(
                name=name,
                submit_time=t,
                total_work=duration * jt.steps_per_s[REFERENCE_GPU],
                model=jt.model,
                batch_size=jt.batch_size,
                work_unit=WorkUnit.ITERATIONS,
            )
        )
        ideal[name] = duration
    return jobs, ideal


@dataclass(frozen=True, slots=True)
class PaperPoint:
    rate_per_h: float
    policy: str  # "LAS" (heterogeneity-agnostic) or "Gavel" (heterogeneity-aware LAS)
    avg_jct_h: float


def paper_figure() -> list[PaperPoint]:
    """The figure's values (``data/gavel_fig8_las.csv``; each row names its source and licence)."""
    rows = csv.DictReader(_data_text(FIGURE_FILE).splitlines())
    return [PaperPoint(float(r["input_job_rate_per_h"]), r["policy"], float(r["avg_jct_h"])) for r in rows]


@dataclass(frozen=True, slots=True)
class GavelLasRequest:
    """One ``perfsched experiment gavel-las`` sweep (see ``scheduler.commands.simulate``)."""

    rates: tuple[float, ...]
    #: heterogeneity-aware and -agnostic policy specs, and the newest-first baseline (``ordered``;
    #: empty: not run)
    aware: str = "las"
    agnostic: str = "las:heterogeneity=agnostic"
    ordered: str = "las:heterogeneity=ordered"
    jobs: int = 500
    window: tuple[int, int] = (200, 400)
    #: generator seeds; each (rate, policy) is run once per seed and the report averages over them
    seeds: tuple[int, ...] = (0,)
    round_seconds: float = 360.0
    restart_cost_s: float = 0.0

    def validate(self) -> None:
        if not self.rates:
            raise ConfigError("--rates: give at least one input job rate")
        if not self.seeds:
            raise ConfigError("--seeds: give at least one seed")
        start, end = self.window
        if not 0 <= start < end <= self.jobs:
            raise ConfigError(
                f"--window: must be START:END with 0 <= START < END <= --jobs ({self.jobs}), "
                f"got {start}:{end}"
            )
        if self.round_seconds <= 0 or not math.isfinite(self.round_seconds):
            raise ConfigError(f"--round-seconds: must be > 0, got {self.round_seconds:g}")
        if self.restart_cost_s < 0 or not math.isfinite(self.restart_cost_s):
            raise ConfigError(f"--restart-cost: must be >= 0 seconds, got {self.restart_cost_s:g}")


def _window_metrics(result: EngineResult, window: tuple[int, int], table_rows: int) -> dict[str, Any]:
    start, end = window
    recs = result.records[start:end]
    done = [r for r in recs if r.finish is not None]
    jct = np.array([r.finish - r.submit_time for r in done if r.finish is not None], dtype=float)
    ideal = np.array([r.ideal_duration for r in done], dtype=float)
    return {
        "window_jobs": len(recs),
        "unfinished": len(recs) - len(done),
        "avg_jct_h": float(jct.mean() / 3600.0) if jct.size else math.nan,
        "p99_jct_h": float(np.percentile(jct, 99) / 3600.0) if jct.size else math.nan,
        # how much slower than alone on a V100 (the job's duration by the generator)
        "avg_slowdown_vs_v100": float((jct / ideal).mean()) if jct.size else math.nan,
        "preemptions_per_job": sum(r.preemptions for r in recs) / max(1, len(recs)),
        "restarts_per_job": sum(r.restarts for r in recs) / max(1, len(recs)),
        "sim_end_h": result.end_time / 3600.0,
        "wall_s": result.wall_s,
        "jobs_simulated": table_rows,
    }


def run_gavel_las(
    req: GavelLasRequest, *, on_run: Callable[[str, float, dict[str, Any]], None] | None = None
) -> dict[str, Any]:
    """Run every (rate, spec) of ``req``; returns the report (JSON-able) with our curve and the paper's."""
    from scheduler.core.round import run_round
    from scheduler.oracles.table import TableOracle
    from scheduler.policies import make_policy_from_spec, parse_policy_spec
    from scheduler.sim.simulations import las_thresholds_gpu_s

    req.validate()
    specs = {"aware": parse_policy_spec(req.aware), "agnostic": parse_policy_spec(req.agnostic)}
    if req.ordered:
        specs["ordered"] = parse_policy_spec(req.ordered)
    for role, spec in specs.items():
        try:
            make_policy_from_spec(spec)
        except ConfigError as exc:
            raise ConfigError(f"--{role}: {exc}") from None
    table = GavelTable.load()
    spec_c = load_cluster_spec(CLUSTER)
    nodes = spec_to_nodes(spec_c)
    oracle = TableOracle(table)
    rows: list[dict[str, Any]] = []
    for rate, seed in ((r, s) for r in req.rates for s in req.seeds):
        jobs, ideal = generate_jobs(table, rate, req.jobs, seed)
        for role, spec in specs.items():
            policy = make_policy_from_spec(spec)
            cfg = EngineConfig(
                round_seconds=req.round_seconds,
                restart_cost_s=req.restart_cost_s,
                resize_cost_s=req.restart_cost_s,
                wake_thresholds_gpu_s=las_thresholds_gpu_s(policy),
            )
            engine = Engine(
                nodes, jobs, policy, oracle, oracle, cfg, run_round=run_round, ideal_durations=ideal
            )
            result = engine.run()
            row = {"input_job_rate_per_h": rate, "seed": seed, "role": role, "policy": spec.text}
            row.update(_window_metrics(result, req.window, len(jobs)))
            rows.append(row)
            log.info("gavel-las run done", extra={"rate": rate, "policy": spec.text, "wall_s": result.wall_s})
            if on_run is not None:
                on_run(spec.text, rate, row)
    paper = paper_figure()
    return {
        "experiment": "gavel-las",
        "paper": PAPER,
        "cluster": spec_c.name,
        "cluster_gpus": spec_c.total_gpus,
        "generator": (
            "Gavel continuous-single: Poisson arrivals; job type uniform over Gavel's 26; duration on V100 "
            "60 x 10^U(1.5,3) s (p=0.8) or 60 x 10^U(3,4) s (p=0.2); 1 GPU"
        ),
        "throughputs": f"Gavel simulation_throughputs.json, isolated 1-GPU steps/s ({TABLE_FILE}, MIT)",
        "jobs_per_trace": req.jobs,
        "window": list(req.window),
        "seeds": list(req.seeds),
        "round_seconds": req.round_seconds,
        "restart_cost_s": req.restart_cost_s,
        "results": rows,
        "paper_results": [
            {"input_job_rate_per_h": p.rate_per_h, "policy": p.policy, "avg_jct_h": p.avg_jct_h}
            for p in paper
        ],
    }


def paper_value(points: Sequence[PaperPoint], policy: str, rate: float) -> float | None:
    """The paper's average JCT for ``policy`` at ``rate``, linearly interpolated between its rates.

    None outside the rates the figure has for that policy (e.g. LAS above 5.6 jobs/hour, where it never
    reached a steady state in the paper's runs).
    """
    pts = sorted((p.rate_per_h, p.avg_jct_h) for p in points if p.policy == policy)
    if not pts or rate < pts[0][0] - 1e-9 or rate > pts[-1][0] + 1e-9:
        return None
    xs, ys = zip(*pts, strict=True)
    return float(np.interp(rate, xs, ys))
