"""TrainingQueue against the real API server: valid queues (the shipped examples) are accepted and read
back as the core's ``QueueSpec``; invalid ones are refused with the field named (schema and CEL rules).

The scheduling side (borrowing, reclaim through the grace period) needs the operator wiring of issue 14
and is not tested here yet.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from e2e.harness import REPO, KubeCluster
from scheduler.core.queues import QueueSpec
from scheduler.k8s.crd import GROUP, QUEUE_PLURAL, VERSION, trainingqueue_to_spec


@pytest.fixture
def queues(kube_cluster: KubeCluster) -> Iterator[tuple[k8s.CustomObjectsApi, str]]:
    """The custom objects API and a unique name prefix; every queue created under it is deleted after."""
    api = k8s.CustomObjectsApi(kube_cluster.api)
    prefix = f"tq-{uuid.uuid4().hex[:6]}"
    yield api, prefix
    for obj in api.list_cluster_custom_object(GROUP, VERSION, QUEUE_PLURAL)["items"]:
        if obj["metadata"]["name"].startswith(prefix):
            api.delete_cluster_custom_object(GROUP, VERSION, QUEUE_PLURAL, obj["metadata"]["name"])


def body(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TrainingQueue",
        "metadata": {"name": name},
        "spec": spec,
    }


def test_example_queues_are_accepted_and_read_back(queues: tuple[k8s.CustomObjectsApi, str]) -> None:
    api, prefix = queues
    for doc in yaml.safe_load_all((REPO / "crds" / "examples" / "queues.yaml").read_text()):
        doc["metadata"]["name"] = f"{prefix}-{doc['metadata']['name']}"
        api.create_cluster_custom_object(GROUP, VERSION, QUEUE_PLURAL, doc)
    got = api.get_cluster_custom_object(GROUP, VERSION, QUEUE_PLURAL, f"{prefix}-team-b")
    spec = trainingqueue_to_spec(got)
    assert isinstance(spec, QueueSpec) and spec.weight == 2 and spec.cohort == "research"
    # defaults filled in by the API server
    minimal = api.create_cluster_custom_object(
        GROUP, VERSION, QUEUE_PLURAL, body(f"{prefix}-min", {"quotas": [{"gpuType": "*", "nominal": 8}]})
    )
    assert minimal["spec"]["weight"] == 1 and minimal["spec"]["fairShare"] == "throughput"


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"quotas": [{"gpuType": "A100", "nominal": -1}]}, "spec.quotas[0].nominal"),
        ({"quotas": [{"gpuType": "A100", "nominal": 4, "borrowingLimit": 4}]}, "spec.cohort"),
        (
            {"quotas": [{"gpuType": "A100", "nominal": 1}, {"gpuType": "A100", "nominal": 2}]},
            "spec.quotas[1]",
        ),
        ({"quotas": [{"gpuType": "A100", "nominal": 2, "lendingLimit": 4}]}, "spec.quotas[0].lendingLimit"),
        ({"quotas": [{"gpuType": "A 100", "nominal": 1}]}, "spec.quotas[0].gpuType"),
        ({"weight": 0}, "spec.weight"),
        ({"fairShare": "dollars"}, "spec.fairShare"),
        ({"cohort": "Not_A_Label"}, "spec.cohort"),
    ],
)
def test_invalid_queue_is_refused_naming_the_field(
    queues: tuple[k8s.CustomObjectsApi, str], spec: dict[str, Any], field: str
) -> None:
    api, prefix = queues
    with pytest.raises(ApiException) as info:
        api.create_cluster_custom_object(GROUP, VERSION, QUEUE_PLURAL, body(f"{prefix}-bad", spec))
    assert info.value.status == 422, info.value.body
    assert field in info.value.body, info.value.body
