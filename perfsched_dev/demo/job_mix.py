"""Demo workload: a slice of the shipped Philly sample, squeezed to minutes, as TrainingJob manifests.

Pure. The Philly trace records arrivals, GPU counts and durations (hours); the demo keeps their shape but
rescales arrivals into the first part of the run and durations so the median job runs
``target_median_s`` seconds (clamped). Models, batch sizes and work come from the simulator's workload
builder (``scheduler.sim.trace_jobs.build_workload``), so a demo job is the same job the simulator would
replay: on its traced GPU count of the reference type it runs exactly its (rescaled) duration.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from scheduler.core.errors import ConfigError
from scheduler.core.types import Job
from scheduler.names import ANNOTATION_TRACE_JOB, API_VERSION, TRAININGJOB_KIND
from scheduler.sim.traces import TraceJob

#: Namespace the demo's TrainingJobs live in.
NAMESPACE = "perfsched-demo"


@dataclass(frozen=True, slots=True)
class DemoShape:
    """How the trace is squeezed: arrivals within ``arrival_window_s``, durations around a median."""

    jobs: int = 16
    arrival_window_s: float = 60.0
    target_median_s: float = 40.0
    min_run_s: float = 15.0
    max_run_s: float = 120.0
    max_gpus: int = 8

    def __post_init__(self) -> None:
        if self.jobs < 1:
            raise ConfigError(f"--jobs must be >= 1, got {self.jobs}")
        if not 0 < self.min_run_s <= self.target_median_s <= self.max_run_s:
            raise ConfigError(
                "demo durations need 0 < min_run_s <= target_median_s <= max_run_s, got "
                f"{self.min_run_s}, {self.target_median_s}, {self.max_run_s}"
            )


def pick_jobs(trace_jobs: Sequence[TraceJob], shape: DemoShape) -> list[TraceJob]:
    """The first ``shape.jobs`` trace jobs that fit ``max_gpus``, with arrivals and durations rescaled.

    Arrivals keep their order and relative gaps: ``(t - t0) * window / span``. Durations are multiplied
    by ``target_median / median(durations)`` then clamped to ``[min_run_s, max_run_s]``.
    """
    chosen = [j for j in trace_jobs if 0 < j.num_gpus <= shape.max_gpus and j.duration > 0][: shape.jobs]
    if not chosen:
        raise ConfigError(f"the trace has no job with 1..{shape.max_gpus} GPUs and a positive duration")
    t0 = chosen[0].submit_time
    span = chosen[-1].submit_time - t0
    time_scale = shape.arrival_window_s / span if span > 0 else 0.0
    median = statistics.median(j.duration for j in chosen)
    dur_scale = shape.target_median_s / median
    return [
        replace(
            j,
            submit_time=round((j.submit_time - t0) * time_scale, 3),
            duration=round(min(shape.max_run_s, max(shape.min_run_s, j.duration * dur_scale)), 3),
        )
        for j in chosen
    ]


def k8s_name(job_id: str) -> str:
    """A DNS-1123 name for a trace job id (``philly-<id>``, lower case, 40 characters at most)."""
    cleaned = "".join(c if c.isalnum() else "-" for c in job_id.lower()).strip("-")
    return f"tj-{cleaned}"[:40].rstrip("-")


def trainingjob_manifest(
    job: Job, *, namespace: str = NAMESPACE, image: str = "perfsched-emulated"
) -> dict[str, Any]:
    """The TrainingJob a user would submit for ``job`` (work rounded up to whole iterations)."""
    spec: dict[str, Any] = {
        "model": job.model,
        "batchSize": job.batch_size,
        "precision": job.precision,
        "work": {"iterations": max(1, math.ceil(job.total_work))},
        "replicas": {
            "min": job.min_replicas,
            "max": job.max_replicas,
            "gpusPerReplica": job.gpus_per_replica,
        },
        "elastic": job.elastic,
        "preemptible": job.preemptible,
        "checkpointGraceSeconds": 5,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "worker", "image": image, "command": ["train"]}],
            }
        },
    }
    if job.dataset:
        spec["dataset"] = job.dataset
    return {
        "apiVersion": API_VERSION,
        "kind": TRAININGJOB_KIND,
        "metadata": {
            "name": k8s_name(job.name),
            "namespace": namespace,
            "labels": {"app.kubernetes.io/part-of": "perfsched-demo"},
            "annotations": {ANNOTATION_TRACE_JOB: job.name},
        },
        "spec": spec,
    }
