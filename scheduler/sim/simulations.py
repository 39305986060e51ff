"""Running simulations end to end: trace + cluster + policies x MREs -> engine runs -> one report.

``SimulationRequest`` holds everything ``perfsched simulate`` and ``perfsched experiment survey-mre``
take; ``run_simulations`` loads the trace and cluster, builds the workload once, and runs the engine
once per (policy, MRE) with the same jobs, returning the report (a JSON-able dict whose ``results`` list
has one row of metrics per run) and the raw engine results (for plots and per-job CSVs). Reads the
trace, spec and truth-table files; otherwise pure. The benchmarks call it too.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from scheduler.core.errors import ConfigError
from scheduler.core.protocols import Policy, ThroughputOracle
from scheduler.core.types import Node
from scheduler.policies.ordered import check_policy_type_order
from scheduler.sim.cluster import ClusterSpec, homogeneous_spec, load_cluster_spec, spec_to_nodes
from scheduler.sim.engine import Engine, EngineConfig, EngineResult
from scheduler.sim.reports import per_queue, summarize
from scheduler.sim.trace_jobs import TraceDurationTruth, Workload, WorkloadOptions, build_workload
from scheduler.sim.traces import LoadScaling, Trace, TraceJob, load_trace, rescale_load

log = logging.getLogger(__name__)

DEFAULT_TRACE = "philly-10k"
DEFAULT_CLUSTER = "homogeneous-64xV100"
SURVEY_MRES = (0.0, 0.10, 0.25, 0.50, 0.75)
#: what the policy can be told (``--oracle``) -> what it is
ORACLES = {
    "table": "the true throughput table (with --mre's injected error)",
    "predictor": (
        "the operator's oracle: the shipped predictor corrected online by each running job's measured "
        "throughput (scheduler.oracles.learning.CorrectedOracle)"
    ),
    "predictor-cold": "the shipped predictor alone, never corrected (PredictorOracle)",
}


@dataclass(frozen=True, slots=True)
class SimulationRequest:
    """One ``perfsched simulate`` invocation (see docs/simulator.md for each option).

    ``survey=True`` switches to the survey's semantics: event-driven rounds (arrivals, completions and
    LAS queue-threshold crossings; no periodic ticks), no restart cost, one execution-time error per job.
    """

    #: policy specs, ``NAME[:key=value;...]`` (``scheduler.policies``); each run is reported under its spec
    policies: tuple[str, ...]
    trace: str = DEFAULT_TRACE
    cluster: str | None = None
    gpus: int | None = None
    load: float | None = 0.8
    mres: tuple[float, ...] = (0.0,)
    round_seconds: float = 360.0
    restart_cost_s: float = 30.0
    seed: int = 0
    max_jobs: int | None = None
    elastic: bool = False
    deadline_slack: float | None = None
    reference_gpu: str = "V100"
    oracle: str = "table"
    survey: bool = False
    #: base config per policy *name* (``--policy-config``); a spec's own keys override it
    policy_configs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: explicit (policy, MRE) runs; None = every policy x every MRE
    plan: tuple[tuple[str, float], ...] | None = None
    #: let policies that offer one decide rounds incrementally (same results; False: ``run_round``
    #: every round, the benchmark's baseline)
    incremental: bool = True

    def run_plan(self) -> tuple[tuple[str, float], ...]:
        if self.plan is not None:
            return self.plan
        mres = self.mres if self.oracle == "table" else (math.nan,)
        return tuple((p, m) for p in self.policies for m in mres)

    def validate(self) -> None:
        if not self.policies:
            raise ConfigError("--policy: give at least one policy")
        if self.round_seconds < 0 or not math.isfinite(self.round_seconds):
            raise ConfigError(f"--round-seconds: must be >= 0, got {self.round_seconds}")
        if self.restart_cost_s < 0 or not math.isfinite(self.restart_cost_s):
            raise ConfigError(f"--restart-cost: must be >= 0 seconds, got {self.restart_cost_s}")
        for m in self.mres:
            if not (0 <= m < 10 and math.isfinite(m)):
                raise ConfigError(f"--mre: each value must be in [0, 10), got {m}")
        if self.max_jobs is not None and self.max_jobs < 1:
            raise ConfigError(f"--jobs: must be >= 1, got {self.max_jobs}")
        if self.oracle not in ORACLES:
            raise ConfigError(f"--oracle: must be one of {', '.join(ORACLES)}, got {self.oracle!r}")
        if self.cluster is not None and self.gpus is not None:
            raise ConfigError("--cluster and --gpus: give one of them, not both")


@dataclass(slots=True)
class SimulationOutcome:
    report: dict[str, Any]
    runs: list[tuple[str, EngineResult]]


@dataclass(frozen=True, slots=True)
class _Relay:
    """Forwards the engine's (done, total) progress with the run's label."""

    target: Callable[[str, int, int], None]
    label: str

    def __call__(self, done: int, total: int) -> None:
        self.target(self.label, done, total)


def resolve_cluster(req: SimulationRequest) -> ClusterSpec:
    if req.gpus is not None:
        return homogeneous_spec(req.gpus)
    return load_cluster_spec(req.cluster or DEFAULT_CLUSTER)


def las_thresholds_gpu_s(policy: Policy) -> tuple[float, ...]:
    """The attained-service levels (GPU-seconds) at which ``policy`` moves a job between queues.

    Read from the policy's public config (``thresholds_gpu_hours`` or ``queue_thresholds_gpu_hours``)
    when it has one; other policies have none.
    """
    config = getattr(policy, "config", None)
    for attr in ("queue_thresholds_gpu_hours", "thresholds_gpu_hours", "thresholds"):
        values = getattr(config, attr, None)
        if values:
            return tuple(float(v) * 3600.0 for v in values)
    return ()


def _make_oracles(
    req: SimulationRequest, truth_table: Any, mre: float
) -> tuple[ThroughputOracle, ThroughputOracle]:
    from scheduler.oracles.table import TableOracle

    truth = TableOracle(truth_table)
    if req.oracle == "predictor":
        from scheduler.oracles.learning import CorrectedOracle

        return CorrectedOracle.load(), truth  # a fresh one per run: it learns from this run's jobs only
    if req.oracle == "predictor-cold":
        from scheduler.oracles.predictor import PredictorOracle

        return PredictorOracle.load(), truth
    told = TableOracle(truth_table, mre=mre, seed=req.seed, per_shape=not req.survey)
    return told, truth


def run_simulations(
    req: SimulationRequest,
    *,
    on_progress: Callable[[str, int, int], None] | None = None,
) -> SimulationOutcome:
    """Run every (policy, MRE) of ``req`` on the same workload; see the module docstring."""
    from perfmodel.truth import GroundTruth

    req.validate()
    plan = req.run_plan()
    policies, spec_text = _build_policies(req, plan)
    spec = resolve_cluster(req)
    nodes = spec_to_nodes(spec)
    for name, policy in policies.items():
        try:
            check_policy_type_order(policy, (n.gpu_type for n in nodes))
        except ConfigError as exc:
            raise ConfigError(f"policy spec {spec_text[name]!r}: {exc}") from None
    trace = load_trace(req.trace)
    rows: Sequence[Any] = trace.jobs[: req.max_jobs] if req.max_jobs else trace.jobs
    cluster_gpus = spec.total_gpus
    truth_table = GroundTruth.load()
    fitting = [r for r in rows if r.num_gpus <= cluster_gpus]
    scaled, scaling = rescale_load(fitting, cluster_gpus, req.load)
    workload = _build_workload(req, spec, scaled, truth_table)
    queue_of = {j.name: j.queue for j in workload.jobs}
    dropped = len(rows) - len(fitting)
    report = _report_header(req, trace, spec, len(rows), dropped, scaling, workload)
    runs: list[tuple[str, EngineResult]] = []
    runs_of: dict[str, int] = {}
    for name, _ in plan:
        runs_of[name] = runs_of.get(name, 0) + 1
    for name, mre in plan:
        label = name if runs_of[name] == 1 or math.isnan(mre) else f"{name}-mre{mre:g}"
        progress = _Relay(on_progress, label) if on_progress is not None else None
        result = _run_engine(req, nodes, spec, workload, policies[name], truth_table, mre, progress)
        row = summarize(
            result,
            policy=spec_text[name],
            mre=None if math.isnan(mre) else mre,
            cluster=spec.name,
            trace=trace.name,
            load=req.load if req.load is not None else "raw",
        )
        if spec.queues:
            row["queues"] = per_queue(result, queue_of, {q.name: q.weight for q in spec.queues})
        report["results"].append(row)
        runs.append((label, result))
        log.info("simulation run done", extra={"run": label, "wall_s": result.wall_s})
    return SimulationOutcome(report=report, runs=runs)


def _build_policies(
    req: SimulationRequest, plan: Sequence[tuple[str, float]]
) -> tuple[dict[str, Policy], dict[str, str]]:
    """One policy per spec of the plan, and the canonical spec string each run is reported under."""
    from scheduler.policies import make_policy_from_spec, parse_policy_spec

    policies: dict[str, Policy] = {}
    spec_text: dict[str, str] = {}
    for name, _ in plan:
        if name not in policies:
            pspec = parse_policy_spec(name)
            policies[name] = make_policy_from_spec(pspec, req.policy_configs.get(pspec.name))
            spec_text[name] = pspec.text
    return policies, spec_text


def _build_workload(
    req: SimulationRequest, spec: ClusterSpec, scaled: Sequence[TraceJob], truth_table: Any
) -> Workload:
    """The jobs every run replays, made from the (load-scaled) trace rows; with queues in the cluster
    spec, tenants from the trace (group = Philly's virtual cluster, else user) join queues.

    Durations are calibrated on the reference type's largest servers at their declared network (the
    fastest, if its pools differ): the trace is taken as run on that pool of this cluster, so a job on its
    traced GPUs there runs its traced duration under the network-aware truth, and every other placement
    (another type, or the same type behind a slower link) is faster or slower by the truth's ratio. A
    cluster without the reference type calibrates at the measured links."""
    ref_pools = [p for p in spec.pools if p.gpu_type == req.reference_gpu]
    ref_nodes = [p.gpus_per_node for p in ref_pools]
    workload = build_workload(
        scaled,
        truth_table,
        WorkloadOptions(
            seed=req.seed,
            reference_gpu=req.reference_gpu,
            reference_node_gpus=max(ref_nodes) if ref_nodes else 8,
            reference_network_gbps=max((p.network_gbps for p in ref_pools), default=None),
            elastic=req.elastic,
            deadline_slack=req.deadline_slack,
        ),
    )
    if spec.queues:
        workload = replace(
            workload, jobs=tuple(replace(j, queue=spec.queue_for(j.queue, j.user)) for j in workload.jobs)
        )
    return workload


def _report_header(
    req: SimulationRequest,
    trace: Trace,
    spec: ClusterSpec,
    trace_jobs: int,
    dropped: int,
    scaling: LoadScaling,
    workload: Workload,
) -> dict[str, Any]:
    """The report's description of the trace, cluster, load and semantics, with no results yet."""
    return {
        "trace": trace.name,
        "trace_source": trace.source,
        "trace_jobs": trace_jobs,
        "jobs_dropped_too_large": dropped,
        "cluster": spec.name,
        "cluster_gpus": spec.total_gpus,
        "cluster_gpu_types": list(spec.gpu_types()),
        "load": {
            "mode": "raw" if req.load is None else "scaled",
            "target": req.load,
            "raw_offered_load": scaling.raw_load,
            "interarrival_factor": scaling.factor,
            "definition": "sum(num_gpus x duration) / (cluster GPUs x arrival span)",
        },
        "semantics": (
            "survey: event-driven (arrival, completion, LAS threshold), no restart cost, one error per job"
            if req.survey
            else f"rounds on events plus every {req.round_seconds:g} s while jobs wait"
        ),
        "round_seconds": 0.0 if req.survey else req.round_seconds,
        "restart_cost_s": 0.0 if req.survey else req.restart_cost_s,
        "seed": req.seed,
        "reference_gpu": req.reference_gpu,
        "oracle": req.oracle,
        "elastic_jobs": req.elastic,
        "model_assignment": (
            f"the trace has no model information: each job's (model, dataset, batch size) was drawn with "
            f"seed {req.seed} from the ground-truth catalogue (as Gavel does), and its work set so that it "
            f"runs for its traced duration on {req.reference_gpu}"
            if workload.models_assigned
            else "models from the trace"
        ),
        "model_mix": workload.model_mix,
        "results": [],
    }


def _run_engine(
    req: SimulationRequest,
    nodes: Sequence[Node],
    spec: ClusterSpec,
    workload: Workload,
    policy: Policy,
    truth_table: Any,
    mre: float,
    progress: _Relay | None,
) -> EngineResult:
    """One engine run of ``policy`` on the workload, its oracle told with ``mre`` injected error."""
    from scheduler.core.round import run_round

    told, truth = _make_oracles(req, truth_table, mre)
    if req.survey:
        truth = TraceDurationTruth(truth, workload.ideal_durations, req.reference_gpu)
    cfg = EngineConfig(
        round_seconds=0.0 if req.survey else req.round_seconds,
        restart_cost_s=0.0 if req.survey else req.restart_cost_s,
        resize_cost_s=0.0 if req.survey else req.restart_cost_s,
        wake_thresholds_gpu_s=las_thresholds_gpu_s(policy),
        # the incremental rounds ask the oracle per job, not per round: only for the table oracle,
        # whose answers do not depend on the batch
        incremental=req.incremental and req.oracle == "table",
    )
    engine = Engine(
        nodes,
        workload.jobs,
        policy,
        told,
        truth,
        cfg,
        run_round=run_round,
        ideal_durations=workload.ideal_durations,
        on_progress=progress,
        queues=spec.queues,
    )
    return engine.run()
