"""The opt-in bind verb end to end: kube-scheduler (``bindVerb`` set, as chart ``extender.bind: true``)
asks the real ``perfsched extender`` over HTTP to bind a gang, and the gang gets its placement.

The session cluster runs the default mode (kube-scheduler binds), so this test brings up its own small
dev cluster: real etcd, kube-apiserver and one kube-scheduler (profile ``perfsched``,
``SchedulerTuning(extender_binds=True)``), two KWOK A100 nodes of 8 GPUs in one rack.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from e2e.harness import Component, a100_nodes, e2e_gpu_api, gpu_pod, resnet_job, wait_until
from perfsched_dev.devcluster.cluster import DevCluster, UpOptions
from perfsched_dev.devcluster.configs import SchedulerTuning
from perfsched_dev.k8s import bootstrap
from scheduler.k8s import connect

NS = "bind-verb"


@pytest.fixture
def binding_cluster(tmp_path: Path) -> Iterator[tuple[Any, str]]:
    """A dev cluster whose kube-scheduler calls the extender's bind verb, and the extender's URL."""
    nodes = a100_nodes(2)
    dc = DevCluster(tmp_path / "dc")
    state = dc.up(UpOptions(nodes=nodes, schedulers=(), gpu_api=e2e_gpu_api()))
    api = connect.api_client(state.kubeconfig)
    try:
        port = state.ports["extender"]
        argv = ["perfsched", "extender", "--host", "127.0.0.1", "--port", str(port)]
        extender = Component(
            "extender",
            [*argv, "--kubeconfig", state.kubeconfig],
            tmp_path / "components",
            env={"KUBECONFIG": state.kubeconfig},
            health_url=f"http://127.0.0.1:{port}/readyz",
        ).start(90)
        assert extender.record is not None
        dc.add_process(extender.record)
        dc.start_scheduler("perfsched", SchedulerTuning(extender_binds=True))
        bootstrap.create_namespace(api, NS)
        yield api, f"http://127.0.0.1:{port}"
    finally:
        api.close()
        dc.down()


def _binds(extender_url: str) -> dict[str, float]:
    """``perfsched_extender_binds_total`` by result, from the extender's /metrics."""
    out: dict[str, float] = {}
    for line in httpx.get(f"{extender_url}/metrics", timeout=5).text.splitlines():
        if line.startswith('perfsched_extender_binds_total{result="'):
            out[line.split('"')[1]] = float(line.rsplit(" ", 1)[1])
    return out


def test_a_gang_binds_through_the_extenders_bind_verb_and_gets_its_placement(
    binding_cluster: tuple[Any, str],
) -> None:
    from kubernetes import client as k8s

    api, extender_url = binding_cluster
    core, custom = k8s.CoreV1Api(api), k8s.CustomObjectsApi(api)
    job = resnet_job("gang", 4, 2)
    custom.create_namespaced_custom_object("perfsched.dev", "v1alpha1", NS, "trainingjobs", job)
    # a node already half used: the 4 x 2-GPU gang fits only on the other one, whole
    filler = gpu_pod("filler", 2, scheduler_name="default-scheduler")
    filler["spec"]["nodeName"] = "a100-0"
    core.create_namespaced_pod(NS, filler)
    # the gang's pods come at once: its first replica may be filtered before the extender's watch delivers
    # the filler, and the extender's check of the gang's plan against the API server must still see it
    labels = {"perfsched.dev/job-name": "gang", "perfsched.dev/generation": "1"}
    for i in range(4):
        pod = gpu_pod(
            f"gang-g1-w{i}",
            2,
            labels={**labels, "perfsched.dev/replica-index": str(i)},
            annotations={"perfsched.dev/gpu-type": "A100", "perfsched.dev/world-size": "4"},
        )
        core.create_namespaced_pod(NS, pod)

    def bound() -> dict[str, str]:
        pods = core.list_namespaced_pod(NS, label_selector="perfsched.dev/job-name=gang").items
        return {p.metadata.name: p.spec.node_name for p in pods if p.spec.node_name}

    wait_until(lambda: len(bound()) == 4, 90, "the 4 replicas to be bound")
    placed = bound()
    assert set(placed.values()) == {"a100-1"}, placed
    # the extender made the Bindings (kube-scheduler's own binder would leave this counter at 0)
    assert _binds(extender_url).get("success") == 4.0, _binds(extender_url)
    status = wait_until(
        lambda: (
            (
                o := custom.get_namespaced_custom_object(
                    "perfsched.dev", "v1alpha1", NS, "trainingjobs", "gang"
                )
            )
            and len(placement := (o.get("status") or {}).get("placement") or {}) == 4
            and placement
        ),
        30,
        "status.placement of the gang",
    )
    assert status == placed
