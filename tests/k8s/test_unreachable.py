"""Every ``scheduler.k8s`` adapter against a real port nothing listens on: each raises a perfsched error
(``ApiUnavailable``, or the adapter's own temporary error), never a ``urllib3``/socket exception."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client as k8s

from perfsched_dev.devcluster.process import free_ports
from perfsched_dev.k8s import bootstrap
from scheduler.core.errors import PerfschedError, TemporaryError
from scheduler.k8s.binder import KubeBinder, TemporaryBindError
from scheduler.k8s.cache import Kind
from scheduler.k8s.errors import ApiHealth, ApiUnavailable
from scheduler.k8s.kubeapi import RealKubeApi
from scheduler.k8s.listwatch import KubeListWatch
from scheduler.k8s.workload import KubeWorkload


@pytest.fixture
def refused() -> k8s.ApiClient:
    cfg = k8s.Configuration(host=f"https://127.0.0.1:{free_ports(1)[0]}")
    cfg.verify_ssl = False
    cfg.retries = 0
    return k8s.ApiClient(cfg)


def _kube_api(client: k8s.ApiClient) -> RealKubeApi:
    return RealKubeApi(client, attempts=2, request_timeout_s=2.0, health=ApiHealth("t", count=lambda s: None))


CALLS: list[tuple[str, Callable[[k8s.ApiClient], Any]]] = [
    ("kubeapi list_pods", lambda c: _kube_api(c).list_pods()),
    ("kubeapi list_trainingjobs", lambda c: _kube_api(c).list_trainingjobs("ns")),
    ("kubeapi watch", lambda c: next(iter(_kube_api(c).watch("nodes", timeout_seconds=1)))),
    ("kubeapi get_lease", lambda c: _kube_api(c).get_lease("ns", "lease")),
    ("kubeapi create_pod", lambda c: _kube_api(c).create_pod("ns", {"metadata": {"name": "p"}})),
    ("kubeapi delete_pod", lambda c: _kube_api(c).delete_pod("ns", "p")),
    ("kubeapi patch status", lambda c: _kube_api(c).patch_trainingjob_status("ns", "tj", {"a": 1})),
    ("listwatch list", lambda c: KubeListWatch(c).list(Kind.PODS)),
    ("listwatch watch", lambda c: next(iter(KubeListWatch(c).watch(Kind.NODES, "5", 1)))),
    ("listwatch pods_on", lambda c: KubeListWatch(c).pods_on("n1")),
    ("binder bind", lambda c: KubeBinder(c).bind("ns", "p", "uid", "n1")),
    ("binder record_placement", lambda c: KubeBinder(c).record_placement("ns", "tj", {"p": "n1"})),
    ("workload list_job_pods", lambda c: KubeWorkload(c).list_job_pods()),
    ("workload training_job", lambda c: KubeWorkload(c).training_job("ns", "tj")),
    ("workload node_labels", lambda c: KubeWorkload(c).node_labels("n1")),
    ("bootstrap create_namespace", lambda c: bootstrap.create_namespace(c, "ns")),
    ("bootstrap delete_namespace", lambda c: bootstrap.delete_namespace(c, "ns")),
]


@pytest.mark.parametrize(("what", "call"), CALLS, ids=[w for w, _ in CALLS])
def test_an_unreachable_api_server_is_a_temporary_perfsched_error(
    refused: k8s.ApiClient, what: str, call: Callable[[k8s.ApiClient], Any]
) -> None:
    with pytest.raises(PerfschedError) as info:
        call(refused)
    assert isinstance(info.value, TemporaryError), (what, type(info.value))
    assert isinstance(info.value, ApiUnavailable | TemporaryBindError), (what, type(info.value))
    assert "unreachable" in str(info.value) or "gave up" in str(info.value), str(info.value)


def test_the_operator_api_reports_the_outage_to_its_health(refused: k8s.ApiClient) -> None:
    health = ApiHealth("operator", count=lambda s: None)
    api = RealKubeApi(refused, attempts=2, request_timeout_s=2.0, health=health)
    with pytest.raises(ApiUnavailable, match="gave up after 2 attempts"):
        api.list_nodes()
    assert not health.available() and health.outages == 1
