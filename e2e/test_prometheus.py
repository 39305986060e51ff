"""A real Prometheus (Debian's ``prometheus``) scrapes the real extender and operator while a TrainingJob runs
through the e2e control plane, and holds every series the Grafana dashboard and the alerts query.

Processes: ``perfsched extender`` (on the port kube-scheduler calls), ``perfsched operator`` and
``perfsched emulate`` (time-scaled) from this checkout, and ``prometheus`` scraping the extender and the
operator every second. One job that finishes (with a deadline) and one that waits for GPUs nobody has
exercise the extender's verbs and the operator's lifecycle metrics.
"""

from __future__ import annotations

import re
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from e2e.conftest import StartComponent
from e2e.harness import KubeCluster, wait_until
from scheduler.names import (
    API_VERSION,
    GROUP,
    TRAININGJOB_KIND,
    TRAININGJOB_PLURAL,
    TRAININGQUEUE_KIND,
    TRAININGQUEUE_PLURAL,
    VERSION,
)
from tests.deploy.conftest import CHART

METRIC = re.compile(r"\bperfsched_[a-zA-Z0-9_]+")


def queried_metrics() -> set[str]:
    import json

    dash = json.loads((CHART / "files" / "perfsched-dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    rules = yaml.safe_load((CHART / "files" / "perfsched-rules.yaml").read_text())
    exprs += [r["expr"] for g in rules["groups"] for r in g["rules"]]
    return {m for e in exprs for m in METRIC.findall(e)}


def job(name: str, iterations: int, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "model": "resnet18",
        "dataset": "cifar10",
        "batchSize": 128,
        "work": {"iterations": iterations},
        "replicas": {"max": 1, "gpusPerReplica": 1},
        "checkpointGraceSeconds": 2,
        "template": {
            "spec": {"containers": [{"name": "worker", "image": "ghcr.io/perfsched/examples-trainer:0.1"}]}
        },
        **extra,
    }
    return {
        "apiVersion": API_VERSION,
        "kind": TRAININGJOB_KIND,
        "metadata": {"name": name},
        "spec": spec,
    }


@pytest.fixture
def team_queue(kube_cluster: KubeCluster) -> Iterator[str]:
    """A TrainingQueue the test's jobs join (so the per-queue series exist), deleted afterwards: queues are
    cluster-scoped, and any queue turns on quota enforcement for every operator."""
    name = f"prom-{uuid.uuid4().hex[:6]}"
    body = {
        "apiVersion": API_VERSION,
        "kind": TRAININGQUEUE_KIND,
        "metadata": {"name": name},
        "spec": {"quotas": [{"gpuType": "*", "nominal": 64}]},
    }
    kube_cluster.custom.create_cluster_custom_object(GROUP, VERSION, TRAININGQUEUE_PLURAL, body)
    yield name
    kube_cluster.custom.delete_cluster_custom_object(GROUP, VERSION, TRAININGQUEUE_PLURAL, name)


def test_prometheus_scrapes_every_series_the_dashboard_uses(
    kube_cluster: KubeCluster,
    team_queue: str,
    fresh_namespace: str,
    start_component: StartComponent,
    start_perfsched_extender: Any,
    tmp_path: Path,
) -> None:
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        pytest.skip("prometheus is not installed: run `bash e2e/install-tools.sh`")
    from perfsched_dev.devcluster.process import free_ports

    operator_port, prom_port = free_ports(2)
    extender = start_perfsched_extender()
    extender_port = kube_cluster.extender_port
    start_component(
        ["perfsched", "operator", "--kubeconfig", kube_cluster.kubeconfig],
        name="perfsched-operator",
        env={
            "PERFSCHED_NAMESPACE": fresh_namespace,
            "PERFSCHED_OPERATOR_METRICS_PORT": str(operator_port),
            "PERFSCHED_OPERATOR_METRICS_HOST": "127.0.0.1",
            "PERFSCHED_OPERATOR_LEASE_NAMESPACE": fresh_namespace,
            "PERFSCHED_OPERATOR_ROUND_PERIOD_SECONDS": "1",
        },
        health_url=f"http://127.0.0.1:{operator_port}/healthz",
    )
    start_component(
        ["perfsched", "emulate", "--kubeconfig", kube_cluster.kubeconfig, "--namespace", fresh_namespace],
        name="perfsched-emulator",
        env={"PERFSCHED_EMULATOR_TIME_SCALE": "100", "PERFSCHED_EMULATOR_REPORT_INTERVAL_SECONDS": "0.5"},
    )
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(CHART / "files" / "perfsched-rules.yaml")],
        "scrape_configs": [
            {
                "job_name": "perfsched-extender",
                "static_configs": [{"targets": [f"127.0.0.1:{extender_port}"]}],
            },
            {
                "job_name": "perfsched-operator",
                "static_configs": [{"targets": [f"127.0.0.1:{operator_port}"]}],
            },
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    base = f"http://127.0.0.1:{prom_port}"
    start_component(
        [
            prometheus,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ],
        name="prometheus",
        health_url=f"{base}/-/ready",
    )

    def query(expr: str) -> list[dict[str, Any]]:
        r = httpx.get(f"{base}/api/v1/query", params={"query": expr}, timeout=5).json()
        assert r["status"] == "success", r
        return list(r["data"]["result"])

    # both targets up
    wait_until(lambda: len([s for s in query("up == 1")]) == 2, 30, "both scrape targets up")

    # a job that finishes before its deadline, and one asking for GPUs no node has (it waits)
    deadline = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
    custom = kube_cluster.custom
    custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        fresh_namespace,
        TRAININGJOB_PLURAL,
        job("finishes", 20000, deadline=deadline, queue=team_queue),
    )
    custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        fresh_namespace,
        TRAININGJOB_PLURAL,
        job("waits", 3000, allowedGPUTypes=["H100"], queue=team_queue),
    )

    def phase(name: str) -> str:
        obj = custom.get_namespaced_custom_object(GROUP, VERSION, fresh_namespace, TRAININGJOB_PLURAL, name)
        return str((obj.get("status") or {}).get("phase") or "")

    wait_until(lambda: phase("finishes") == "Succeeded", 120, "the job to succeed")
    needed = queried_metrics()

    def missing() -> set[str]:
        names = set(httpx.get(f"{base}/api/v1/label/__name__/values", timeout=5).json()["data"])
        return needed - names

    try:
        wait_until(lambda: not missing(), 30, "every dashboard series in Prometheus")
    except AssertionError:
        pytest.fail(
            f"series the dashboard/alerts query but Prometheus never scraped: {sorted(missing())}\n"
            f"extender log:\n{extender.log()}"
        )

    # the dashboard's queries return data (Grafana's $__rate_interval -> 1m). The phase gauge is "as of
    # the operator's last round", and Prometheus scrapes it once a second: the API can show Succeeded a
    # round and a scrape before the series does.
    def phases() -> dict[str, float]:
        result = query("sum by (phase) (perfsched_operator_jobs)")
        return {r["metric"]["phase"]: float(r["value"][1]) for r in result}

    wait_until(lambda: phases().get("Succeeded") == 1.0, 15, "the phase gauge to count the succeeded job")
    by_phase = phases()
    assert by_phase.get("Succeeded") == 1.0
    assert by_phase.get("Pending", 0) + by_phase.get("Admitted", 0) == 1.0  # "waits" is still waiting
    verbs = {r["metric"]["verb"] for r in query("sum by (verb) (perfsched_extender_requests_total)")}
    assert {"filter", "prioritize"} <= verbs  # kube-scheduler binds (the chart's default)
    leader = query("max(perfsched_operator_leader)")
    assert float(leader[0]["value"][1]) == 1.0
    # the alerts load and evaluate in a real Prometheus; none fires on this healthy run
    rules = httpx.get(f"{base}/api/v1/rules", timeout=5).json()["data"]["groups"]
    assert {r["name"] for g in rules for r in g["rules"]} >= {
        "PerfschedOperatorNotLeading",
        "PerfschedExtenderErrors",
    }
    assert all(r["health"] == "ok" for g in rules for r in g["rules"]), rules
    firing = [
        a
        for a in httpx.get(f"{base}/api/v1/alerts", timeout=5).json()["data"]["alerts"]
        if a["state"] == "firing"
    ]
    assert not firing, firing
