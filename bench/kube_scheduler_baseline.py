"""Scheduling throughput of the real kube-scheduler on KWOK GPU nodes, in pods per second.

The baseline the extender is compared against: N fake nodes (8 GPUs each) and M one-GPU pods. All pods
are created *before* the scheduler starts, so the figure is the scheduler's pace and not the client's
pod-creation rate. Bind times come from each pod's ``PodScheduled`` condition (1 s resolution), so
``pods_per_s = (M - 1) / (last bind - first bind)``; the wall time from starting the scheduler until every
pod is bound is reported too. KWOK keeps running (it turns bound pods Running, as kubelets would).

``run_scheduling_bench(nodes, pods, extender_argv=None, tuning=...)`` is reusable: without an extender it
measures the ``default-scheduler`` profile (no extender); with ``extender_argv(port, kubeconfig)`` it
starts that extender at the cluster's extender URL and measures the ``perfsched`` profile through it.

Run: ``python bench/kube_scheduler_baseline.py [--nodes 500] [--pods 2000] [--qps 50 --burst 100]
[--perfsched-extender]``. Prints the figures and writes ``bench/results/kube_scheduler_baseline.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
from kubernetes import client as k8s

from perfsched_dev.devcluster.cluster import DevCluster, UpOptions
from perfsched_dev.devcluster.configs import SchedulerTuning
from perfsched_dev.devcluster.process import ProcessRecord, spawn
from perfsched_dev.k8s import bootstrap
from scheduler.core.types import Interconnect, Node
from scheduler.k8s import connect

ExtenderArgv = Callable[[int, str], Sequence[str]]
NAMESPACE = "bench"


@dataclass(frozen=True)
class BenchResult:
    nodes: int
    pods: int
    scheduler: str
    qps: float
    burst: int
    pods_per_s: float
    first_to_last_bind_s: float
    wall_s: float
    setup_s: float


def bench_nodes(n: int) -> list[Node]:
    """``n`` KWOK nodes of 8 V100s, one NVLink domain each, 20 to a rack."""
    return [
        Node(
            name=f"bench-{i}",
            gpu_type="V100",
            gpus=8,
            gpu_product="Tesla-V100-SXM2-16GB",
            rack=f"rack-{i // 20}",
            nvlink_domain=f"nvl-{i}",
            interconnect=Interconnect.NVLINK,
        )
        for i in range(n)
    ]


def pod_body(
    name: str,
    scheduler_name: str,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pause pod asking for one GPU."""
    return {
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
        "spec": {
            "schedulerName": scheduler_name,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {
                        "limits": {"nvidia.com/gpu": "1"},
                        "requests": {"cpu": "100m", "memory": "128Mi"},
                    },
                }
            ],
        },
    }


def start_extender(
    dc: DevCluster,
    state: Any,
    argv: Sequence[str],
    log_path: Path,
    tree: str = "",
    health_path: str = "/readyz",
) -> ProcessRecord:
    """Start an extender (``argv``, from source tree ``tree`` if given) at the cluster's extender port,
    have ``dc.down`` stop it, and wait until ``health_path`` answers 200."""
    port = state.ports["extender"]
    env = {"PYTHONPATH": tree} if tree else None
    _proc, record = spawn("extender", list(argv), log_path, env, Path(tree) if tree else None)
    dc.add_process(record)
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}{health_path}", timeout=2).status_code == 200:
                return record
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"extender not ready; see {record.log_path}")
        time.sleep(0.25)


def _unbound(core: k8s.CoreV1Api) -> int:
    resp = core.list_namespaced_pod(
        NAMESPACE, field_selector="spec.nodeName=", limit=1, _preload_content=False
    )
    data = orjson.loads(resp.data)
    return len(data.get("items") or []) + int((data.get("metadata") or {}).get("remainingItemCount") or 0)


def _bind_times(core: k8s.CoreV1Api) -> list[float]:
    resp = core.list_namespaced_pod(NAMESPACE, _preload_content=False)
    times = []
    for pod in orjson.loads(resp.data)["items"]:
        for cond in pod.get("status", {}).get("conditions") or []:
            if cond["type"] == "PodScheduled" and cond["status"] == "True":
                times.append(
                    datetime.fromisoformat(cond["lastTransitionTime"].replace("Z", "+00:00")).timestamp()
                )
    return sorted(times)


def run_scheduling_bench(
    num_nodes: int = 500,
    num_pods: int = 2000,
    extender_argv: ExtenderArgv | None = None,
    tuning: SchedulerTuning | None = None,
    timeout_s: float = 900.0,
    extender_health_path: str = "/readyz",
) -> BenchResult:
    """Bring up a dev cluster without schedulers, create the nodes and pods, start one scheduler, time it."""
    tuning = tuning or SchedulerTuning()
    sched = "perfsched" if extender_argv else "default"
    scheduler_name = "perfsched" if extender_argv else "default-scheduler"
    with tempfile.TemporaryDirectory(prefix="perfsched-bench-") as tmp:
        dc = DevCluster(Path(tmp) / "dc")
        t0 = time.monotonic()
        state = dc.up(UpOptions(nodes=bench_nodes(num_nodes), schedulers=(), timeout_s=180))
        try:
            api = connect.api_client(state.kubeconfig)
            core = k8s.CoreV1Api(api)
            bootstrap.create_namespace(api, NAMESPACE)
            with ThreadPoolExecutor(max_workers=16) as pool:
                list(
                    pool.map(
                        lambda i: core.create_namespaced_pod(NAMESPACE, pod_body(f"p-{i}", scheduler_name)),
                        range(num_pods),
                    )
                )
            if extender_argv is not None:
                argv = extender_argv(state.ports["extender"], state.kubeconfig)
                start_extender(
                    dc, state, argv, Path(tmp) / "dc" / "logs" / "extender.log", "", extender_health_path
                )
            setup_s = time.monotonic() - t0
            t_start = time.monotonic()
            dc.start_scheduler(sched, tuning)
            while _unbound(core) > 0:
                if time.monotonic() - t_start > timeout_s:
                    raise RuntimeError(f"{_unbound(core)} pods still unbound after {timeout_s:g}s")
                time.sleep(0.5)
            wall_s = time.monotonic() - t_start
            binds = _bind_times(core)
            api.close()
        finally:
            dc.down()
    span = max(binds[-1] - binds[0], 1.0)
    return BenchResult(
        nodes=num_nodes,
        pods=num_pods,
        scheduler=scheduler_name,
        qps=tuning.qps,
        burst=tuning.burst,
        pods_per_s=round((len(binds) - 1) / span, 1),
        first_to_last_bind_s=round(span, 1),
        wall_s=round(wall_s, 1),
        setup_s=round(setup_s, 1),
    )


def perfsched_extender_argv(port: int, kubeconfig: str) -> list[str]:
    """The real extender, as ``perfsched dev-cluster up --with-perfsched`` starts it."""
    return [sys.executable, "-m", "scheduler.cli", "extender", "--host", "127.0.0.1", "--port", str(port),
            "--kubeconfig", kubeconfig]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument(
        "--qps", type=float, default=50.0, help="kube-scheduler client QPS (upstream default 50)"
    )
    parser.add_argument(
        "--burst", type=int, default=100, help="kube-scheduler client burst (upstream default 100)"
    )
    parser.add_argument(
        "--perfsched-extender", action="store_true", help="measure through `perfsched extender`"
    )
    args = parser.parse_args()
    tuning = SchedulerTuning(qps=args.qps, burst=args.burst)
    result = run_scheduling_bench(
        args.nodes, args.pods, perfsched_extender_argv if args.perfsched_extender else None, tuning
    )
    print(
        f"kube-scheduler ({result.scheduler}, client qps {result.qps:g}/burst {result.burst}): "
        f"{result.pods} pods on {result.nodes} KWOK nodes -> {result.pods_per_s} pods/s "
        f"(first to last bind {result.first_to_last_bind_s} s; "
        f"scheduler start to all bound {result.wall_s} s; "
        f"setup {result.setup_s} s)"
    )
    out = Path(__file__).parent / "results"
    out.mkdir(exist_ok=True)
    record = {**asdict(result), "host": platform.node(), "cpus": os.cpu_count(), "time": time.time()}
    (out / "kube_scheduler_baseline.json").write_text(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
