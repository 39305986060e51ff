"""The files the dev cluster writes: scheduler configurations, kubeconfig, token file, node objects."""

from __future__ import annotations

import base64

import yaml

from perfsched_dev.devcluster import configs
from perfsched_dev.k8s.bootstrap import node_manifest
from scheduler.core.types import Interconnect, Node


def test_perfsched_profile_calls_the_extender_for_gpu_pods_only() -> None:
    cfg = configs.perfsched_scheduler_config(
        "/k/kubeconfig", "http://127.0.0.1:8123/", configs.SchedulerTuning()
    )
    assert [p["schedulerName"] for p in cfg["profiles"]] == ["perfsched"]
    (ext,) = cfg["extenders"]
    assert ext["urlPrefix"] == "http://127.0.0.1:8123"  # no trailing slash: verbs are appended with '/'
    assert (ext["filterVerb"], ext["prioritizeVerb"], ext["preemptVerb"]) == (
        "filter",
        "prioritize",
        "preempt",
    )
    assert "bindVerb" not in ext  # kube-scheduler binds, as the chart installs it
    binding = configs.perfsched_scheduler_config(
        "/k", "http://x", configs.SchedulerTuning(extender_binds=True)
    )
    assert binding["extenders"][0]["bindVerb"] == "bind"
    assert ext["nodeCacheCapable"] is True
    assert ext["managedResources"] == [{"name": "nvidia.com/gpu", "ignoredByScheduler": False}]
    assert ext["weight"] > 0  # kube-scheduler rejects a prioritizeVerb without a positive weight
    assert ext["ignorable"] is False
    assert cfg["clientConnection"]["kubeconfig"] == "/k/kubeconfig"
    assert cfg["leaderElection"] == {"leaderElect": False}


def test_default_scheduler_has_no_extender() -> None:
    cfg = configs.default_scheduler_config("/k/kubeconfig")
    assert [p["schedulerName"] for p in cfg["profiles"]] == ["default-scheduler"]
    assert "extenders" not in cfg


def test_tuning_reaches_the_client_connection() -> None:
    cfg = configs.default_scheduler_config("/k", configs.SchedulerTuning(qps=500, burst=1000))
    assert cfg["clientConnection"]["qps"] == 500
    assert cfg["clientConnection"]["burst"] == 1000


def test_kubeconfig_carries_server_token_and_ca() -> None:
    doc = yaml.safe_load(configs.kubeconfig_text("https://127.0.0.1:6443", "tok", b"PEM"))
    assert doc["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:6443"
    assert base64.b64decode(doc["clusters"][0]["cluster"]["certificate-authority-data"]) == b"PEM"
    assert doc["users"][0]["user"] == {"token": "tok"}
    assert doc["current-context"] == doc["contexts"][0]["name"]


def test_token_file_makes_the_admin_a_system_master() -> None:
    assert configs.token_file_text("tok", "admin") == 'tok,admin,admin-uid,"system:masters"\n'


def test_node_manifest_has_gpu_capacity_labels_and_the_kwok_annotation() -> None:
    node = Node(
        name="a100-3",
        gpu_type="A100",
        gpus=8,
        gpu_product="NVIDIA-A100-SXM4-40GB",
        zone="zone-a",
        rack="a100-rack1",
        nvlink_domain="a100-nvl3",
        interconnect=Interconnect.NVLINK,
        network_gbps=200.0,
    )
    obj = node_manifest(node, {"nvidia.com/gpu.memory": "40960", "nvidia.com/gpu": "8"})
    labels = obj["metadata"]["labels"]
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    assert labels["nvidia.com/gpu.count"] == "8"
    assert labels["nvidia.com/gpu.memory"] == "40960"
    assert labels["topology.kubernetes.io/zone"] == "zone-a"
    assert labels["perfsched.dev/rack"] == "a100-rack1"
    assert labels["perfsched.dev/nvlink-domain"] == "a100-nvl3"
    assert labels["perfsched.dev/interconnect"] == "nvlink"
    assert labels["perfsched.dev/network-gbps"] == "200"
    assert "nvidia.com/gpu" not in labels  # a resource, not a label
    assert obj["metadata"]["annotations"] == {"kwok.x-k8s.io/node": "fake"}
    assert obj["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert obj["status"]["capacity"]["nvidia.com/gpu"] == "8"


def test_pcie_node_without_domain_or_zone_gets_no_such_labels() -> None:
    obj = node_manifest(Node(name="k80-0", gpu_type="K80", gpus=4, interconnect=Interconnect.PCIE))
    labels = obj["metadata"]["labels"]
    assert labels["nvidia.com/gpu.product"] == "K80"  # no product label given: the canonical type
    assert "perfsched.dev/nvlink-domain" not in labels
    assert "topology.kubernetes.io/zone" not in labels
    assert labels["perfsched.dev/interconnect"] == "pcie"
