"""The request's pod as the decisions see it: ``PodContext``, resolved once per request, and its signatures.

Shell-side logic without I/O, over the watch-fed ``ClusterCache`` (callers hold its lock). A pod is
*managed* when it asks for ``nvidia.com/gpu``; others pass through untouched (kube-scheduler only calls
the extender for pods that ask for a managed resource, and blocking a pod we have no opinion on would be
worse than letting it through). A managed pod's job is its TrainingJob (label ``perfsched.dev/job-name``);
a GPU pod without one is a one-replica job described by its optional ``perfsched.dev/model`` /
``perfsched.dev/batch-size`` annotations.

Signatures (the kube-scheduler framework's ``SignPod`` idea): two pods with the same signature get the
same verdict per node class (``filter_signature``) and the same score per node class
(``score_signature``), so the memo tables are keyed by them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduler.core.decisions import Unschedulable
from scheduler.core.node_fit import check_node
from scheduler.core.types import Job, Node
from scheduler.k8s.cache import ClusterCache
from scheduler.k8s.codec import PodInfo, decode_pod


@dataclass(slots=True)
class PodContext:
    """A pod of the request with everything the decisions need."""

    pod: PodInfo
    gpus: int
    job: Job | None
    job_problem: str
    gpu_type: str | None
    allowed: frozenset[str]
    gang_key: tuple[str, str] | None
    replicas: int = 1  # gang size (1 for a lone pod)
    #: node -> replicas of the gang already bound or assumed there (not this pod)
    placed: dict[str, int] = field(default_factory=dict)
    #: node -> unplaced gang replicas (incl. this pod) the operator planned there
    planned: dict[str, int] = field(default_factory=dict)
    #: node -> replicas of the gang the TrainingJob's status allocation puts there (this generation's plan)
    intent: dict[str, int] = field(default_factory=dict)

    @property
    def unplaced(self) -> int:
        return max(1, self.replicas - sum(self.placed.values()))

    @property
    def in_gang(self) -> bool:
        """Whether the pod's nodes depend on a gang plan (a lone pod's do not)."""
        return self.gang_key is not None and (self.replicas > 1 or bool(self.placed or self.planned))

    def fit_on(self, node: Node, free: int) -> Unschedulable | None:
        """Why one replica does not fit on ``node`` with ``free`` GPUs (the core's ``check_node``)."""
        return check_node(
            node, free, gpus_per_replica=self.gpus, gpu_type=self.gpu_type, allowed_gpu_types=self.allowed
        )

    def anchors(self, nodes: Mapping[str, Any]) -> list[str]:
        """The nodes locality is measured against: the gang's placed nodes, else the pod's planned node."""
        return [a for a in (list(self.placed) or [self.pod.planned_node]) if a and a in nodes]


def job_key(job: Job) -> tuple[Any, ...]:
    """What of a job the predictor reads."""
    return (job.name, job.model, job.dataset, job.batch_size, job.precision, job.params, job.flops_per_sample)


def filter_signature(ctx: PodContext, *, memory: bool = False) -> tuple[Any, ...]:
    """Pods alike in this get the same verdict on every node class (``check_node``'s pod inputs; with
    ``memory``, also what of the job and the gang's size its GPU memory depends on)."""
    if not memory or ctx.job is None:
        return (ctx.gpus, ctx.gpu_type, ctx.allowed)
    j = ctx.job
    mem = (j.model, j.batch_size, j.precision, j.params, j.sequence_length, j.sharding, j.micro_batch_size)
    return (ctx.gpus, ctx.gpu_type, ctx.allowed, ctx.replicas, *mem, j.activation_checkpointing)


def score_signature(ctx: PodContext, anchors: list[str]) -> tuple[Any, ...]:
    """Pods alike in this get the same score per node class (the job, its GPUs and its gang's state)."""
    return (
        job_key(ctx.job) if ctx.job is not None else None,
        ctx.gpus,
        ctx.unplaced,
        tuple(sorted(ctx.placed.items())),
        tuple(anchors),
    )


def pod_context(cache: ClusterCache, pod_obj: Mapping[str, Any]) -> PodContext:
    """Resolve the request's pod: GPU request, job, the operator's decision and the gang's state."""
    pod = decode_pod(pod_obj)
    job: Job | None = None
    problem = ""
    info = cache.jobs.get(pod.job) if pod.job else None
    if info is not None:
        job = info.job
        problem = info.problem
    elif not pod.job and pod.gpus > 0 and pod.model and pod.batch_size > 0:
        # a lone pod that names its model: an adopted job's pod says its gang's size (world size)
        job = Job(
            name=pod.key,
            submit_time=0.0,
            total_work=1.0,
            gpus_per_replica=pod.gpus,
            min_replicas=max(1, pod.world_size),
            max_replicas=max(1, pod.world_size),
            model=pod.model,
            batch_size=pod.batch_size,
        )
    ctx = PodContext(
        pod=pod,
        gpus=pod.gpus,
        job=job,
        job_problem=problem,
        gpu_type=pod.gpu_type or None,
        allowed=job.allowed_gpu_types if job is not None else frozenset(),
        gang_key=(pod.job, pod.generation) if pod.job else None,
    )
    if pod.job:
        _gang_state(cache, ctx)
    elif pod.world_size > 1:
        ctx.replicas = pod.world_size  # memory and throughput are of the whole gang (no gang plan)
    return ctx


def _gang_state(cache: ClusterCache, ctx: PodContext) -> None:
    """Fill the gang's size and where its other replicas are placed or planned."""
    pod = ctx.pod
    members = cache.gang(pod.job, pod.generation)
    seen = any(m.key == pod.key for m in members)
    replicas = max(1, len(members) if seen else len(members) + 1)
    # the gang's size as the operator wrote it on the pod: right even when the watch has not yet shown
    # the gang's other pods (or the TrainingJob) to this extender
    replicas = max(replicas, pod.world_size)
    info = cache.jobs.get(pod.job)
    alloc = info.status.allocation if info is not None else None
    same_generation = info is not None and str(info.status.gang_generation) == pod.generation
    if alloc is not None and (same_generation or not pod.generation):
        replicas = max(replicas, alloc.replicas)
        if same_generation and alloc.gpus_per_replica == pod.gpus:
            # the operator's plan as it wrote it before creating the pods: whole even while the watch
            # has not shown every pod of the gang yet
            ctx.intent = {n: r for n, r in alloc.replicas_per_node.items() if r > 0}
    ctx.replicas = replicas
    for m in members:
        if m.key == pod.key or m.terminal:
            continue
        where = cache.placed_node(m)
        if where:
            ctx.placed[where] = ctx.placed.get(where, 0) + 1
        elif m.planned_node:
            ctx.planned[m.planned_node] = ctx.planned.get(m.planned_node, 0) + 1
    if pod.planned_node:
        ctx.planned[pod.planned_node] = ctx.planned.get(pod.planned_node, 0) + 1
