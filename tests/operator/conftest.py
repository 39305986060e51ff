"""Shared pieces of the operator unit tests: a fake clock, API objects, scripted policy, recording oracle.

The fake API (``scheduler.k8s.fakeapi.FakeKubeApi``) plays the API server; the tests play kube-scheduler
(``bind_as_planned``), kubelet (``run_all_bound``, ``set_pod_phase``, ``finish_deletions``) and the
workers (``report_progress``). ``ScriptedPolicy`` is a test fake that returns the allocation the test
wants for each job, so every lifecycle transition can be driven exactly; the real policies are used too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from scheduler.core.decisions import Decision
from scheduler.core.protocols import ThroughputOracle
from scheduler.core.round import RoundCosts
from scheduler.core.types import Allocation, ClusterSnapshot, Job, PlacementShape
from scheduler.k8s.fakeapi import FakeKubeApi
from scheduler.operator.reconcile import Operator, OperatorConfig
from scheduler.policies import make_policy

T0 = 1_800_000_000.0


class FakeClock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def now(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt


PRODUCTS = {"A100": "A100-SXM4-40GB", "V100": "Tesla-V100-SXM2-16GB", "H100": "NVIDIA-H100-80GB-HBM3"}


def gpu_node(name: str, gpus: int = 8, gpu_type: str = "A100", rack: str = "r1") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {
                "nvidia.com/gpu.product": PRODUCTS.get(gpu_type, gpu_type),
                "perfsched.dev/rack": rack,
            },
        },
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}, "capacity": {"nvidia.com/gpu": str(gpus)}},
    }


def trainingjob(name: str, ns: str = "ml", **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "model": "resnet50",
        "batchSize": 256,
        "work": {"iterations": 1000},
        "replicas": {"min": 1, "max": 2, "gpusPerReplica": 2},
        "checkpointGraceSeconds": 20,
        "template": {"spec": {"containers": [{"name": "worker", "image": "trainer:1"}]}},
    }
    base.update(spec)
    return {"metadata": {"name": name, "namespace": ns, "generation": 1}, "spec": base}


@dataclass
class ScriptedPolicy:
    """Test fake: each job gets ``want[job]`` (None = wait); jobs not in ``want`` keep what they have."""

    want: dict[str, Allocation | None] = field(default_factory=dict)
    name: str = "scripted"
    seen: list[tuple[ClusterSnapshot, tuple[Job, ...]]] = field(default_factory=list)

    def allocate(
        self, snapshot: ClusterSnapshot, jobs: Sequence[Job], oracle: ThroughputOracle
    ) -> Mapping[str, Decision]:
        self.seen.append((snapshot, tuple(jobs)))
        out = {}
        for j in jobs:
            alloc = self.want[j.name] if j.name in self.want else snapshot.allocations.get(j.name)
            out[j.name] = Decision(j.name, alloc, "scripted by the test")
        return out


@dataclass
class RecordingOracle:
    """Test fake oracle: 10 work units/s per GPU; records what the operator reports as observed."""

    per_gpu: float = 10.0
    observed: list[tuple[str, str, float]] = field(default_factory=list)

    def throughput(self, queries: Sequence[tuple[Job, PlacementShape]]) -> list[float]:
        return [self.per_gpu * s.num_gpus for _, s in queries]

    def observe(self, job: Job, shape: PlacementShape, throughput: float) -> None:
        self.observed.append((job.name, shape.gpu_type, throughput))


def alloc(job: str, gpu_type: str, gpr: int, **per_node: int) -> Allocation:
    return Allocation.of(job, gpu_type, gpr, per_node)


@dataclass
class Harness:
    api: FakeKubeApi
    clock: FakeClock
    oracle: RecordingOracle
    policy: Any
    config: OperatorConfig
    leader: list[bool]

    def operator(self) -> Operator:
        return Operator(
            self.api,
            self.policy,
            self.oracle,
            config=self.config,
            clock=self.clock,
            may_act=lambda: self.leader[0],
            known_model=lambda m: m in {"resnet50", "bert", "gpt2"},
        )

    def settle_pods(self) -> None:
        """Play kube-scheduler and kubelet: bind every new pod where planned and run it."""
        self.api.bind_as_planned()
        self.api.run_all_bound()


def make_harness(policy: Any = None, **config: Any) -> Harness:
    clock = FakeClock()
    api = FakeKubeApi(clock.now)
    cfg = OperatorConfig(
        costs=config.pop("costs", RoundCosts()),
        backoff_limit=config.pop("backoff_limit", 2),
        gang_start_timeout_s=config.pop("gang_start_timeout_s", 300.0),
        **config,
    )
    return Harness(api, clock, RecordingOracle(), policy or make_policy("fifo"), cfg, [True])


@pytest.fixture
def h() -> Harness:
    return make_harness()
