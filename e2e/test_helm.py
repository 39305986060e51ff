"""The Helm chart against the real kube-apiserver of the e2e control plane.

- Every rendered manifest (default and non-default values) passes a server-side dry-run apply, and a
  manifest the API server must refuse is refused (so the check can fail).
- ``helm install`` creates the CRD, RBAC and the three Deployments, whose pods run on a CPU KWOK node;
  ``helm upgrade`` changes a Deployment; ``helm uninstall`` removes what it installed and keeps the CRD.

The harness's controller manager runs only the controllers the scheduler tests need, so the install test
starts a second kube-controller-manager with the deployment, replicaset and disruption controllers.
"""

from __future__ import annotations

import copy
import os
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.conftest import StartComponent
from e2e.harness import KubeCluster, wait_until
from tests.deploy.conftest import CHART, KUBE_VERSION, helm_binary

#: a CPU node for perfsched's own pods: KWOK manages it (annotation), GPU pods stay off it (taint)
SYSTEM_NODE_LABEL = "perfsched.dev/role"
SYSTEM_VALUES = {
    component: {
        "nodeSelector": {SYSTEM_NODE_LABEL: "system"},
        "tolerations": [
            {"key": SYSTEM_NODE_LABEL, "operator": "Equal", "value": "system", "effect": "NoSchedule"}
        ],
    }
    for component in ("extender", "operator", "kubeScheduler")
}


@pytest.fixture(scope="module")
def helm() -> Path:
    path = helm_binary()
    if path is None:
        pytest.skip("helm is not installed: run `bash e2e/install-tools.sh`")
    return path


def run_helm(helm: Path, kube: KubeCluster, *args: str, timeout: float = 300) -> str:
    home = Path(tempfile.gettempdir()) / "perfsched-e2e-helm"
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    out = subprocess.run(
        [str(helm), "--kubeconfig", kube.kubeconfig, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    assert out.returncode == 0, f"helm {' '.join(args)}:\n{out.stdout}\n{out.stderr}"
    return out.stdout


def render(helm: Path, namespace: str, release: str, *sets: str) -> list[dict[str, Any]]:
    args = [str(helm), "template", release, str(CHART), "-n", namespace, "--include-crds", *KUBE_VERSION]
    for s in sets:
        args += ["--set", s]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def dry_run_apply(kube: KubeCluster, doc: dict[str, Any], namespace: str) -> None:
    from kubernetes.dynamic import DynamicClient

    dyn = DynamicClient(kube.api)
    res = dyn.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
    ns = doc["metadata"].get("namespace", namespace) if res.namespaced else None
    dyn.server_side_apply(
        res, body=doc, namespace=ns, field_manager="perfsched-e2e", dry_run="All", force_conflicts=True
    )


@pytest.mark.parametrize(
    "sets",
    [
        (),
        (
            "tls.enabled=true",
            "operator.replicas=2",
            "extender.replicas=3",
            "extender.preempt=true",
            "kubeScheduler.leaderElection.enabled=false",
            "operator.policy=fifo",
            "logLevel=DEBUG",
        ),
        (
            "kubeScheduler.enabled=false",
            "extender.podDisruptionBudget.enabled=false",
            "grafana.dashboard.enabled=false",
            "serviceAccount.create=true",
        ),
    ],
)
def test_rendered_manifests_pass_server_side_dry_run(
    kube_cluster: KubeCluster, fresh_namespace: str, helm: Path, sets: tuple[str, ...]
) -> None:
    release = f"dry{uuid.uuid4().hex[:5]}"
    docs = render(helm, fresh_namespace, release, *sets)
    applied = []
    for doc in docs:
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # Prometheus Operator CRDs are not installed in the e2e cluster
        dry_run_apply(kube_cluster, doc, fresh_namespace)
        applied.append(f"{doc['kind']}/{doc['metadata']['name']}")
    assert any(a.startswith("Deployment/") for a in applied)
    assert "CustomResourceDefinition/trainingjobs.perfsched.dev" in applied
    # a dry run creates nothing
    from kubernetes import client as k8s

    assert not k8s.AppsV1Api(kube_cluster.api).list_namespaced_deployment(fresh_namespace).items


def test_the_api_server_refuses_a_broken_manifest(
    kube_cluster: KubeCluster, fresh_namespace: str, helm: Path
) -> None:
    from kubernetes.dynamic.exceptions import DynamicApiError

    docs = render(helm, fresh_namespace, "broken")
    dep = copy.deepcopy(next(d for d in docs if d["kind"] == "Deployment"))
    dep["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = 70000
    with pytest.raises(DynamicApiError) as err:
        dry_run_apply(kube_cluster, dep, fresh_namespace)
    assert err.value.status == 422
    assert "containerPort" in str(err.value.body)


@pytest.fixture
def workload_controllers(kube_cluster: KubeCluster, start_component: StartComponent, tmp_path: Path) -> None:
    """A kube-controller-manager running the controllers that turn Deployments into pods."""
    from perfsched_dev.devcluster.process import free_ports
    from perfsched_dev.devcluster.tools import find_tools

    if not kube_cluster.local:
        return  # an external cluster (kind) runs all controllers already
    (port,) = free_ports(1)
    kcm = find_tools().kube_controller_manager
    start_component(
        [
            str(kcm),
            f"--kubeconfig={kube_cluster.kubeconfig}",
            f"--authentication-kubeconfig={kube_cluster.kubeconfig}",
            f"--authorization-kubeconfig={kube_cluster.kubeconfig}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={tmp_path / 'kcm-pki'}",
            "--controllers=deployment-controller,replicaset-controller,disruption-controller",
            "--use-service-account-credentials=false",
        ],
        name="kcm-workloads",
    )


@pytest.fixture
def system_node(kube_cluster: KubeCluster) -> Iterator[str]:
    name = f"perfsched-system-{uuid.uuid4().hex[:5]}"
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "type": "kwok",
                SYSTEM_NODE_LABEL: "system",
            },
        },
        "spec": {"taints": [{"key": SYSTEM_NODE_LABEL, "value": "system", "effect": "NoSchedule"}]},
        "status": {
            "allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"},
            "capacity": {"cpu": "32", "memory": "128Gi", "pods": "110"},
        },
    }
    kube_cluster.core.create_node(node)
    yield name
    kube_cluster.core.delete_node(name)


def deployments(kube: KubeCluster, namespace: str) -> dict[str, Any]:
    from kubernetes import client as k8s

    return {d.metadata.name: d for d in k8s.AppsV1Api(kube.api).list_namespaced_deployment(namespace).items}


def test_helm_install_upgrade_uninstall(
    kube_cluster: KubeCluster,
    fresh_namespace: str,
    helm: Path,
    workload_controllers: None,
    system_node: str,
    tmp_path: Path,
) -> None:
    from kubernetes import client as k8s

    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(SYSTEM_VALUES))
    release = f"ps{uuid.uuid4().hex[:5]}"
    full = f"{release}-perfsched"

    out = run_helm(
        helm,
        kube_cluster,
        "install",
        release,
        str(CHART),
        "-n",
        fresh_namespace,
        "-f",
        str(values),
        "--wait",
        "--timeout",
        "180s",
    )
    # NOTES.txt says what was installed and how to look at it
    assert f'installed as release "{release}" in namespace "{fresh_namespace}"' in out
    assert "kubectl get tj" in out

    ext = k8s.ApiextensionsV1Api(kube_cluster.api).read_custom_resource_definition(
        "trainingjobs.perfsched.dev"
    )
    assert ext.spec.names.short_names == ["tj"]
    rbac = k8s.RbacAuthorizationV1Api(kube_cluster.api)
    roles = {r.metadata.name for r in rbac.list_cluster_role().items}
    assert {f"{full}-extender", f"{full}-operator"} <= roles
    deps = deployments(kube_cluster, fresh_namespace)
    ready = {name: d.status.ready_replicas for name, d in deps.items()}
    assert ready == {f"{full}-extender": 2, f"{full}-operator": 1, f"{full}-scheduler": 1}
    pods = kube_cluster.core.list_namespaced_pod(fresh_namespace).items
    assert len(pods) == 4
    assert {p.spec.node_name for p in pods} == {system_node}
    assert {p.status.phase for p in pods} == {"Running"}
    assert all(p.spec.security_context.run_as_non_root for p in pods)

    # upgrade: one more extender replica, the release goes to revision 2
    run_helm(
        helm,
        kube_cluster,
        "upgrade",
        release,
        str(CHART),
        "-n",
        fresh_namespace,
        "--reuse-values",
        "--set",
        "extender.replicas=3",
        "--wait",
        "--timeout",
        "180s",
    )
    assert deployments(kube_cluster, fresh_namespace)[f"{full}-extender"].status.ready_replicas == 3
    history = yaml.safe_load(
        run_helm(helm, kube_cluster, "history", release, "-n", fresh_namespace, "-o", "yaml")
    )
    assert [h["revision"] for h in history] == [1, 2]
    assert history[-1]["status"] == "deployed"

    # uninstall: the Deployments and cluster roles go, the CRD stays (Helm never deletes crds/)
    run_helm(helm, kube_cluster, "uninstall", release, "-n", fresh_namespace, "--wait", "--timeout", "120s")
    wait_until(lambda: not deployments(kube_cluster, fresh_namespace), 60, "deployments deleted")
    roles = {r.metadata.name for r in rbac.list_cluster_role().items}
    assert not {f"{full}-extender", f"{full}-operator"} & roles
    k8s.ApiextensionsV1Api(kube_cluster.api).read_custom_resource_definition("trainingjobs.perfsched.dev")


def test_the_real_kube_scheduler_accepts_the_rendered_configuration(
    kube_cluster: KubeCluster,
    fresh_namespace: str,
    helm: Path,
    start_component: StartComponent,
    tmp_path: Path,
) -> None:
    """kube-scheduler validates its configuration at start-up (extender weight, verbs, managed
    resources, nodeCacheCapable with bind): it starts with the chart's and takes its leader Lease."""
    from kubernetes import client as k8s

    from perfsched_dev.devcluster.process import free_ports
    from perfsched_dev.devcluster.tools import find_tools

    if not kube_cluster.local:
        pytest.skip("needs the local kube-scheduler binary")
    release = f"ks{uuid.uuid4().hex[:5]}"
    docs = render(helm, fresh_namespace, release, "extender.preempt=true")
    cm = next(
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-scheduler-config")
    )
    config = yaml.safe_load(cm["data"]["scheduler-config.yaml"])
    # in the cluster it uses its ServiceAccount; here the harness's admin kubeconfig
    config["clientConnection"] = {"kubeconfig": kube_cluster.kubeconfig}
    path = tmp_path / "scheduler-config.yaml"
    path.write_text(yaml.safe_dump(config))
    (port,) = free_ports(1)
    sched = start_component(
        [
            str(find_tools().kube_scheduler),
            f"--config={path}",
            f"--secure-port={port}",
            "--bind-address=127.0.0.1",
            f"--cert-dir={tmp_path / 'pki'}",
        ],
        name="kube-scheduler-chart",
    )
    leases = k8s.CoordinationV1Api(kube_cluster.api)
    lease_name = config["leaderElection"]["resourceName"]
    assert lease_name == f"{release}-perfsched-scheduler"

    def holder() -> str:
        if not sched.running:
            raise AssertionError(f"kube-scheduler refused the chart's configuration:\n{sched.log()}")
        try:
            return str(leases.read_namespaced_lease(lease_name, fresh_namespace).spec.holder_identity or "")
        except k8s.ApiException:
            return ""

    assert wait_until(holder, 60, "kube-scheduler to take its Lease")
