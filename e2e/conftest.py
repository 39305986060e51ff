"""pytest fixtures for end-to-end tests against a real Kubernetes control plane.

- ``kube_cluster`` (session): brings up ``perfsched dev-cluster`` once per session in a temporary state
  directory, with the KWOK GPU nodes of ``e2e/clusters/e2e-small.yaml`` (``PERFSCHED_E2E_CLUSTER``
  overrides the spec; ``PERFSCHED_E2E_GPU_API`` = ``dra`` or ``mixed`` publishes their GPUs as DRA
  devices, ``PERFSCHED_K8S_VERSION`` picks the Kubernetes binaries, ``PERFSCHED_E2E_WORKLOAD_API=1``
  serves the gang API and ``PERFSCHED_E2E_OPPORTUNISTIC_BATCHING=0`` turns kube-scheduler's batching off),
  and tears it down at the end.
  With ``PERFSCHED_E2E_KUBECONFIG`` it uses that cluster instead (e.g. kind, see ``e2e/kind/``) and
  starts nothing; ``PERFSCHED_E2E_EXTENDER_URL`` then says where that cluster's scheduler calls the extender.
- ``fresh_namespace``: a new namespace per test (its ``default`` ServiceAccount ready), deleted after.
- ``start_component``: start a process against the cluster (``["perfsched", "extender", ...]`` runs
  with this interpreter, ``KUBECONFIG`` is set); returns a ``harness.Component`` that can be killed,
  stopped and restarted; everything still running is stopped at test teardown.
- ``start_perfsched_extender``: the real ``perfsched extender`` on the port the cluster's
  kube-scheduler calls (only one extender can listen there at a time).

Tests in this directory are marked ``e2e`` automatically.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from e2e.harness import REPO, Component, KubeCluster, e2e_gpu_api

E2E_KUBECONFIG_ENV = "PERFSCHED_E2E_KUBECONFIG"
E2E_CLUSTER_ENV = "PERFSCHED_E2E_CLUSTER"
E2E_EXTENDER_URL_ENV = "PERFSCHED_E2E_EXTENDER_URL"
#: "1": the control plane serves the gang API (``dev-cluster up --workload-api``); e2e/test_workload_api.py
E2E_WORKLOAD_API_ENV = "PERFSCHED_E2E_WORKLOAD_API"
#: "0": kube-scheduler runs with the OpportunisticBatching feature gate off
E2E_BATCHING_ENV = "PERFSCHED_E2E_OPPORTUNISTIC_BATCHING"
DEFAULT_SPEC = REPO / "e2e" / "clusters" / "e2e-small.yaml"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    from scheduler.k8s import connect

    external = os.environ.get(E2E_KUBECONFIG_ENV)
    if external:
        api = connect.api_client(external)
        host = api.configuration.host
        yield KubeCluster(
            kubeconfig=external,
            endpoints={"apiserver": host},
            api=api,
            extender_url=os.environ.get(E2E_EXTENDER_URL_ENV, ""),
        )
        api.close()
        return

    from perfsched_dev.devcluster.cluster import DevCluster, UpOptions
    from perfsched_dev.devcluster.tools import DevClusterError
    from scheduler.sim.cluster import load_cluster_spec, node_labels, spec_to_nodes

    spec = load_cluster_spec(os.environ.get(E2E_CLUSTER_ENV) or DEFAULT_SPEC)
    dc = DevCluster(tmp_path_factory.mktemp("dev-cluster"))
    try:
        state = dc.up(
            UpOptions(
                nodes=spec_to_nodes(spec),
                node_labels=node_labels(spec),
                gpu_api=e2e_gpu_api(),
                workload_api=os.environ.get(E2E_WORKLOAD_API_ENV) == "1",
                opportunistic_batching=os.environ.get(E2E_BATCHING_ENV) != "0",
            )
        )
    except DevClusterError as exc:
        pytest.fail(f"the e2e control plane did not start:\n{exc}", pytrace=False)
    api = connect.api_client(state.kubeconfig)
    try:
        yield KubeCluster(
            kubeconfig=state.kubeconfig,
            endpoints=dict(state.endpoints),
            api=api,
            extender_url=state.extender_url,
            extender_port=state.ports["extender"],
            state_dir=dc.state_dir,
            pids=state.pids,
            logs=state.logs,
        )
    finally:
        api.close()
        dc.down()


@pytest.fixture
def fresh_namespace(kube_cluster: KubeCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    from perfsched_dev.k8s import bootstrap

    base = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40].strip("-")
    name = f"e2e-{base}-{uuid.uuid4().hex[:5]}"
    bootstrap.create_namespace(kube_cluster.api, name, labels={"perfsched.dev/e2e": "true"})
    yield name
    bootstrap.delete_namespace(kube_cluster.api, name)


StartComponent = Callable[..., Component]


@pytest.fixture
def start_component(kube_cluster: KubeCluster, tmp_path: Path) -> Iterator[StartComponent]:
    started: list[Component] = []

    def start(
        argv: Sequence[str],
        name: str | None = None,
        env: Mapping[str, str] | None = None,
        health_url: str = "",
        timeout: float = 60.0,
    ) -> Component:
        full_env = {"KUBECONFIG": kube_cluster.kubeconfig, **(env or {})}
        label = name or (argv[1] if argv[0] == "perfsched" and len(argv) > 1 else Path(argv[0]).name)
        comp = Component(label, argv, tmp_path / "components", env=full_env, health_url=health_url)
        started.append(comp)
        return comp.start(timeout)

    yield start
    for comp in reversed(started):
        comp.stop()


@pytest.fixture
def start_perfsched_extender(
    kube_cluster: KubeCluster, start_component: StartComponent
) -> Callable[..., Component]:
    def start(env: Mapping[str, str] | None = None, timeout: float = 90.0) -> Component:
        if kube_cluster.extender_port is None:
            pytest.skip("the external cluster's extender is not started by the tests")
        port = kube_cluster.extender_port
        return start_component(
            [
                "perfsched",
                "extender",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--kubeconfig",
                kube_cluster.kubeconfig,
            ],
            name="perfsched-extender",
            env=env,
            health_url=f"http://127.0.0.1:{port}/readyz",
            timeout=timeout,
        )

    return start
