"""Turning trace rows into core ``Job``s: model assignment, work calibration, elasticity and deadlines.

Traces such as Philly record GPUs and durations but not what ran. Like Gavel, each such job is given a
(model, dataset, batch size) drawn with the seed from the ground-truth catalogue: first a model
uniformly among the models measured on the reference GPU type, then one of that model's measured
configurations uniformly (so a model measured at fifty batch sizes is not fifty times likelier). Its
work is ``duration x truth(reference type, GPUs, compact nodes)`` iterations, so on the reference type
and its requested GPU count the job runs exactly as long as the trace says. Pure given its inputs.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from scheduler.core.errors import ConfigError
from scheduler.core.protocols import MeasuredThroughput, ThroughputOracle
from scheduler.core.types import Job, PlacementShape, WorkUnit
from scheduler.sim.traces import TraceJob

log = logging.getLogger(__name__)


class Catalogue(MeasuredThroughput, Protocol):
    """Measured throughput and the list of what was measured (``perfmodel.truth.GroundTruth``): each entry
    has ``model``, ``dataset``, ``batch_size`` and the ``gpu_types`` it was measured on."""

    def catalogue(self) -> Sequence[Any]: ...


@dataclass(frozen=True, slots=True)
class WorkloadOptions:
    """How trace rows become jobs.

    ``reference_gpu``: the GPU type trace durations are taken to be measured on; ``reference_node_gpus``:
    GPUs per node of that type (a g-GPU job is calibrated on ceil(g / it) nodes); ``reference_network_gbps``:
    the network between those nodes, so that a job spanning nodes runs its traced duration on the
    reference type's own servers when the truth honours the placement's network (None: the truth's
    measured links). ``elastic``: jobs may
    run on 1 .. ``elastic_max_factor`` x their traced GPUs. ``deadline_slack``: when set, each job gets the
    deadline submit + slack x trace duration (ElasticFlow-style), else no deadline.
    """

    seed: int = 0
    reference_gpu: str = "V100"
    reference_node_gpus: int = 8
    reference_network_gbps: float | None = None
    elastic: bool = False
    elastic_max_factor: int = 2
    deadline_slack: float | None = None


@dataclass(frozen=True, slots=True)
class Workload:
    """Jobs ready for the engine, their ideal (trace) durations and how models were assigned."""

    jobs: tuple[Job, ...]
    ideal_durations: dict[str, float]
    models_assigned: bool
    model_mix: dict[str, int]
    dropped: tuple[str, ...] = ()


def _entry(e: Any) -> tuple[str, str, int, tuple[str, ...]]:
    if isinstance(e, tuple):
        return str(e[0]), str(e[1]), int(e[2]), tuple(e[3]) if len(e) > 3 else ()
    return str(e.model), str(e.dataset), int(e.batch_size), tuple(getattr(e, "gpu_types", ()))


def build_workload(
    trace_jobs: Sequence[TraceJob], truth: Catalogue, options: WorkloadOptions, *, max_gpus: int | None = None
) -> Workload:
    """Jobs for ``trace_jobs``; jobs asking for more than ``max_gpus`` GPUs are dropped (and listed)."""
    ref = options.reference_gpu
    entries = [_entry(e) for e in truth.catalogue()]
    on_ref = [e for e in entries if not e[3] or ref in e[3]]
    by_model: dict[str, list[tuple[str, str, int]]] = {}
    for model, dataset, bs, _ in on_ref:
        by_model.setdefault(model, []).append((model, dataset, bs))
    models = sorted(by_model)
    rng = random.Random(options.seed)
    jobs: list[Job] = []
    ideal: dict[str, float] = {}
    mix: dict[str, int] = {}
    dropped: list[str] = []
    assigned = False
    rates: dict[tuple[str, int, int, int, str, float | None], float | None] = {}
    for tj in trace_jobs:
        g = tj.num_gpus
        if max_gpus is not None and g > max_gpus:
            dropped.append(tj.job_id)
            continue
        nodes = max(1, -(-g // max(1, options.reference_node_gpus)))
        if tj.model and tj.batch_size > 0:
            model, dataset, bs = tj.model, "", tj.batch_size
        else:
            if not models:
                raise ConfigError(f"throughput catalogue has no configuration measured on {ref}")
            assigned = True
            # ``choice`` draws ``seq[randrange(len(seq))]``, the same numbers, with less work per call
            model = rng.choice(models)
            model, dataset, bs = rng.choice(by_model[model])
        gbps = options.reference_network_gbps if nodes > 1 else None
        # the catalogue's answer depends on the configuration only, and jobs share a few hundred of them
        key = (model, bs, g, nodes, dataset, gbps)
        ips = rates.get(key, 0.0)
        if ips == 0.0:
            ips = rates[key] = truth.throughput(model, bs, ref, g, nodes, dataset, network_gbps=gbps)
        if ips is None or ips <= 0:
            raise ConfigError(
                f"job {tj.job_id}: no throughput for model {model!r} batch {bs} on {g} x {ref}; "
                "cannot turn its duration into work"
            )
        replicas_max = g * options.elastic_max_factor if options.elastic else g
        job = Job(
            name=tj.job_id,
            submit_time=tj.submit_time,
            total_work=tj.duration * ips,
            gpus_per_replica=1,
            min_replicas=1 if options.elastic else g,
            max_replicas=replicas_max,
            elastic=options.elastic,
            model=model,
            dataset=dataset,
            batch_size=bs,
            work_unit=WorkUnit.ITERATIONS,
            deadline=(
                tj.submit_time + options.deadline_slack * tj.duration
                if options.deadline_slack is not None
                else None
            ),
            user=tj.user,
            queue=tj.group,
        )
        jobs.append(job)
        ideal[tj.job_id] = tj.duration
        mix[model] = mix.get(model, 0) + 1
    if dropped:
        log.info("dropped jobs larger than the cluster", extra={"count": len(dropped), "max_gpus": max_gpus})
    return Workload(tuple(jobs), ideal, assigned, dict(sorted(mix.items())), tuple(dropped))


class TraceDurationTruth:
    """Truth for the survey's semantics: a job on its traced GPU count runs exactly its traced duration.

    Wherever the placement puts the gang (one node or several), a rigid job asking for ``g`` GPUs
    progresses at ``total_work / duration``; any other shape (an elastic size, another GPU type) is
    answered by ``inner``. The survey's simulator does not model placement, so neither does this truth.
    """

    def __init__(
        self, inner: ThroughputOracle, ideal_durations: Mapping[str, float], reference_gpu: str
    ) -> None:
        self.inner = inner
        self.ideal = ideal_durations
        self.reference_gpu = reference_gpu

    def throughput(self, queries: Sequence[tuple[Job, PlacementShape]]) -> list[float]:
        out = [0.0] * len(queries)
        rest: list[int] = []
        for i, (job, shape) in enumerate(queries):
            d = self.ideal.get(job.name)
            if d and shape.gpu_type == self.reference_gpu and shape.num_gpus == job.max_gpus:
                out[i] = job.total_work / d
            else:
                rest.append(i)
        if rest:
            for i, v in zip(rest, self.inner.throughput([queries[i] for i in rest]), strict=True):
                out[i] = v
        return out
