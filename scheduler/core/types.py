"""Core data types of perfsched: GPU nodes, training jobs, allocations and the cluster snapshot.

Pure: frozen, slotted dataclasses with no I/O, no clock and no Kubernetes types. The operator, the
extender and the simulator all convert their inputs into these types once (``scheduler.k8s`` for the
API, ``scheduler.sim`` for traces) and every policy and placement decision works on them.

Units used throughout:
- time is in seconds on the snapshot's clock (``ClusterSnapshot.now``); the simulator's clock starts at 0,
  the operator's is Unix time;
- work is in the job's ``work_unit`` (iterations or samples); throughput is work units per second of the
  whole job (all replicas together);
- attained service is GPU-seconds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from scheduler.core.queues import QueueSpec

if TYPE_CHECKING:
    from perfmodel.profile import OperatorProfile


class WorkUnit(StrEnum):
    """What a job's declared work counts."""

    ITERATIONS = "iterations"
    SAMPLES = "samples"


class Interconnect(StrEnum):
    """GPU-to-GPU link inside one node."""

    NVLINK = "nvlink"
    PCIE = "pcie"


@dataclass(frozen=True, slots=True)
class Node:
    """A GPU node as the scheduler sees it.

    ``gpu_type`` is the canonical type (``perfmodel.gpus`` maps product labels to it, e.g. ``V100``);
    ``gpu_product`` keeps the raw ``nvidia.com/gpu.product`` label. ``gpus`` is the allocatable count;
    ``gpus_external`` counts GPUs held by pods perfsched does not manage (they are never ours to give).
    ``nvlink_domain`` names the set of GPUs joined by NVLink/NVSwitch; empty means the node itself is one
    domain when ``interconnect`` is NVLink, and no domain when it is PCIe.
    ``gpu_api`` is how the GPUs are published: "" for the device plugin's extended resource, ``"dra"``
    for DRA devices in ResourceSlices (``gpus`` then counts the healthy ones). ``unavailable`` says why
    a node that is not ``schedulable`` takes no new work when that is not a cordon (a node condition).
    """

    name: str
    gpu_type: str
    gpus: int
    gpu_product: str = ""
    gpus_external: int = 0
    zone: str = ""
    rack: str = ""
    nvlink_domain: str = ""
    interconnect: Interconnect = Interconnect.NVLINK
    network_gbps: float = 100.0
    schedulable: bool = True
    gpu_api: str = ""
    unavailable: str = ""

    @property
    def capacity_for_jobs(self) -> int:
        """GPUs perfsched may hand out on this node (allocatable minus external use, never negative)."""
        if not self.schedulable:
            return 0
        return max(0, self.gpus - self.gpus_external)


@dataclass(frozen=True, slots=True)
class Job:
    """A training job: what it asks for, what it has done, and the facts policies rank it by.

    ``name`` is unique in a snapshot (``namespace/name`` for TrainingJobs). A job is elastic when
    ``min_replicas < max_replicas`` and ``elastic`` is true; rigid jobs always run with ``max_replicas``.
    ``model`` is a zoo name (``perfmodel.zoo``); ``params`` / ``flops_per_sample`` may replace it.
    LLM jobs add ``sequence_length`` (tokens per sample; None = the zoo model's), ``sharding`` (``ddp``,
    ``fsdp``, ``tp<N>xpp<M>``; empty = fsdp), ``micro_batch_size`` (None = the per-replica batch) and
    ``activation_checkpointing``; they decide the job's memory per GPU (``MemoryFit``).
    ``deadline`` is absolute time on the snapshot clock. An empty ``allowed_gpu_types`` allows any type.
    ``total_work`` and ``progress`` are in ``work_unit``; ``attained_service`` is GPU-seconds received so far.
    ``checkpoint_progress`` is the progress saved at the last checkpoint: what survives a restart.
    ``observed_throughput`` is what a running job was measured to make on its current allocation (work
    units/s, all replicas; the operator's progress reports, the simulator's true rate), None when not
    running or not yet measured: policies price moves of a running job by it as well as by a prediction.
    """

    name: str
    submit_time: float
    total_work: float
    gpus_per_replica: int = 1
    min_replicas: int = 1
    max_replicas: int = 1
    elastic: bool = False
    model: str = ""
    dataset: str = ""
    batch_size: int = 0
    precision: str = "fp32"
    params: float | None = None
    flops_per_sample: float | None = None
    work_unit: WorkUnit = WorkUnit.ITERATIONS
    progress: float = 0.0
    checkpoint_progress: float = 0.0
    priority: int = 0
    deadline: float | None = None
    allowed_gpu_types: frozenset[str] = field(default_factory=frozenset)
    preemptible: bool = True
    queue: str = ""
    attained_service: float = 0.0
    restarts: int = 0
    last_change_time: float | None = None
    user: str = ""
    sequence_length: int | None = None
    sharding: str = ""
    micro_batch_size: int | None = None
    activation_checkpointing: bool = False
    observed_throughput: float | None = None
    #: the operator profile of ``spec.modelProfile`` (``perfmodel.profile.OperatorProfile``), None without
    #: one; not part of a job's identity (equality, hash)
    model_profile: OperatorProfile | None = field(default=None, compare=False)

    @property
    def remaining_work(self) -> float:
        return max(0.0, self.total_work - self.progress)

    @property
    def is_elastic(self) -> bool:
        return self.elastic and self.min_replicas < self.max_replicas

    @property
    def min_gpus(self) -> int:
        return (self.min_replicas if self.is_elastic else self.max_replicas) * self.gpus_per_replica

    @property
    def max_gpus(self) -> int:
        return self.max_replicas * self.gpus_per_replica

    def allows(self, gpu_type: str) -> bool:
        return not self.allowed_gpu_types or gpu_type in self.allowed_gpu_types


@dataclass(frozen=True, slots=True)
class Allocation:
    """Where a job's gang runs: one GPU type, ``replicas`` pods of ``gpus_per_replica`` GPUs each.

    ``replicas_per_node`` lists ``(node name, replicas on that node)`` sorted by node name, so two
    allocations of the same placement compare equal.
    """

    job: str
    gpu_type: str
    gpus_per_replica: int
    replicas_per_node: tuple[tuple[str, int], ...]

    @staticmethod
    def of(job: str, gpu_type: str, gpus_per_replica: int, per_node: Mapping[str, int]) -> Allocation:
        items = tuple(sorted((n, r) for n, r in per_node.items() if r > 0))
        return Allocation(job, gpu_type, gpus_per_replica, items)

    @property
    def replicas(self) -> int:
        return sum(r for _, r in self.replicas_per_node)

    @property
    def total_gpus(self) -> int:
        return self.replicas * self.gpus_per_replica

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.replicas_per_node)

    @property
    def num_nodes(self) -> int:
        return len(self.replicas_per_node)

    def gpus_on(self, node: str) -> int:
        for n, r in self.replicas_per_node:
            if n == node:
                return r * self.gpus_per_replica
        return 0


@dataclass(frozen=True, slots=True)
class PlacementShape:
    """The hardware side of a throughput question: what the predictor needs to know about a placement.

    ``gpus_per_node`` is the largest number of the job's GPUs on one node; ``network_gbps`` and
    ``interconnect`` describe the slowest link the gang's gradient sync crosses.
    """

    gpu_type: str
    num_gpus: int
    num_nodes: int = 1
    gpus_per_node: int = 0
    interconnect: Interconnect = Interconnect.NVLINK
    network_gbps: float = 100.0

    def __post_init__(self) -> None:
        if self.gpus_per_node == 0:
            object.__setattr__(self, "gpus_per_node", -(-self.num_gpus // max(1, self.num_nodes)))


@dataclass(frozen=True, slots=True)
class MemoryFit:
    """Whether a job fits in GPU memory on a placement: ``need_gib`` predicted peak per GPU, ``have_gib``
    what one of its GPUs has, and ``message`` the verdict in words a person can act on ("needs ~52 GiB
    per GPU at micro-batch 8, ...; T4 has 16: does not fit")."""

    fits: bool
    need_gib: float
    have_gib: float
    message: str


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """Everything a policy may look at: the time, the nodes and what runs where right now.

    ``allocations`` maps job name to its current allocation (jobs not in it are not running).
    ``queues`` are the tenant queues with their GPU quotas (``scheduler.core.queues``); empty means no
    quotas at all (every job is scheduled as if the cluster had one tenant).
    ``restart_cost_s`` is what restarting a running job elsewhere costs in seconds (the planner's
    ``RoundCosts.restart_cost_s``; ``run_round`` fills it in), so policies can price a move against it.
    """

    now: float
    nodes: tuple[Node, ...]
    allocations: Mapping[str, Allocation] = field(default_factory=dict)
    queues: tuple[QueueSpec, ...] = ()
    restart_cost_s: float = 0.0

    def node_map(self) -> dict[str, Node]:
        return {n.name: n for n in self.nodes}

    def used_by_node(self, exclude: Iterable[str] = ()) -> dict[str, int]:
        """GPUs held by current allocations on each node, leaving out the jobs in ``exclude``."""
        skip = set(exclude)
        used: dict[str, int] = {}
        for job, alloc in self.allocations.items():
            if job in skip:
                continue
            for node, replicas in alloc.replicas_per_node:
                used[node] = used.get(node, 0) + replicas * alloc.gpus_per_replica
        return used

    def free_by_node(self, exclude: Iterable[str] = ()) -> dict[str, int]:
        """Free GPUs per node (capacity for jobs minus current allocations not in ``exclude``)."""
        used = self.used_by_node(exclude)
        return {n.name: max(0, n.capacity_for_jobs - used.get(n.name, 0)) for n in self.nodes}

    @property
    def total_gpus(self) -> int:
        return sum(n.capacity_for_jobs for n in self.nodes)

    def gpu_types(self) -> tuple[str, ...]:
        return tuple(sorted({n.gpu_type for n in self.nodes}))
