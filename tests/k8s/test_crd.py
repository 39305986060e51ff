"""TrainingJob CRD: the YAML schema and the pydantic models agree, and objects convert into core Jobs.

Bad input that the API server admits (unknown model without params, template without containers, GPU
types no node has, unknown PriorityClass) must come back as an ``Unschedulable`` naming the problem.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.core.decisions import Unschedulable
from scheduler.core.types import Job, WorkUnit
from scheduler.k8s.crd import (
    TrainingJobSpec,
    TrainingJobStatus,
    parse_time,
    progress_percent,
    rfc3339,
    trainingjob_to_job,
)

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "crds" / "trainingjob.yaml"


def _schema() -> dict[str, Any]:
    doc = yaml.safe_load(CRD.read_text())
    (version,) = doc["spec"]["versions"]
    return version


def tj(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "apiVersion": "perfsched.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": "bert", "namespace": "ml", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {
            "model": "resnet50",
            "batchSize": 256,
            "work": {"iterations": 1000},
            "replicas": {"min": 1, "max": 4, "gpusPerReplica": 2},
            "template": {"spec": {"containers": [{"name": "worker", "image": "trainer:1"}]}},
        },
    }
    base["spec"].update(spec)
    return base


NOW = parse_time("2026-01-01T01:00:00Z") or 0.0


# --- the YAML ------------------------------------------------------------------------------------------


def test_crd_names_and_subresources() -> None:
    doc = yaml.safe_load(CRD.read_text())
    assert doc["metadata"]["name"] == "trainingjobs.perfsched.dev"
    assert doc["spec"]["names"]["shortNames"] == ["tj"]
    v = _schema()
    assert v["name"] == "v1alpha1"
    assert v["subresources"]["status"] == {}
    scale = v["subresources"]["scale"]
    assert scale["specReplicasPath"] == ".spec.replicas.max"
    assert scale["statusReplicasPath"] == ".status.allocation.replicas"
    cols = {c["name"] for c in v["additionalPrinterColumns"]}
    assert {"Phase", "Replicas", "GPU", "Progress", "ETA", "Age"} <= cols


def test_every_spec_and_status_field_in_the_schema_is_modelled() -> None:
    props = _schema()["schema"]["openAPIV3Schema"]["properties"]
    spec_aliases = {f.alias or n for n, f in TrainingJobSpec.model_fields.items()}
    status_aliases = {f.alias or n for n, f in TrainingJobStatus.model_fields.items()}
    assert set(props["spec"]["properties"]) == spec_aliases
    assert set(props["status"]["properties"]) == status_aliases


def test_printer_columns_point_at_status_fields() -> None:
    props = _schema()["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    for col in _schema()["additionalPrinterColumns"]:
        path = col["jsonPath"].lstrip(".").split(".")
        if path[0] != "status":
            continue
        node: dict[str, Any] = props
        for part in path[1:]:
            assert part in node, col
            node = node[part].get("properties", {})


# --- conversion ----------------------------------------------------------------------------------------


def test_rigid_job_converts_with_max_replicas_as_size() -> None:
    job = trainingjob_to_job(tj(), now=NOW)
    assert isinstance(job, Job)
    assert job.name == "ml/bert"
    assert job.total_work == 1000.0
    assert job.work_unit is WorkUnit.ITERATIONS
    # rigid: min = max = 4 replicas of 2 GPUs -> 8 GPUs either way
    assert (job.min_replicas, job.max_replicas, job.gpus_per_replica) == (4, 4, 2)
    assert job.min_gpus == job.max_gpus == 8
    assert job.submit_time == parse_time("2026-01-01T00:00:00Z")
    assert job.preemptible is True  # the schema default
    assert job.user == "ml"


@pytest.mark.parametrize(
    ("work", "unit", "total"),
    [
        ({"iterations": 500}, WorkUnit.ITERATIONS, 500.0),
        ({"samples": 64000}, WorkUnit.SAMPLES, 64000.0),
        # 2.5 epochs x 50,000 samples = 125,000 samples
        ({"epochs": 2.5, "datasetSize": 50000}, WorkUnit.SAMPLES, 125000.0),
    ],
)
def test_work_kinds(work: dict[str, Any], unit: WorkUnit, total: float) -> None:
    job = trainingjob_to_job(tj(work=work), now=NOW)
    assert isinstance(job, Job)
    assert (job.work_unit, job.total_work) == (unit, total)


def test_elastic_job_keeps_min_and_status_progress() -> None:
    obj = tj(elastic=True, deadline="2026-01-02T00:00:00Z", priority=5, preemptible=False)
    obj["status"] = {
        "progress": 400,
        "checkpointProgress": 300,
        "attainedService": 1234.5,
        "restarts": 2,
        "lastChangeTime": "2026-01-01T00:30:00Z",
    }
    job = trainingjob_to_job(obj, now=NOW)
    assert isinstance(job, Job)
    assert job.is_elastic and (job.min_replicas, job.max_replicas) == (1, 4)
    assert (job.progress, job.checkpoint_progress, job.attained_service, job.restarts) == (
        400,
        300,
        1234.5,
        2,
    )
    assert job.deadline == parse_time("2026-01-02T00:00:00Z")
    assert job.last_change_time == parse_time("2026-01-01T00:30:00Z")
    assert (job.priority, job.preemptible) == (5, False)


def test_a_running_job_carries_its_observed_throughput_and_a_waiting_one_none() -> None:
    # policies price a running job's moves by what it was measured to make where it runs
    running = tj()
    running["status"] = {
        "phase": "Running",
        "observedThroughput": 3.5,
        "allocation": {"replicas": 4, "gpuType": "V100", "gpusPerReplica": 2, "replicasPerNode": {"n1": 4}},
    }
    job = trainingjob_to_job(running, now=NOW)
    assert isinstance(job, Job) and job.observed_throughput == 3.5
    # preempted: the figure of its last run stays in the status but says nothing about where it goes next
    waiting = tj()
    waiting["status"] = {"phase": "Pending", "observedThroughput": 3.5}
    job = trainingjob_to_job(waiting, now=NOW)
    assert isinstance(job, Job) and job.observed_throughput is None


def test_custom_model_params() -> None:
    spec = tj(modelParams={"parameters": 1.3e9, "flopsPerSample": 7.8e12})
    del spec["spec"]["model"]
    job = trainingjob_to_job(spec, now=NOW, known_model=lambda m: False)
    assert isinstance(job, Job)
    assert (job.model, job.params, job.flops_per_sample) == ("", 1.3e9, 7.8e12)


def test_priority_class_resolved() -> None:
    obj = tj(priorityClassName="high")
    job = trainingjob_to_job(obj, now=NOW, priority_classes={"high": 1000})
    assert isinstance(job, Job) and job.priority == 1000
    missing = trainingjob_to_job(obj, now=NOW, priority_classes={})
    assert isinstance(missing, Unschedulable) and "PriorityClass 'high'" in missing.reason


# --- bad input admitted by the API server --------------------------------------------------------------


@pytest.mark.parametrize(
    ("mutate", "needle", "resolvable"),
    [
        (lambda s: s["spec"].update(model="no-such-net"), "unknown model 'no-such-net'", False),
        (lambda s: s["spec"]["template"]["spec"].update(containers=[]), "containers is empty", False),
        (lambda s: s["spec"]["template"].pop("spec"), "spec.template.spec is missing", False),
        # DRA-only workers (their own ResourceClaimTemplate) are refused with what to do instead
        (
            lambda s: s["spec"]["template"]["spec"].update(
                resourceClaims=[{"name": "gpus", "resourceClaimTemplateName": "eight-gpus"}]
            ),
            "spec.template.spec.resourceClaims: ResourceClaims (and ResourceClaimTemplates) in the worker "
            "template are not supported",
            False,
        ),
        (
            lambda s: s["spec"]["template"]["spec"]["containers"][0].update(
                resources={"claims": [{"name": "g"}]}
            ),
            "spec.template.spec.containers[0].resources.claims: ResourceClaims",
            False,
        ),
        (lambda s: s["spec"].update(allowedGPUTypes=["H200"]), "no node has any of the GPU types", True),
        (lambda s: s["spec"].update(allowedGPUTypes=["B9000"]), "unknown GPU types ['B9000']", False),
        # the schema rejects these; a CRD applied without it would let them through
        (lambda s: s["spec"].update(batchSize=0), "spec.batchSize", False),
        (lambda s: s["spec"]["replicas"].update(min=5), "min (5) must be <= max (4)", False),
        (
            lambda s: s["spec"].update(work={"iterations": 1, "samples": 2}),
            "exactly one of iterations",
            False,
        ),
        (
            lambda s: s["spec"].update(modelParams={"parameters": 1, "flopsPerSample": 1}),
            "set at most one of model and modelParams",
            False,
        ),
    ],
)
def test_admitted_but_unschedulable(mutate: Any, needle: str, resolvable: bool) -> None:
    obj = copy.deepcopy(tj())
    mutate(obj)
    out = trainingjob_to_job(
        obj, now=NOW, known_model=lambda m: m == "resnet50", cluster_gpu_types={"A100", "V100"}
    )
    assert isinstance(out, Unschedulable), out
    assert needle in out.reason
    assert out.resolvable is resolvable


def test_unparsable_status_counts_as_empty() -> None:
    obj = tj()
    obj["status"] = {"progress": "lots"}
    job = trainingjob_to_job(obj, now=NOW)
    assert isinstance(job, Job) and job.progress == 0.0


def test_status_wire_roundtrip_is_camel_case_without_nones() -> None:
    st_ = TrainingJobStatus(phase="Running", progress=10, gang_generation=3)
    wire = st_.to_wire()
    assert wire["phase"] == "Running" and wire["gangGeneration"] == 3
    assert "estimatedCompletion" not in wire
    assert TrainingJobStatus.model_validate(wire) == st_


@settings(max_examples=60, deadline=None)
@given(
    progress=st.floats(min_value=-10, max_value=1e7, allow_nan=False),
    checkpoint=st.floats(min_value=-10, max_value=1e7, allow_nan=False),
)
def test_progress_and_checkpoint_are_clamped(progress: float, checkpoint: float) -> None:
    obj = tj()
    obj["status"] = {"progress": progress, "checkpointProgress": checkpoint}
    job = trainingjob_to_job(obj, now=NOW)
    assert isinstance(job, Job)
    assert 0.0 <= job.checkpoint_progress <= job.progress <= job.total_work


@pytest.mark.parametrize(
    ("progress", "total", "pct"),
    [
        (0, 100, 0.0),
        (999, 1000, 99.9),
        (99999, 100000, 99.9),
        (100, 100, 100.0),
        (150, 100, 100.0),
        (1, 0, 0.0),
    ],
)
def test_progress_percent_rounds_down(progress: float, total: float, pct: float) -> None:
    assert progress_percent(progress, total) == pct


def test_rfc3339_roundtrip() -> None:
    assert rfc3339(0) == "1970-01-01T00:00:00Z"
    assert parse_time(rfc3339(1_700_000_000)) == 1_700_000_000
    assert parse_time("not a time") is None


def test_examples_convert_to_jobs() -> None:
    from perfmodel import zoo

    examples = sorted((ROOT / "crds" / "examples").glob("*.yaml"))
    assert len(examples) >= 4
    for path in examples:
        if path.name == "queues.yaml":  # TrainingQueues: tests/k8s/test_queue_crd.py
            continue
        obj = yaml.safe_load(path.read_text())
        obj["metadata"].setdefault("namespace", "default")
        out = trainingjob_to_job(obj, now=NOW, known_model=lambda m: zoo.lookup_model(m) is not None)
        if path.name.startswith("invalid-"):
            assert isinstance(out, Unschedulable), path
        else:
            assert isinstance(out, Job), (path, out)


# --- spec.modelProfile -----------------------------------------------------------------------------------


def _profile_job(**spec: Any) -> dict[str, Any]:
    obj = tj(modelProfile={"configMapName": "profiles", "key": "net.json"}, **spec)
    del obj["spec"]["model"]
    return obj


def test_model_profile_gives_params_flops_and_the_profile() -> None:
    from perfmodel.profiling import profile_zoo

    prof = profile_zoo("resnet18", batch_size=32)
    job = trainingjob_to_job(_profile_job(), now=NOW, known_model=lambda m: False, model_profile=prof)
    assert isinstance(job, Job) and job.model_profile is prof
    assert (job.model, job.params, job.flops_per_sample) == ("", 11_689_512.0, prof.train_flops_per_sample)


def test_model_profile_not_read_converts_without_it() -> None:
    # The extender's cache does not read ConfigMaps: its view of a profile-only job has no model figures
    # (the predictor answers 0 for it, placement falls back to packing and locality), never a refusal.
    job = trainingjob_to_job(_profile_job(), now=NOW)
    assert isinstance(job, Job)
    assert (job.model, job.params, job.flops_per_sample, job.model_profile) == ("", None, None, None)


def test_unusable_model_profile_falls_back_or_waits() -> None:
    problem = "spec.modelProfile: ConfigMap ml/profiles does not exist"
    alone = trainingjob_to_job(_profile_job(), now=NOW, model_profile=problem)
    assert isinstance(alone, Unschedulable) and alone.reason == problem and alone.resolvable
    fallback = _profile_job(modelParams={"parameters": 1e8, "flopsPerSample": 3e9})
    job = trainingjob_to_job(fallback, now=NOW, model_profile=problem)
    assert isinstance(job, Job) and (job.params, job.flops_per_sample, job.model_profile) == (1e8, 3e9, None)


@pytest.mark.parametrize(
    ("ref", "needle"),
    [
        ({"configMapName": "Bad_Name", "key": "k"}, "modelProfile.configMapName"),
        ({"configMapName": "cm", "key": "a/b"}, "modelProfile.key"),
        ({"configMapName": "cm"}, "modelProfile.key"),
    ],
)
def test_bad_model_profile_reference_is_named(ref: dict[str, str], needle: str) -> None:
    obj = tj(modelProfile=ref)
    del obj["spec"]["model"]
    out = trainingjob_to_job(obj, now=NOW)
    assert isinstance(out, Unschedulable) and needle in out.reason


def test_crd_schema_knows_model_profile() -> None:
    doc = yaml.safe_load((Path(__file__).parents[2] / "crds" / "trainingjob.yaml").read_text())
    spec = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    mp = spec["properties"]["modelProfile"]
    assert mp["required"] == ["configMapName", "key"]
    rules = [r["rule"] for r in spec["x-kubernetes-validations"]]
    assert "has(self.model) || has(self.modelParams) || has(self.modelProfile)" in rules


# --- start timeout and backoff limit: refused at the edges, naming the field -------------------------------


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("startTimeoutSeconds", 0, "spec.startTimeoutSeconds must be greater than 0"),
        ("startTimeoutSeconds", -5, "spec.startTimeoutSeconds must be greater than 0"),
        ("startTimeoutSeconds", 86401, "spec.startTimeoutSeconds must be at most 86400 (one day)"),
        ("backoffLimit", -1, "spec.backoffLimit must not be negative"),
        ("backoffLimit", 101, "spec.backoffLimit must be at most 100"),
    ],
)
def test_bad_start_timeout_and_backoff_are_refused_naming_the_field(
    field: str, value: int, message: str
) -> None:
    # the API server's CEL rule (each message names the field) ...
    prop = _schema()["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][field]
    rules = {r["message"]: r["rule"] for r in prop["x-kubernetes-validations"]}
    assert message in rules
    rule = rules[message]  # "self > 0", "self <= 86400", "self >= 0", "self <= 100": evaluated here
    op, bound = rule.removeprefix("self ").split(" ")
    holds = {">": value > int(bound), "<=": value <= int(bound), ">=": value >= int(bound)}[op]
    assert not holds
    # ... and the operator's own model, for a CRD installed without its schema
    job = trainingjob_to_job(tj(**{field: value}), now=NOW)
    assert isinstance(job, Unschedulable) and not job.resolvable and f"spec.{field}" in job.reason


def test_start_timeout_and_backoff_limit_parse() -> None:
    spec = TrainingJobSpec.model_validate(tj(startTimeoutSeconds=86400, backoffLimit=0)["spec"])
    assert (spec.start_timeout_seconds, spec.backoff_limit) == (86400, 0)
    assert (
        TrainingJobSpec.model_validate(tj()["spec"]).start_timeout_seconds is None
    )  # the operator's default
