"""Fluent builders for test nodes, jobs and snapshots, and a dict-backed fake throughput oracle.

Used by every test suite: ``node("n1").gpus(8, "A100").rack("r1").nvlink("d1").build()``,
``job("j1").replicas(1, 4).gpus_per_replica(2).work(1000).build()``, ``snapshot(nodes, now=0)``.
``FakeOracle`` answers from a table of per-GPU speeds (a test fake; the real oracles live in
``scheduler.oracles``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from scheduler.core.types import (
    Allocation,
    ClusterSnapshot,
    Interconnect,
    Job,
    Node,
    PlacementShape,
    WorkUnit,
)


class NodeBuilder:
    def __init__(self, name: str) -> None:
        self._kw: dict[str, Any] = {"name": name, "gpu_type": "V100", "gpus": 8}

    def gpus(self, count: int, gpu_type: str | None = None) -> NodeBuilder:
        self._kw["gpus"] = count
        if gpu_type is not None:
            self._kw["gpu_type"] = gpu_type
        return self

    def type(self, gpu_type: str) -> NodeBuilder:
        self._kw["gpu_type"] = gpu_type
        return self

    def rack(self, rack: str) -> NodeBuilder:
        self._kw["rack"] = rack
        return self

    def zone(self, zone: str) -> NodeBuilder:
        self._kw["zone"] = zone
        return self

    def nvlink(self, domain: str = "") -> NodeBuilder:
        self._kw["interconnect"] = Interconnect.NVLINK
        self._kw["nvlink_domain"] = domain
        return self

    def pcie(self) -> NodeBuilder:
        self._kw["interconnect"] = Interconnect.PCIE
        self._kw["nvlink_domain"] = ""
        return self

    def network(self, gbps: float) -> NodeBuilder:
        self._kw["network_gbps"] = gbps
        return self

    def external(self, gpus: int) -> NodeBuilder:
        self._kw["gpus_external"] = gpus
        return self

    def cordoned(self) -> NodeBuilder:
        self._kw["schedulable"] = False
        return self

    def build(self) -> Node:
        return Node(**self._kw)


class JobBuilder:
    def __init__(self, name: str) -> None:
        self._kw: dict[str, Any] = {"name": name, "submit_time": 0.0, "total_work": 1000.0}

    def replicas(self, lo: int, hi: int | None = None) -> JobBuilder:
        """``replicas(4)``: rigid 4; ``replicas(1, 4)``: elastic between 1 and 4."""
        self._kw["min_replicas"] = lo
        self._kw["max_replicas"] = lo if hi is None else hi
        self._kw["elastic"] = hi is not None and hi > lo
        return self

    def rigid(self) -> JobBuilder:
        self._kw["elastic"] = False
        return self

    def gpus_per_replica(self, gpus: int) -> JobBuilder:
        self._kw["gpus_per_replica"] = gpus
        return self

    def work(self, total: float, unit: WorkUnit = WorkUnit.ITERATIONS) -> JobBuilder:
        self._kw["total_work"] = total
        self._kw["work_unit"] = unit
        return self

    def submitted(self, t: float) -> JobBuilder:
        self._kw["submit_time"] = t
        return self

    def model(self, model: str, batch_size: int = 0) -> JobBuilder:
        self._kw["model"] = model
        if batch_size:
            self._kw["batch_size"] = batch_size
        return self

    def progress(self, done: float, checkpoint: float | None = None) -> JobBuilder:
        self._kw["progress"] = done
        self._kw["checkpoint_progress"] = done if checkpoint is None else checkpoint
        return self

    def attained(self, gpu_seconds: float) -> JobBuilder:
        self._kw["attained_service"] = gpu_seconds
        return self

    def priority(self, p: int) -> JobBuilder:
        self._kw["priority"] = p
        return self

    def deadline(self, t: float) -> JobBuilder:
        self._kw["deadline"] = t
        return self

    def allowed(self, *gpu_types: str) -> JobBuilder:
        self._kw["allowed_gpu_types"] = frozenset(gpu_types)
        return self

    def non_preemptible(self) -> JobBuilder:
        self._kw["preemptible"] = False
        return self

    def restarts(self, n: int) -> JobBuilder:
        self._kw["restarts"] = n
        return self

    def changed_at(self, t: float) -> JobBuilder:
        self._kw["last_change_time"] = t
        return self

    def build(self) -> Job:
        return Job(**self._kw)


def node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


def job(name: str) -> JobBuilder:
    return JobBuilder(name)


def alloc(job_name: str, gpu_type: str, gpus_per_replica: int, per_node: Mapping[str, int]) -> Allocation:
    return Allocation.of(job_name, gpu_type, gpus_per_replica, per_node)


def snapshot(
    nodes: Iterable[Node], now: float = 0.0, allocations: Iterable[Allocation] = ()
) -> ClusterSnapshot:
    return ClusterSnapshot(now=now, nodes=tuple(nodes), allocations={a.job: a for a in allocations})


def cluster(*pools: tuple[str, int, int], rack_size: int = 0) -> tuple[Node, ...]:
    """Nodes from pools ``(gpu_type, node_count, gpus_per_node)``, named ``<type>-<i>`` (zero padded)."""
    out: list[Node] = []
    for gpu_type, count, gpus in pools:
        for i in range(count):
            b = node(f"{gpu_type.lower()}-{i:03d}").gpus(gpus, gpu_type)
            if rack_size:
                b.rack(f"{gpu_type.lower()}-r{i // rack_size}")
            out.append(b.build())
    return tuple(out)


# Relative per-GPU speeds of the fake oracle (roughly the shape of Gavel's throughput table).
DEFAULT_SPEED: dict[str, float] = {"K80": 1.0, "P100": 2.0, "T4": 2.0, "V100": 3.0, "A100": 6.0, "H100": 10.0}


@dataclass
class FakeOracle:
    """Dict-backed ``ThroughputOracle`` for tests.

    Throughput of job J on k GPUs of type T = ``speed[(J.name, T)]`` (else ``speed[T]``, else 1.0)
    x ``k ** scaling`` (diminishing returns below 1) x ``cross_node_penalty`` when the gang spans nodes.
    A speed of 0 means "cannot run on that type". Counts its calls so tests can check batching.
    """

    speed: Mapping[Any, float] = field(default_factory=lambda: dict(DEFAULT_SPEED))
    scaling: float = 1.0
    cross_node_penalty: float = 1.0
    calls: int = 0
    queries: int = 0

    def rate(self, j: Job, gpu_type: str) -> float:
        if (j.name, gpu_type) in self.speed:
            return self.speed[(j.name, gpu_type)]
        return self.speed.get(gpu_type, 1.0)

    def throughput(self, queries: Sequence[tuple[Job, PlacementShape]]) -> list[float]:
        self.calls += 1
        self.queries += len(queries)
        out: list[float] = []
        for j, shape in queries:
            base = self.rate(j, shape.gpu_type) * shape.num_gpus**self.scaling
            out.append(base * (self.cross_node_penalty if shape.num_nodes > 1 else 1.0))
        return out


def with_(obj: Any, **changes: Any) -> Any:
    """``dataclasses.replace`` under a short name for tables."""
    return replace(obj, **changes)
