"""Raw Node and Pod JSON decode into the core types the scheduler uses, and bad fields are named."""

from __future__ import annotations

import pytest

from scheduler.core.types import Interconnect
from scheduler.k8s.codec import (
    CodecError,
    NodeHealth,
    decode_node,
    decode_node_health,
    decode_pod,
    parse_count,
    pod_gpu_request,
)
from tests.extender.kube import kube_node, kube_pod


def test_gpu_node_labels_become_a_core_node() -> None:
    obj = kube_node("gpu-0", "A100", 8, rack="r1", domain="d1", zone="z1", interconnect="nvlink", network=200)
    node = decode_node(obj)
    assert (node.name, node.gpu_type, node.gpus) == ("gpu-0", "A100", 8)
    assert node.gpu_product == "NVIDIA-A100-SXM4-40GB"
    assert (node.rack, node.nvlink_domain, node.zone) == ("r1", "d1", "z1")
    assert node.interconnect is Interconnect.NVLINK and node.network_gbps == 200.0
    assert node.schedulable


@pytest.mark.parametrize(
    ("product", "expected"),
    [
        ("Tesla-V100-SXM2-16GB", "V100"),
        ("NVIDIA-H100-80GB-HBM3", "H100"),
        ("Tesla-T4", "T4"),
        # an unknown product keeps its label as its type: still schedulable by name
        ("Acme-Tensor-9000", "Acme-Tensor-9000"),
    ],
)
def test_product_label_maps_to_canonical_type(product: str, expected: str) -> None:
    obj = kube_node("n", product, 4)
    assert decode_node(obj).gpu_type == expected


def test_node_without_gpus_and_cordoned_node() -> None:
    cpu = decode_node(kube_node("cpu", "", 0))
    assert cpu.gpus == 0 and cpu.gpu_type == ""
    cordoned = decode_node(kube_node("c", "T4", 1, unschedulable=True))
    assert not cordoned.schedulable and cordoned.capacity_for_jobs == 0


def test_gpu_count_label_is_the_fallback_for_allocatable() -> None:
    obj = kube_node("n", "T4", 0)
    obj["metadata"]["labels"]["nvidia.com/gpu.count"] = "4"
    assert decode_node(obj).gpus == 4


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda o: o["metadata"].pop("name"), "Node.metadata.name"),
        (
            lambda o: o["status"]["allocatable"].update({"nvidia.com/gpu": "2.5"}),
            "allocatable[nvidia.com/gpu]",
        ),
        (
            lambda o: o["metadata"]["labels"].update({"perfsched.dev/interconnect": "infiniband"}),
            "interconnect",
        ),
        (lambda o: o["metadata"]["labels"].update({"perfsched.dev/network-gbps": "fast"}), "network-gbps"),
        (lambda o: o.update({"status": []}), "status"),
    ],
)
def test_bad_node_fields_are_named(mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    obj = kube_node("n", "A100", 8)
    mutate(obj)
    with pytest.raises(CodecError, match=message.replace("[", r"\[").replace("]", r"\]")):
        decode_node(obj)


def test_pod_gpu_request_rules() -> None:
    # requests win over limits; containers add up: 2 + 1 = 3
    pod = kube_pod("p", 2)
    pod["spec"]["containers"].append(
        {
            "name": "side",
            "resources": {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}},
        }
    )
    assert pod_gpu_request(pod) == 3
    # an init container asking 4 > 3 makes the pod need 4 (init containers run alone)
    pod["spec"]["initContainers"] = [{"name": "init", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]
    assert pod_gpu_request(pod) == 4
    assert pod_gpu_request(kube_pod("cpu", 0)) == 0


def test_pod_info_carries_gang_labels_and_operator_annotations() -> None:
    obj = kube_pod("tj-w1", 2, job="tj", replica=1, generation="3", gpu_type="A100", planned="n1", node="n1")
    info = decode_pod(obj)
    assert info.job == "team-a/tj" and info.generation == "3" and info.replica_index == 1
    assert info.gpu_type == "A100" and info.planned_node == "n1"
    assert info.holds_gpus and info.key == "team-a/tj-w1"
    # a bound pod that finished holds nothing; an unbound one holds nothing
    assert not decode_pod(kube_pod("done", 2, node="n1", phase="Succeeded")).holds_gpus
    assert not decode_pod(kube_pod("pending", 2)).holds_gpus


def test_bad_batch_size_annotation_does_not_hide_the_pod() -> None:
    obj = kube_pod("p", 1, node="n1", model="resnet50")
    obj["metadata"]["annotations"]["perfsched.dev/batch-size"] = "lots"
    info = decode_pod(obj)
    assert info.batch_size == 0 and info.holds_gpus


@pytest.mark.parametrize("value", ["-1", "1.5", "2k", True, None, [1]])
def test_parse_count_refuses_non_whole_quantities(value: object) -> None:
    with pytest.raises(CodecError, match="f: "):
        parse_count(value, "f")


# --- node health ------------------------------------------------------------------------------------------


def test_node_health_reads_the_ready_condition_and_no_execute_taints() -> None:
    node = kube_node("n1", 8, "A100")
    assert decode_node_health(node) == NodeHealth("n1")  # no conditions: taken as ready
    node["status"]["conditions"] = [
        {"type": "MemoryPressure", "status": "False"},
        {"type": "Ready", "status": "Unknown", "lastTransitionTime": "2026-01-01T00:00:10Z"},
    ]
    node["spec"] = {
        "taints": [
            # the lifecycle controller's taints come with NotReady: the grace period covers them
            {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
            {"key": "dedicated", "effect": "NoSchedule"},
        ]
    }
    health = decode_node_health(node)
    assert (health.ready, health.since, health.no_execute) == (False, 1767225610.0, ())
    node["spec"]["taints"].append({"key": "gpu-health", "value": "xid79", "effect": "NoExecute"})
    assert decode_node_health(node).no_execute == ("gpu-health",)
    node["status"]["conditions"][1]["status"] = "True"
    assert decode_node_health(node).ready and decode_node_health(node).since is None


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda n: n["status"].update(conditions={"Ready": "True"}),
            "Node n1.status.conditions: expected a list",
        ),
        (lambda n: n.update(spec={"taints": "gpu"}), "Node n1.spec.taints: expected a list"),
    ],
)
def test_bad_node_health_fields_are_named(mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    node = kube_node("n1", 8, "A100")
    mutate(node)
    with pytest.raises(CodecError, match=message):
        decode_node_health(node)
