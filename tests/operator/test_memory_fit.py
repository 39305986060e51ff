"""A TrainingJob that fits in the GPU memory of no node waits Pending with a condition saying why.

The fake API plays the API server; the oracle is the operator tests' recording fake for throughput plus the
real memory model (``scheduler.oracles.memory.MemoryFitter``), as ``PredictorOracle`` combines them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from perfmodel.zoo import lookup_model
from scheduler.core.types import Job, MemoryFit, PlacementShape
from scheduler.operator.reconcile import Operator
from scheduler.oracles.memory import MemoryFitter
from tests.operator.conftest import Harness, RecordingOracle, gpu_node, make_harness, trainingjob


@dataclass
class FitRecordingOracle(RecordingOracle):
    fitter: MemoryFitter = field(default_factory=MemoryFitter)

    def memory_fit(self, queries: Sequence[tuple[Job, PlacementShape]]) -> list[MemoryFit | None]:
        return self.fitter.memory_fit(queries)


def operator(h: Harness) -> Operator:
    h.oracle = FitRecordingOracle()
    return Operator(
        h.api,
        h.policy,
        h.oracle,
        config=h.config,
        clock=h.clock,
        may_act=lambda: h.leader[0],
        known_model=lambda m: lookup_model(m) is not None,
    )


def llama(name: str, **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "model": "llama3-8b",
        "batchSize": 64,
        "precision": "bf16",
        "sequenceLength": 4096,
        "microBatchSize": 8,
        "replicas": {"min": 1, "max": 1, "gpusPerReplica": 4},
    }
    base.update(spec)
    return trainingjob(name, **base)


def admitted(h: Harness, name: str) -> tuple[str, dict[str, Any]]:
    st = h.api.status_of("ml", name)
    (c,) = [c for c in st["conditions"] if c["type"] == "Admitted"]
    return st["phase"], c


def test_llm_that_fits_no_gpu_waits_with_a_condition_naming_gpu_and_memory() -> None:
    h = make_harness()
    h.api.add_node(gpu_node("t4", 8, "Tesla-T4"))
    h.api.add_trainingjob(llama("big", sharding="fsdp"))
    op = operator(h)
    op.run_round()
    phase, c = admitted(h, "big")
    assert (phase, c["status"], c["reason"]) == ("Pending", "False", "Unschedulable")
    # Llama 3 8B on 4 T4s, FSDP, micro-batch 8 at 4096 tokens: states alone 16 B x 8.03e9 / 4 = 30 GiB
    assert c["message"].startswith("does not fit in GPU memory on any allowed GPU type: needs ~")
    assert (
        "GiB per GPU at micro-batch 8, sequence 4096, fsdp on 4 GPUs; T4 has 16: does not fit" in c["message"]
    )
    assert h.api.job_pods("ml", "big") == []


def test_llm_goes_to_the_gpu_it_fits_and_a_small_job_still_runs_beside_it() -> None:
    h = make_harness()
    h.api.add_node(gpu_node("t4", 8, "Tesla-T4"))
    h.api.add_node(gpu_node("h1", 8, "H100"))
    h.api.add_trainingjob(llama("fits", microBatchSize=1, activationCheckpointing=True))
    h.clock.advance(1.0)
    h.api.add_trainingjob(trainingjob("cnn", replicas={"min": 1, "max": 1, "gpusPerReplica": 8}))
    op = operator(h)
    rep = op.run_round()
    assert rep.did("start", "ml/fits") and rep.did("start", "ml/cnn")
    assert h.api.status_of("ml", "fits")["allocation"]["gpuType"] == "H100"
    assert h.api.status_of("ml", "cnn")["allocation"]["gpuType"] == "T4"


def test_waiting_llm_quotes_a_gpu_type_it_fits() -> None:
    h = make_harness()
    h.api.add_node(gpu_node("t4", 8, "Tesla-T4"))
    h.api.add_node(gpu_node("h1", 8, "H100"))
    h.api.add_trainingjob(trainingjob("cnn", replicas={"min": 1, "max": 1, "gpusPerReplica": 8}))
    h.clock.advance(1.0)
    h.api.add_trainingjob(llama("later", microBatchSize=1, activationCheckpointing=True))
    op = operator(h)
    op.run_round()
    # the CNN came first and took the H100 node (ties go by name); the T4s are free but too small
    phase, c = admitted(h, "later")
    assert (phase, c["reason"]) == ("Pending", "Waiting")
    assert c["message"].startswith("waiting for 4 GPUs of type H100: 0 free")


def test_bad_sharding_waits_with_a_condition_naming_the_field() -> None:
    h = make_harness()
    h.api.add_node(gpu_node("h1", 8, "H100"))
    h.api.add_trainingjob(llama("tp", sharding="tp4xpp4", microBatchSize=1))  # 16-way on 4 GPUs
    op = operator(h)
    op.run_round()
    phase, c = admitted(h, "tp")
    assert phase == "Pending" and c["reason"] == "Unschedulable"
    assert "sharding: tp4xpp4 splits the model over 16 GPUs; 4 GPUs are not a multiple of 16" in c["message"]


def test_the_operators_real_oracle_answers_memory_questions() -> None:
    from scheduler.core.protocols import MemoryOracle
    from scheduler.k8s.crd import trainingjob_to_job
    from scheduler.oracles.learning import CorrectedOracle

    oracle = CorrectedOracle.load()
    assert isinstance(oracle, MemoryOracle)
    job = trainingjob_to_job(llama("x", microBatchSize=1, activationCheckpointing=True), now=0.0)
    assert isinstance(job, Job)
    t4, h100 = PlacementShape("T4", 4), PlacementShape("H100", 4)
    fits = oracle.memory_fit([(job, t4), (job, h100)])
    assert [f.fits if f else None for f in fits] == [False, True]
    # and no throughput where it does not fit: a policy reading throughput alone also avoids the T4s
    slow, fast = oracle.throughput([(job, t4), (job, h100)])
    assert slow == 0.0 < fast
