"""The extender's gang-plan check against a real API server: a cache whose watch lags (listed once, before
a filler pod was bound by ``nodeName``) must not plan a gang onto the filler's node.

Its own small dev cluster (real etcd and kube-apiserver, two KWOK A100 nodes of 8 GPUs, no scheduler): the
extender's service runs in this process over a ``ClusterCache`` listed before the filler and the gang
exist, reading pods through the real ``KubeListWatch.pods_on`` (field selector, ``NotOlderThan`` the
filtered pod's resourceVersion).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.harness import a100_nodes, e2e_gpu_api, gpu_pod
from perfsched_dev.devcluster.cluster import DevCluster, UpOptions
from perfsched_dev.k8s import bootstrap
from scheduler import metrics
from scheduler.k8s import connect

NS = "plan-check"


@pytest.fixture
def two_node_api(tmp_path: Path) -> Iterator[Any]:
    nodes = a100_nodes(2)
    dc = DevCluster(tmp_path / "dc")
    state = dc.up(UpOptions(nodes=nodes, schedulers=(), gpu_api=e2e_gpu_api()))
    api = connect.api_client(state.kubeconfig)
    try:
        bootstrap.create_namespace(api, NS)
        yield api
    finally:
        api.close()
        dc.down()


def test_a_gang_is_not_planned_onto_a_pod_the_extenders_watch_has_not_delivered(two_node_api: Any) -> None:
    from fastapi.testclient import TestClient
    from kubernetes import client as k8s

    from scheduler.extender import create_app
    from scheduler.k8s.cache import ClusterCache, Kind
    from scheduler.k8s.listwatch import KubeListWatch
    from scheduler.settings import Settings

    api = two_node_api
    core = k8s.CoreV1Api(api)
    source = KubeListWatch(api)
    cache = ClusterCache(source)
    for kind in Kind:  # listed once and never watched: the cache lags everything after this
        cache.sync_once(kind)
    assert cache.free == {"a100-0": 8, "a100-1": 8}
    filler = gpu_pod("filler", 2, scheduler_name="default-scheduler")
    filler["spec"]["nodeName"] = "a100-0"
    core.create_namespaced_pod(NS, filler)
    labels = {
        "perfsched.dev/job-name": "gang",
        "perfsched.dev/generation": "1",
        "perfsched.dev/replica-index": "0",
    }
    annotations = {"perfsched.dev/gpu-type": "A100", "perfsched.dev/world-size": "4"}
    core.create_namespaced_pod(NS, gpu_pod("gang-g1-w0", 2, labels=labels, annotations=annotations))
    # the pod as kube-scheduler sends it (its resourceVersion included)
    pod = api.sanitize_for_serialization(core.read_namespaced_pod("gang-g1-w0", NS))

    def replanned() -> float:
        labels = {"result": "replanned"}
        return metrics.REGISTRY.get_sample_value("perfsched_extender_plan_checks_total", labels) or 0.0

    before = replanned()
    client = TestClient(create_app(Settings(), cache, None, reader=source))
    body = client.post("/filter", json={"Pod": pod, "NodeNames": ["a100-0", "a100-1"]}).json()
    assert body["Error"] == ""
    # the 4 x 2-GPU gang fits only on a100-1 whole: planned on the cache alone it would start on a100-0
    assert body["NodeNames"] == ["a100-1"], body
    assert replanned() == before + 1
    assert cache.free["a100-0"] == 6  # the filler is counted until a watch would show it
