"""The local control plane behaves like a real cluster: GPU nodes from the spec, RBAC, scheduling of GPU
pods by the real kube-scheduler through an extender, KWOK pod phases, FailedScheduling, garbage collection.

The session cluster is ``e2e/clusters/e2e-small.yaml``: a100-0/1 (8 GPUs), v100-0/1 (4), k80-0/1 (4).
"""

from __future__ import annotations

import sys
import uuid
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from e2e.harness import KubeCluster, extender_calls, gpu_pod, pod_events, wait_until

SPEC_NODES = {
    # name: (GPUs, product label, interconnect)
    "a100-0": (8, "NVIDIA-A100-SXM4-40GB", "nvlink"),
    "a100-1": (8, "NVIDIA-A100-SXM4-40GB", "nvlink"),
    "v100-0": (4, "Tesla-V100-SXM2-16GB", "nvlink"),
    "v100-1": (4, "Tesla-V100-SXM2-16GB", "nvlink"),
    "k80-0": (4, "Tesla-K80", "pcie"),
    "k80-1": (4, "Tesla-K80", "pcie"),
}


def _local_only(cluster: KubeCluster) -> None:
    if not cluster.local:
        pytest.skip("needs the local dev cluster (its spec and extender port)")


def test_kwok_gpu_nodes_follow_the_cluster_spec(kube_cluster: KubeCluster) -> None:
    _local_only(kube_cluster)
    nodes = {n.metadata.name: n for n in kube_cluster.core.list_node(label_selector="type=kwok").items}
    assert set(nodes) == set(SPEC_NODES)
    for name, (gpus, product, interconnect) in SPEC_NODES.items():
        node = nodes[name]
        labels = node.metadata.labels
        assert node.status.allocatable["nvidia.com/gpu"] == str(gpus)
        assert node.status.capacity["nvidia.com/gpu"] == str(gpus)
        assert labels["nvidia.com/gpu.product"] == product
        assert labels["nvidia.com/gpu.count"] == str(gpus)
        assert labels["perfsched.dev/interconnect"] == interconnect
        assert labels["perfsched.dev/rack"]
        assert ("perfsched.dev/nvlink-domain" in labels) == (interconnect == "nvlink")
        assert node.metadata.annotations["kwok.x-k8s.io/node"] == "fake"
        ready = {c.type: c.status for c in node.status.conditions}
        assert ready["Ready"] == "True"
        assert not node.spec.taints  # TaintNodesByCondition is off, so nothing blocks scheduling


def _token_client(cluster: KubeCluster, token: str) -> k8s.ApiClient:
    cfg = k8s.Configuration()
    cfg.host = cluster.api.configuration.host
    cfg.ssl_ca_cert = cluster.api.configuration.ssl_ca_cert
    cfg.verify_ssl = cluster.api.configuration.verify_ssl
    cfg.api_key = {"authorization": f"Bearer {token}"}
    return k8s.ApiClient(cfg)


def test_rbac_limits_a_service_account_to_what_its_role_grants(
    kube_cluster: KubeCluster, fresh_namespace: str
) -> None:
    ns = fresh_namespace
    core, rbac = kube_cluster.core, k8s.RbacAuthorizationV1Api(kube_cluster.api)
    core.create_namespaced_service_account(ns, {"metadata": {"name": "reader"}})
    rbac.create_namespaced_role(
        ns,
        {
            "metadata": {"name": "pod-reader"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        ns,
        {
            "metadata": {"name": "reader-reads-pods"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}],
        },
    )
    token = core.create_namespaced_service_account_token(
        "reader", ns, {"spec": {"expirationSeconds": 600}}
    ).status.token
    reader = k8s.CoreV1Api(_token_client(kube_cluster, token))

    # the RoleBinding may take a moment to reach the authorizer's cache
    wait_until(lambda: _can_list(reader, ns), 10, "the reader to list pods in its namespace")
    with pytest.raises(ApiException) as other_ns:
        reader.list_namespaced_pod("default")
    assert other_ns.value.status == 403
    with pytest.raises(ApiException) as create:
        reader.create_namespaced_pod(ns, gpu_pod("nope", 1))
    assert create.value.status == 403
    with pytest.raises(ApiException) as bad_token:
        k8s.CoreV1Api(_token_client(kube_cluster, "not-a-token")).list_namespaced_pod(ns)
    assert bad_token.value.status == 401


def _can_list(api: k8s.CoreV1Api, ns: str) -> bool:
    try:
        api.list_namespaced_pod(ns)
    except ApiException as exc:
        if exc.status == 403:
            return False
        raise
    return True


def _phase_history(core: k8s.CoreV1Api, ns: str, name: str, until: set[str], timeout: float) -> list[str]:
    seen: list[str] = []

    def step() -> bool:
        pod = core.read_namespaced_pod(name, ns)
        phase = pod.status.phase if pod.spec.node_name else "Unbound"
        if not seen or seen[-1] != phase:
            seen.append(phase)
        return phase in until

    wait_until(
        step, timeout, f"pod {ns}/{name} to reach {sorted(until)} (phases so far {seen})", interval=0.1
    )
    return seen


def test_gpu_pod_goes_through_the_extender_to_a_kwok_node_then_runs_and_succeeds(
    kube_cluster: KubeCluster, fresh_namespace: str, start_component: Any
) -> None:
    _local_only(kube_cluster)
    ns, core = fresh_namespace, kube_cluster.core
    preferred = "v100-1"  # the extender scores it 10 and every other node 0
    start_component(
        [sys.executable, "e2e/minimal_extender.py", "--port", str(kube_cluster.extender_port),
         "--kubeconfig", kube_cluster.kubeconfig, "--prefer", preferred],
        name="minimal-extender",
        health_url=f"{kube_cluster.extender_url}/healthz",
    )  # fmt: skip
    core.create_namespaced_pod(
        ns, gpu_pod("train-0", 2, annotations={"perfsched.dev/kwok-run-duration": "2s"})
    )

    phases = _phase_history(core, ns, "train-0", {"Succeeded", "Failed"}, timeout=60)
    assert phases[-1] == "Succeeded", phases
    assert "Running" in phases, phases
    pod = core.read_namespaced_pod("train-0", ns)
    assert pod.spec.node_name == preferred
    assert pod.status.container_statuses[0].state.terminated.exit_code == 0

    calls = [c for c in extender_calls(kube_cluster.extender_url) if c["pod"] == f"{ns}/train-0"]
    verbs = [c["verb"] for c in calls]
    # kube-scheduler binds (the chart's default: no bindVerb), so the extender sees filter and prioritize
    assert verbs[:2] == ["filter", "prioritize"] and "bind" not in verbs, verbs
    # nodeCacheCapable: node names only; the in-tree filters' survivors, at least two GPU nodes here
    assert preferred in calls[0]["nodes"]
    assert len(calls[0]["nodes"]) >= 2
    scheduled = [e for e in pod_events(core, ns, "train-0") if e.reason == "Scheduled"]
    assert scheduled and scheduled[0].reporting_component == "perfsched"


def test_pod_needing_more_gpus_than_any_node_stays_pending_with_failed_scheduling(
    kube_cluster: KubeCluster, fresh_namespace: str
) -> None:
    ns, core = fresh_namespace, kube_cluster.core
    core.create_namespaced_pod(ns, gpu_pod("too-big", 9))  # the largest node has 8

    def failed() -> list[k8s.CoreV1Event]:
        return [e for e in pod_events(core, ns, "too-big") if e.reason == "FailedScheduling"]

    event = wait_until(failed, 30, "a FailedScheduling event")[0]
    assert "Insufficient nvidia.com/gpu" in event.message
    assert event.reporting_component == "perfsched"

    # kube-scheduler records the event and patches the pod's status separately: the condition may follow
    def scheduled_condition() -> k8s.V1PodCondition | None:
        pod = core.read_namespaced_pod("too-big", ns)
        return next((c for c in pod.status.conditions or [] if c.type == "PodScheduled"), None)

    wait_until(scheduled_condition, 30, "the pod's PodScheduled condition")
    pod = core.read_namespaced_pod("too-big", ns)
    assert pod.status.phase == "Pending"
    assert not pod.spec.node_name
    conds = {c.type: c for c in pod.status.conditions or []}
    assert conds["PodScheduled"].status == "False"
    assert conds["PodScheduled"].reason == "Unschedulable"


def _training_job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "perfsched.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {
            "model": "resnet50",
            "dataset": "imagenet",
            "batchSize": 256,
            "work": {"iterations": 1000},
            "replicas": {"max": 2, "gpusPerReplica": 1},
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "worker", "image": "x"}]}
            },
        },
    }


@pytest.mark.parametrize("owner_kind", ["ConfigMap", "TrainingJob"])
def test_deleting_an_owner_deletes_its_pods(
    kube_cluster: KubeCluster, fresh_namespace: str, owner_kind: str
) -> None:
    ns, core = fresh_namespace, kube_cluster.core
    name = f"owner-{uuid.uuid4().hex[:6]}"
    if owner_kind == "ConfigMap":
        owner = core.create_namespaced_config_map(ns, {"metadata": {"name": name}})
        api_version, uid = "v1", owner.metadata.uid
    else:
        tj = kube_cluster.custom.create_namespaced_custom_object(
            "perfsched.dev", "v1alpha1", ns, "trainingjobs", _training_job(name)
        )
        api_version, uid = "perfsched.dev/v1alpha1", tj["metadata"]["uid"]
    ref = {"apiVersion": api_version, "kind": owner_kind, "name": name, "uid": uid}
    pods = [f"{name}-w{i}" for i in range(2)]
    for pod in pods:
        # default-scheduler: this test is about the garbage collector, not the extender
        core.create_namespaced_pod(ns, gpu_pod(pod, 1, scheduler_name="default-scheduler", owner=ref))
    for pod in pods:
        _phase_history(core, ns, pod, {"Running"}, timeout=30)

    if owner_kind == "ConfigMap":
        core.delete_namespaced_config_map(name, ns, propagation_policy="Background")
    else:
        kube_cluster.custom.delete_namespaced_custom_object(
            "perfsched.dev", "v1alpha1", ns, "trainingjobs", name, propagation_policy="Background"
        )

    def gone() -> bool:
        left = {p.metadata.name for p in core.list_namespaced_pod(ns).items}
        return not (left & set(pods))

    wait_until(gone, 60, f"the garbage collector to delete the pods of {owner_kind} {name}")
