"""Policies never start a job where it would not fit in GPU memory; a job that fits nowhere says why.

A fake throughput (``FakeOracle``) with the real memory model (``scheduler.oracles.memory.MemoryFitter``).
Cluster: two T4 nodes (16 GB each GPU, 8 GPUs) with the most free GPUs, and one 8 x H100 80GB node.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import pytest

from scheduler.core.decisions import ActionKind, Decision
from scheduler.core.protocols import MemoryOracle, ThroughputOracle
from scheduler.core.round import run_round
from scheduler.core.types import ClusterSnapshot, Job, MemoryFit, PlacementShape
from scheduler.oracles.memory import MemoryFitter
from scheduler.oracles.predictor import PredictorOracle
from scheduler.policies import make_policy
from scheduler.policies.base import allowed_types, type_infos
from tests.builders import FakeOracle, alloc, job, node, snapshot


@dataclass
class FitOracle(FakeOracle):
    """``FakeOracle`` throughput plus real memory fit."""

    fitter: MemoryFitter = field(default_factory=MemoryFitter)

    def memory_fit(self, queries: Sequence[tuple[Job, PlacementShape]]) -> list[MemoryFit | None]:
        return self.fitter.memory_fit(queries)


NODES = (
    node("t1").gpus(8, "T4").pcie().build(),
    node("t2").gpus(8, "T4").pcie().build(),
    node("h1").gpus(8, "H100").build(),
)


def llm(name: str, model: str, sharding: str, micro: int = 1, ac: bool = True, gpus: int = 8) -> Job:
    base = job(name).replicas(1).gpus_per_replica(gpus).work(1000).model(model, 64).build()
    return replace(
        base,
        precision="bf16",
        sequence_length=4096,
        sharding=sharding,
        micro_batch_size=micro,
        activation_checkpointing=ac,
    )


# Llama 3 8B, FSDP over 8 GPUs, micro-batch 1, checkpointing: 16 B x 8.03e9 / 8 = 15 GiB of states alone
# (+ the gathered working set and activations): over a T4's 16, well inside an H100's 80.
LLAMA_8B = llm("llama8b", "llama3-8b", "fsdp")
# Llama 3 70B with DDP: 16 B x 70.55e9 = 1,051 GiB on every GPU: fits nowhere.
LLAMA_70B_DDP = llm("llama70b", "llama3-70b", "ddp")


def test_allowed_types_drops_types_the_job_does_not_fit() -> None:
    infos = type_infos(snapshot(NODES))
    oracle = FitOracle()
    assert isinstance(oracle, MemoryOracle)
    assert allowed_types(LLAMA_8B, infos) == ("H100", "T4")  # without memory answers: what it allows
    assert allowed_types(LLAMA_8B, infos, oracle) == ("H100",)
    assert allowed_types(LLAMA_70B_DDP, infos, oracle) == ()
    # a small job fits both; an oracle without memory answers changes nothing
    cnn = job("cnn").replicas(1).gpus_per_replica(2).work(10).model("resnet50", 256).build()
    assert allowed_types(cnn, infos, oracle) == ("H100", "T4")
    assert allowed_types(LLAMA_8B, infos, FakeOracle()) == ("H100", "T4")


POLICIES = ["fifo", "las", "srsf", "ftf", "hetero", "elastic", "deadline"]


@pytest.mark.parametrize("policy", POLICIES)
def test_no_policy_starts_a_job_where_it_does_not_fit(policy: str) -> None:
    # the T4s are faster in the fake oracle's table and have more free GPUs: only memory keeps the LLM off
    # them (the core holds such a start back even when the policy does not know about memory)
    oracle = FitOracle(speed={"T4": 5.0, "H100": 1.0})
    res = run_round(snapshot(NODES), [LLAMA_8B], make_policy(policy), oracle)
    starts = [a for a in res.actions if a.kind is ActionKind.START]
    assert all(a.after is not None and a.after.gpu_type == "H100" for a in starts), (policy, starts)


@pytest.fixture(scope="module")
def predictor_oracle() -> PredictorOracle:
    return PredictorOracle.load()


@pytest.mark.parametrize("policy", POLICIES)
def test_with_the_real_oracle_every_policy_starts_the_llm_where_it_fits(
    policy: str, predictor_oracle: PredictorOracle
) -> None:
    # the real oracle answers 0 throughput where an LLM does not fit, and memory questions: the policy
    # itself picks the H100 node though the T4s have twice the free GPUs
    res = run_round(snapshot(NODES), [LLAMA_8B], make_policy(policy), predictor_oracle)
    starts = {a.job: a.after.gpu_type for a in res.actions if a.kind is ActionKind.START and a.after}
    assert starts == {"llama8b": "H100"}, (policy, res.decisions)


def test_a_job_that_fits_nowhere_waits_with_a_reason_naming_gpu_and_memory() -> None:
    res = run_round(snapshot(NODES), [LLAMA_70B_DDP], make_policy("fifo"), FitOracle())
    assert res.actions == ()
    why = res.waiting["llama70b"]
    assert not why.resolvable
    # the closest type is quoted: an H100 (80 GiB), short by the least
    assert why.reason.startswith("does not fit in GPU memory on any allowed GPU type: needs ~")
    assert "GiB per GPU at micro-batch 1, sequence 4096, ddp on 8 GPUs" in why.reason
    assert "H100-80GB-HBM3 has 80: does not fit" in why.reason


@dataclass
class Pinned:
    """Test fake policy that puts the jobs on the T4 nodes t1, t2 in turn, whatever they fit."""

    name: str = "pinned"

    def allocate(
        self, snapshot: ClusterSnapshot, jobs: Sequence[Job], oracle: ThroughputOracle
    ) -> dict[str, Decision]:
        return {
            j.name: Decision(j.name, alloc(j.name, "T4", 8, {f"t{i + 1}": 1}), "pinned")
            for i, j in enumerate(jobs)
        }


def test_the_core_holds_back_a_start_the_policy_decided_onto_too_small_gpus() -> None:
    cnn = job("cnn").replicas(1).gpus_per_replica(8).work(10).model("resnet50", 256).build()
    res = run_round(snapshot(NODES), [LLAMA_8B, cnn], Pinned(), FitOracle())
    assert [a.job for a in res.actions if a.kind is ActionKind.START] == ["cnn"]
    held = res.decisions["llama8b"]
    assert held.allocation is None
    assert held.reason.startswith("not started on 8 x T4: needs ~")
    assert "T4 has 16: does not fit" in held.reason


def test_bad_sharding_for_the_count_is_a_non_fit_with_perfmodels_message() -> None:
    bad = llm("tp", "llama3-8b", "tp4xpp4")  # 16-way model parallel on 8 GPUs
    fit = FitOracle().memory_fit([(bad, PlacementShape("H100", 8))])[0]
    assert fit is not None and not fit.fits
    assert fit.message.startswith(
        "sharding: tp4xpp4 splits the model over 16 GPUs; 8 GPUs are not a multiple"
    )


def test_a_cnn_job_with_a_sharding_is_still_scheduled_by_the_learned_model(
    predictor_oracle: PredictorOracle,
) -> None:
    cnn = replace(
        job("cnn").replicas(1).gpus_per_replica(4).work(10).model("resnet50", 256).build(), sharding="ddp"
    )
    (speed,) = predictor_oracle.throughput([(cnn, PlacementShape("T4", 4))])
    assert speed > 0
    res = run_round(snapshot(NODES), [cnn], make_policy("fifo"), predictor_oracle)
    assert [a.job for a in res.actions if a.kind is ActionKind.START] == ["cnn"]
