"""TrainingQueue against the real API server: valid queues (the shipped examples) are accepted and read
back as the core's ``QueueSpec``; invalid ones are refused with the field named (schema and CEL rules);
and with the real operator, extender and emulator: team A borrows team B's idle A100s, B submits, A's
borrower is preempted through its checkpoint grace and later finishes from its checkpoint (its wait an
Event naming queue A's limit), and a job naming a missing queue waits with a condition and an Event
saying so.

TrainingQueues are cluster-scoped and every operator reads them all: each test deletes its queues.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from e2e.harness import REPO, KubeCluster, wait_until
from e2e.test_operator import Cluster, Watcher, cluster, stack, tj  # noqa: F401  (fixtures)
from scheduler.core.queues import QueueSpec
from scheduler.k8s.crd import trainingqueue_to_spec
from scheduler.names import GROUP, TRAININGQUEUE_PLURAL, VERSION


@pytest.fixture
def queues(kube_cluster: KubeCluster) -> Iterator[tuple[k8s.CustomObjectsApi, str]]:
    """The custom objects API and a unique name prefix; every queue created under it is deleted after."""
    api = k8s.CustomObjectsApi(kube_cluster.api)
    prefix = f"tq-{uuid.uuid4().hex[:6]}"
    yield api, prefix
    for obj in api.list_cluster_custom_object(GROUP, VERSION, TRAININGQUEUE_PLURAL)["items"]:
        if obj["metadata"]["name"].startswith(prefix):
            api.delete_cluster_custom_object(GROUP, VERSION, TRAININGQUEUE_PLURAL, obj["metadata"]["name"])


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
        api.create_cluster_custom_object(GROUP, VERSION, TRAININGQUEUE_PLURAL, doc)
    got = api.get_cluster_custom_object(GROUP, VERSION, TRAININGQUEUE_PLURAL, f"{prefix}-team-b")
    spec = trainingqueue_to_spec(got)
    assert isinstance(spec, QueueSpec) and spec.weight == 2 and spec.cohort == "research"
    # defaults filled in by the API server
    minimal = api.create_cluster_custom_object(
        GROUP,
        VERSION,
        TRAININGQUEUE_PLURAL,
        body(f"{prefix}-min", {"quotas": [{"gpuType": "*", "nominal": 8}]}),
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
        api.create_cluster_custom_object(GROUP, VERSION, TRAININGQUEUE_PLURAL, body(f"{prefix}-bad", spec))
    assert info.value.status == 422, info.value.body
    assert field in info.value.body, info.value.body


def test_owner_reclaims_borrowed_gpus_through_the_grace_period(
    queues: tuple[k8s.CustomObjectsApi, str],
    cluster: Cluster,  # noqa: F811
    stack: Any,  # noqa: F811
) -> None:
    api, prefix = queues
    a, b = f"{prefix}-a", f"{prefix}-b"
    for name, quota in (
        (a, {"gpuType": "A100", "nominal": 8, "borrowingLimit": 8}),
        (b, {"gpuType": "A100", "nominal": 8}),
    ):
        api.create_cluster_custom_object(
            GROUP,
            VERSION,
            TRAININGQUEUE_PLURAL,
            body(name, {"cohort": prefix, "quotas": [quota, {"gpuType": "*", "nominal": 8}]}),
        )
    stack("fifo", checkpoint_interval=50.0)
    with Watcher(cluster.kube) as w:
        # team A: one 16-A100 gang, half of it borrowed from team B's idle quota
        cluster.submit(
            tj("a-long", model="resnet50", dataset="imagenet", batch=256, iterations=40000, replicas=2,
               gpus=8, allowedGPUTypes=["A100"], queue=a)
        )  # fmt: skip
        cluster.wait_phase("a-long", {"Running"}, 60)
        time.sleep(3)  # past the minimum change interval, with some checkpoints
        cluster.submit(tj("b-short", iterations=6000, replicas=1, gpus=8, allowedGPUTypes=["A100"], queue=b))
        cluster.submit(tj("lost", queue=f"{prefix}-nowhere"))
        st = cluster.wait_phase("a-long", {"Preempted"}, 60)
        assert st["preemptions"] == 1
        cluster.wait_phase("b-short", {"Running", "Succeeded"}, 60)

        def b_status() -> dict[str, Any]:
            return api.get_cluster_custom_object(GROUP, VERSION, TRAININGQUEUE_PLURAL, b).get("status") or {}

        # the operator reports the queues' usage: B holds its 8 A100, A is back within its nominal 8
        wait_until(lambda: b_status().get("usage", {}).get("A100") == 8, 30, "team-b status usage")
        qa = api.get_cluster_custom_object(GROUP, VERSION, TRAININGQUEUE_PLURAL, a).get("status") or {}
        assert qa.get("usage", {}).get("A100", 0) <= 8 and qa.get("pendingJobs") == 1, qa
        lost = cluster.status("lost")
        assert lost.get("phase") == "Pending" and f"queue {prefix}-nowhere does not exist" in str(lost), lost
        # why they wait is also an Event naming the queue: the missing one, and A's limit for its borrower
        assert any(r == "QueueNotFound" and f"{prefix}-nowhere" in m for r, m in cluster.events("lost"))
        held = [m for r, m in cluster.events("a-long") if r == "QueueQuota"]
        assert held and held[0].startswith(f"queue {a}: "), cluster.events("a-long")
        cluster.wait_phase("b-short", {"Succeeded"}, 90)
        st = cluster.wait_phase("a-long", {"Succeeded", "Failed"}, 180)
    assert st["phase"] == "Succeeded", st
    assert st["restarts"] >= 1 and st["progress"] == 40000
    assert w.violations == []
