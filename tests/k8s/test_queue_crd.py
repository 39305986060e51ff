"""TrainingQueue CRD: the YAML schema and the pydantic models agree, the examples convert into core
``QueueSpec``s, and a spec the API server admitted but that does not parse comes back as a message naming
the field (for a condition), never an exception."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.core.queues import FairShare, QueueSpec, Quota
from scheduler.k8s.crd import (
    LabelSelector,
    QueueQuota,
    TrainingQueueSpec,
    TrainingQueueStatus,
    queue_spec_to_wire,
    trainingqueue_to_spec,
)

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "crds" / "trainingqueue.yaml"


def _version() -> dict[str, Any]:
    (version,) = yaml.safe_load(CRD.read_text())["spec"]["versions"]
    return version  # type: ignore[no-any-return]


def tq(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "perfsched.dev/v1alpha1",
        "kind": "TrainingQueue",
        "metadata": {"name": name},
        "spec": spec,
    }


def test_crd_names_scope_and_columns() -> None:
    doc = yaml.safe_load(CRD.read_text())
    assert doc["metadata"]["name"] == "trainingqueues.perfsched.dev"
    assert doc["spec"]["scope"] == "Cluster"
    assert doc["spec"]["names"]["shortNames"] == ["tq"]
    v = _version()
    assert v["name"] == "v1alpha1" and v["subresources"] == {"status": {}}
    status = v["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    for col in v["additionalPrinterColumns"]:
        path = col["jsonPath"].lstrip(".").split(".")
        if path[0] == "status":
            assert path[1] in status, col


def test_every_spec_and_status_field_in_the_schema_is_modelled() -> None:
    props = _version()["schema"]["openAPIV3Schema"]["properties"]
    assert set(props["spec"]["properties"]) == {
        f.alias or n for n, f in TrainingQueueSpec.model_fields.items()
    }
    assert set(props["status"]["properties"]) == {
        f.alias or n for n, f in TrainingQueueStatus.model_fields.items()
    }
    quota = props["spec"]["properties"]["quotas"]["items"]["properties"]
    assert set(quota) == {f.alias or n for n, f in QueueQuota.model_fields.items()}


def test_examples_convert_to_queue_specs() -> None:
    docs = list(yaml.safe_load_all((ROOT / "crds" / "examples" / "queues.yaml").read_text()))
    specs = {s.name: s for s in (trainingqueue_to_spec(d) for d in docs) if isinstance(s, QueueSpec)}
    assert specs == {
        "team-a": QueueSpec("team-a", (Quota("A100", 16, 8, None), Quota("*", 4)), "research", 1.0),
        "team-b": QueueSpec("team-b", (Quota("A100", 16, None, 8),), "research", 2.0, FairShare.GPUS),
    }
    # "*" covers the types without an entry of their own; limits hold per type
    assert specs["team-a"].nominal("V100") == 4 and specs["team-a"].nominal("A100") == 16
    assert specs["team-b"].nominal("V100") == 0


def test_wire_roundtrip() -> None:
    spec = QueueSpec("q", (Quota("A100", 8, 4, 2), Quota("*", 1)), "c", 2.5, FairShare.GPUS)
    assert trainingqueue_to_spec(tq("q", **queue_spec_to_wire(spec))) == spec


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ({"quotas": [{"gpuType": "A100", "nominal": -1}]}, "spec.quotas.0.nominal"),
        (
            {"quotas": [{"gpuType": "A100", "nominal": 1, "borrowingLimit": 2}]},
            "borrowingLimit needs spec.cohort",
        ),
        ({"quotas": [{"gpuType": "A100", "nominal": 1}, {"gpuType": "A100", "nominal": 2}]}, "A100 twice"),
        (
            {"quotas": [{"gpuType": "A100", "nominal": 1, "lendingLimit": 2}]},
            "lendingLimit must be <= nominal",
        ),
        ({"weight": 0}, "spec.weight"),
        ({"fairShare": "dollars"}, "spec.fairShare"),
    ],
)
def test_unparsable_spec_is_a_message_naming_the_field(spec: dict[str, Any], needle: str) -> None:
    out = trainingqueue_to_spec(tq("bad", **spec))
    assert isinstance(out, str) and needle in out, out


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ({}, {"team": "a"}, True),
        ({"matchLabels": {"team": "a"}}, {"team": "a", "x": "y"}, True),
        ({"matchLabels": {"team": "a"}}, {"team": "b"}, False),
        (
            {"matchExpressions": [{"key": "team", "operator": "In", "values": ["a", "b"]}]},
            {"team": "b"},
            True,
        ),
        ({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]}, {}, True),
        ({"matchExpressions": [{"key": "team", "operator": "Exists"}]}, {}, False),
        ({"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]}, {"team": "a"}, False),
    ],
)
def test_namespace_selector(selector: dict[str, Any], labels: dict[str, str], matches: bool) -> None:
    assert LabelSelector.model_validate(selector).matches(labels) is matches
