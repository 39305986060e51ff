"""Per-node fit checks: can one replica of a job go on this node, and if not, why (in words).

Pure. The extender's ``filter`` calls ``check_node`` for every candidate node of a pod; the reasons are
what a person reads in ``kubectl describe pod``. ``resolvable=False`` marks what waiting cannot fix
(wrong GPU type, a node smaller than one replica), mapping onto ``FailedAndUnresolvableNodes``.
"""

from __future__ import annotations

from collections.abc import Collection

from scheduler.core.decisions import Unschedulable
from scheduler.core.types import Job, Node
from scheduler.names import GPU_RESOURCE


def check_node(
    node: Node,
    free_gpus: int,
    *,
    gpus_per_replica: int,
    gpu_type: str | None = None,
    allowed_gpu_types: Collection[str] = (),
) -> Unschedulable | None:
    """Whether one replica of ``gpus_per_replica`` GPUs fits on ``node`` with ``free_gpus`` free.

    ``gpu_type`` is the type the round decided for the job (None: any type); ``allowed_gpu_types`` the
    job's own restriction (empty: any). Returns None when it fits.
    """
    resource = f"{GPU_RESOURCE} (DRA)" if node.gpu_api == "dra" else GPU_RESOURCE
    if node.capacity_for_jobs <= 0 and node.gpus <= 0:
        if node.gpu_api == "dra":  # every DRA GPU of the node is tainted: waiting may heal them
            return Unschedulable(f"perfsched: node {node.name} has no healthy {resource}")
        return Unschedulable(f"perfsched: node {node.name} has no {resource}", resolvable=False)
    if gpu_type is not None and node.gpu_type != gpu_type:
        return Unschedulable(
            f"perfsched: needs GPU type {gpu_type} (the round's decision), node has {node.gpu_type}",
            resolvable=False,
        )
    if allowed_gpu_types and node.gpu_type not in allowed_gpu_types:
        allowed = ", ".join(sorted(allowed_gpu_types))
        return Unschedulable(
            f"perfsched: job allows GPU types {allowed}, node has {node.gpu_type}", resolvable=False
        )
    if not node.schedulable:
        why = node.unavailable or "cordoned (unschedulable)"
        return Unschedulable(f"perfsched: node {node.name} is {why}")
    if node.gpus < gpus_per_replica:
        return Unschedulable(
            f"perfsched: needs {gpus_per_replica} {resource} per replica, "
            f"node has only {node.gpus} {'healthy ' if node.gpu_api == 'dra' else ''}in total",
            resolvable=node.gpu_api == "dra",  # a DRA GPU's taint may be lifted
        )
    if free_gpus < gpus_per_replica:
        return Unschedulable(
            f"perfsched: needs {gpus_per_replica} {resource} of type {node.gpu_type}, "
            f"node has {max(0, free_gpus)} free"
        )
    return None


def check_job_node(job: Job, node: Node, free_gpus: int, gpu_type: str | None = None) -> Unschedulable | None:
    """``check_node`` for one replica of ``job``, with its allowed GPU types."""
    return check_node(
        node,
        free_gpus,
        gpus_per_replica=job.gpus_per_replica,
        gpu_type=gpu_type,
        allowed_gpu_types=job.allowed_gpu_types,
    )
