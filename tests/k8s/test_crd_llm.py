"""TrainingJob LLM fields: schema, pydantic model and conversion agree; bad values are refused by field."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from perfmodel.errors import InvalidInputError
from perfmodel.sharding import SHARDING_PATTERN, parse_sharding
from scheduler.core.decisions import Unschedulable
from scheduler.core.types import Job
from scheduler.k8s.crd import parse_time, trainingjob_to_job

ROOT = Path(__file__).resolve().parents[2]
NOW = parse_time("2026-01-01T01:00:00Z") or 0.0


def _spec_schema(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text())
    (version,) = doc["spec"]["versions"]
    spec: dict[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return spec


def tj(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "metadata": {"name": "llm", "namespace": "ml", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {
            "model": "llama3-8b",
            "batchSize": 64,
            "precision": "bf16",
            "work": {"iterations": 1000},
            "replicas": {"max": 1, "gpusPerReplica": 8},
            "template": {"spec": {"containers": [{"name": "worker", "image": "trainer:1"}]}},
        },
    }
    base["spec"].update(spec)
    return base


def test_schema_pattern_is_perfmodels_and_helm_has_the_same_crd() -> None:
    props = _spec_schema(ROOT / "crds" / "trainingjob.yaml")["properties"]
    assert props["sharding"]["pattern"] == SHARDING_PATTERN
    assert props["sequenceLength"]["minimum"] == 1 and props["microBatchSize"]["minimum"] == 1
    assert props["modelParams"]["required"] == ["parameters"]
    helm = ROOT / "helm" / "perfsched" / "crds" / "trainingjob.yaml"
    assert helm.read_text() == (ROOT / "crds" / "trainingjob.yaml").read_text()


@pytest.mark.parametrize(
    "text", ["ddp", "fsdp", "zero3", "zero-3", "tp8", "pp4", "tp4xpp2", "tp8xpp8xcp2", "tp2xcp2", "tp4xqq",
             "tp0", "xpp2", "fsdp2", "TP4", "tp4xpp", "cp2"],
)  # fmt: skip
def test_schema_pattern_and_parser_agree(text: str) -> None:
    in_schema = re.fullmatch(SHARDING_PATTERN, text) is not None
    try:
        parse_sharding(text)
        parses = True
    except InvalidInputError:
        parses = False
    # the parser also takes upper case; the schema asks for lower case
    assert in_schema == (parses and text == text.lower())


def test_llm_fields_convert_into_the_core_job() -> None:
    job = trainingjob_to_job(
        tj(sequenceLength=8192, sharding="tp2xpp2", microBatchSize=2, activationCheckpointing=True), now=NOW
    )
    assert isinstance(job, Job)
    assert (job.sequence_length, job.sharding, job.micro_batch_size, job.activation_checkpointing) == (
        8192,
        "tp2xpp2",
        2,
        True,
    )
    plain = trainingjob_to_job(tj(), now=NOW)
    assert isinstance(plain, Job)
    assert (plain.sequence_length, plain.sharding, plain.micro_batch_size) == (None, "", None)


def test_custom_llm_needs_flops_only_without_a_sequence_length() -> None:
    spec = {"model": None, "modelParams": {"parameters": 1.3e9}}
    obj = tj(**spec)
    del obj["spec"]["model"]
    bad = trainingjob_to_job(obj, now=NOW)
    assert isinstance(bad, Unschedulable) and "spec.modelParams.flopsPerSample is required" in bad.reason
    obj["spec"]["sequenceLength"] = 2048
    ok = trainingjob_to_job(obj, now=NOW)
    assert isinstance(ok, Job) and ok.params == 1.3e9 and ok.flops_per_sample is None


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"sharding": "tp4xqq"}, "spec.sharding"),
        ({"sequenceLength": 0}, "spec.sequenceLength"),
        ({"microBatchSize": 0}, "spec.microBatchSize"),
        ({"microBatchSize": 65}, "spec.microBatchSize must be <= spec.batchSize"),
    ],
)
def test_bad_llm_fields_are_refused_naming_the_field(spec: dict[str, Any], field: str) -> None:
    got = trainingjob_to_job(tj(**spec), now=NOW)
    assert isinstance(got, Unschedulable) and not got.resolvable
    assert field in got.reason
