"""End to end in the emulated cluster: from a TrainingJob's admission to all of its pods Running.

Brings up a dev cluster (real etcd, kube-apiserver, kube-scheduler with the ``perfsched`` profile, KWOK
GPU nodes from a simulator cluster spec), starts ``perfsched extender`` and ``perfsched operator``, and
submits N TrainingJobs at once (gangs of 1-8 GPUs that all fit). A poller (every 0.1 s) records, per job:

- **submit -> admitted**: until the operator's round created the gang's pods (its decision latency,
  bounded by the round period and event-triggered rounds);
- **admitted -> all Running**: until every pod of the gang is Running (kube-scheduler + extender filter,
  prioritize and bind, then KWOK): the figure the issue asks for;
- **submit -> all Running**.

Baseline, same run and cluster: the same gangs created directly as bare pods with ``schedulerName:
perfsched`` (no operator), timed from creation to all Running, which is the floor of "admitted -> all
Running". Prints p50/p90/max and writes ``bench/results/operator_e2e.json``.

Run: ``python bench/operator_e2e.py [--cluster gavel-heterogeneous] [--jobs 40] [--period 2]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from kubernetes import client as k8s

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from perfsched_dev.devcluster.cluster import DevCluster, UpOptions  # noqa: E402
from perfsched_dev.devcluster.process import spawn  # noqa: E402
from perfsched_dev.k8s import bootstrap  # noqa: E402
from scheduler.k8s import connect  # noqa: E402
from scheduler.sim.cluster import load_cluster_spec, node_labels, spec_to_nodes  # noqa: E402

SHAPES = [(1, 1), (1, 2), (2, 1), (1, 4), (2, 2)]  # (replicas, GPUs per replica), cycled
MODELS = [
    ("resnet50", "imagenet", 256),
    ("bert", "squad", 32),
    ("resnet18", "cifar10", 128),
    ("lstm", "wikitext-2", 64),
]


def _tj(i: int) -> dict[str, Any]:
    replicas, gpus = SHAPES[i % len(SHAPES)]
    model, dataset, batch = MODELS[i % len(MODELS)]
    return {
        "apiVersion": "perfsched.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": f"job-{i:03d}"},
        "spec": {
            "model": model,
            "dataset": dataset,
            "batchSize": batch,
            "work": {"iterations": 10_000_000},
            "replicas": {"max": replicas, "gpusPerReplica": gpus},
            "template": {"spec": {"containers": [{"name": "worker", "image": "registry.k8s.io/pause:3.10"}]}},
        },
    }


def _bare_pod(i: int, rank: int) -> dict[str, Any]:
    replicas, gpus = SHAPES[i % len(SHAPES)]
    del replicas
    return {
        "metadata": {"name": f"bare-{i:03d}-{rank}", "labels": {"bench-gang": f"g{i:03d}"}},
        "spec": {
            "schedulerName": "perfsched",
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ],
        },
    }


def _wait_http(url: str, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    raise RuntimeError(f"{what} not healthy at {url}")


def _poll(
    core: k8s.CoreV1Api,
    ns: str,
    gang_of: Callable[[dict[str, Any]], str | None],
    sizes: dict[str, int],
    timeout: float,
) -> tuple[dict[str, float], dict[str, float]]:
    """Monotonic times at which each gang's first pod appeared and all its pods were Running."""
    first_seen: dict[str, float] = {}
    all_running: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while len(all_running) < len(sizes):
        if time.monotonic() > deadline:
            missing = sorted(set(sizes) - set(all_running))
            raise RuntimeError(f"{len(missing)} gangs not Running after {timeout:g}s: {missing[:5]}")
        now = time.monotonic()
        resp = core.list_namespaced_pod(ns, _preload_content=False)
        running: dict[str, int] = {}
        for pod in json.loads(resp.data)["items"]:
            gang = gang_of(pod)
            if gang is None:
                continue
            first_seen.setdefault(gang, now)
            if (pod.get("status") or {}).get("phase") == "Running":
                running[gang] = running.get(gang, 0) + 1
        for gang, n in running.items():
            if n >= sizes[gang] and gang not in all_running:
                all_running[gang] = now
        time.sleep(0.1)
    return first_seen, all_running


def _stats(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {
        "p50": round(statistics.median(xs), 2),
        "p90": round(xs[min(len(xs) - 1, int(0.9 * len(xs)))], 2),
        "max": round(xs[-1], 2),
        "mean": round(statistics.fmean(xs), 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", default="gavel-heterogeneous", help="simulator cluster spec (name or file)")
    ap.add_argument("--jobs", type=int, default=40)
    ap.add_argument("--period", type=float, default=2.0, help="operator round period (s)")
    ap.add_argument("--policy", default="fifo")
    ap.add_argument("--keep-log", default="", help="copy the operator's log here")
    args = ap.parse_args()

    spec = load_cluster_spec(args.cluster)
    nodes = spec_to_nodes(spec)
    capacity = sum(n.gpus for n in nodes)
    need = sum(r * g for r, g in (SHAPES[i % len(SHAPES)] for i in range(args.jobs)))
    if need > capacity:
        raise SystemExit(f"{args.jobs} jobs need {need} GPUs, cluster {args.cluster} has {capacity}")
    sizes = {f"g{i:03d}": SHAPES[i % len(SHAPES)][0] for i in range(args.jobs)}
    result: dict[str, Any] = {
        "cluster": args.cluster,
        "nodes": len(nodes),
        "gpus": capacity,
        "jobs": args.jobs,
    }
    with tempfile.TemporaryDirectory(prefix="perfsched-opbench-") as tmp:
        dc = DevCluster(Path(tmp) / "dc")
        t0 = time.monotonic()
        state = dc.up(UpOptions(nodes=nodes, node_labels=node_labels(spec), timeout_s=180))
        try:
            api = connect.api_client(state.kubeconfig)
            core = k8s.CoreV1Api(api)
            custom = k8s.CustomObjectsApi(api)
            port = state.ports["extender"]
            env = {**os.environ, "KUBECONFIG": state.kubeconfig}
            _p, rec = spawn(
                "extender",
                [
                    sys.executable,
                    "-m",
                    "scheduler.cli",
                    "extender",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--kubeconfig",
                    state.kubeconfig,
                ],
                Path(tmp) / "extender.log",
                env=env,
            )
            dc.add_process(rec)
            _wait_http(f"http://127.0.0.1:{port}/readyz", "extender")
            for ns in ("bench-bare", "bench-op"):
                bootstrap.create_namespace(api, ns)
                bootstrap.wait_service_account(api, ns)
            result["setup_s"] = round(time.monotonic() - t0, 1)

            # --- baseline: the same gangs as bare pods, no operator ------------------------------------
            created: dict[str, float] = {}
            t_create = time.monotonic()
            for i in range(args.jobs):
                created[f"g{i:03d}"] = time.monotonic()
                for rank in range(SHAPES[i % len(SHAPES)][0]):
                    core.create_namespaced_pod("bench-bare", _bare_pod(i, rank))
            n_pods = sum(sizes.values())
            result["api_create_pod_ms_sequential"] = round(1000 * (time.monotonic() - t_create) / n_pods, 1)
            _, bare_running = _poll(
                core,
                "bench-bare",
                lambda p: (p["metadata"].get("labels") or {}).get("bench-gang"),
                sizes,
                300,
            )
            bare = [bare_running[g] - created[g] for g in sizes]
            core.delete_collection_namespaced_pod("bench-bare", grace_period_seconds=0)
            while core.list_namespaced_pod("bench-bare").items:
                time.sleep(0.2)

            # --- with the operator ------------------------------------------------------------------------
            op_env = {
                **env,
                "PERFSCHED_NAMESPACE": "bench-op",
                "PERFSCHED_OPERATOR_POLICY": args.policy,
                "PERFSCHED_OPERATOR_POLICY_CONFIG": '{"backfill": true}' if args.policy == "fifo" else "{}",
                "PERFSCHED_OPERATOR_ROUND_PERIOD_SECONDS": str(args.period),
                "PERFSCHED_OPERATOR_LEASE_NAMESPACE": "bench-op",
                "PERFSCHED_OPERATOR_METRICS_PORT": "0",
            }
            _p, rec = spawn(
                "operator",
                [sys.executable, "-m", "scheduler.cli", "operator"],
                Path(tmp) / "operator.log",
                env=op_env,
            )
            dc.add_process(rec)
            time.sleep(3.0)  # let it take the Lease before the jobs arrive
            submitted: dict[str, float] = {}
            for i in range(args.jobs):
                submitted[f"g{i:03d}"] = time.monotonic()
                custom.create_namespaced_custom_object(
                    "perfsched.dev", "v1alpha1", "bench-op", "trainingjobs", _tj(i)
                )

            def gang(p: dict[str, Any]) -> str | None:
                job = (p["metadata"].get("labels") or {}).get("perfsched.dev/job-name")
                return f"g{job[4:]}" if job else None

            admitted, running = _poll(core, "bench-op", gang, sizes, 300)
            api.close()
        finally:
            dc.down()
            if args.keep_log:
                Path(args.keep_log).write_bytes((Path(tmp) / "operator.log").read_bytes())
    result["baseline_bare_pods_created_to_running_s"] = _stats(bare)
    result["submit_to_admitted_s"] = _stats([admitted[g] - submitted[g] for g in sizes])
    result["admitted_to_all_running_s"] = _stats([running[g] - admitted[g] for g in sizes])
    result["submit_to_all_running_s"] = _stats([running[g] - submitted[g] for g in sizes])
    result["round_period_s"] = args.period
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "operator_e2e.json").write_text(json.dumps(result, indent=2))
    print(
        f"{args.jobs} TrainingJobs ({need} GPUs) on {len(nodes)} KWOK nodes / {capacity} GPUs "
        f"({args.cluster}), policy {args.policy}, round period {args.period:g} s; setup {result['setup_s']} s"
    )
    print(
        f"  (one pod create call from this client, sequential: {result['api_create_pod_ms_sequential']} ms)"
    )
    for label, key in (
        ("baseline: bare gang pods created -> all Running", "baseline_bare_pods_created_to_running_s"),
        ("operator: submit -> admitted (pods created)", "submit_to_admitted_s"),
        ("operator: admitted -> all pods Running", "admitted_to_all_running_s"),
        ("operator: submit -> all pods Running", "submit_to_all_running_s"),
    ):
        s = result[key]
        print(f"  {label:<50} p50 {s['p50']:>6} s  p90 {s['p90']:>6} s  max {s['max']:>6} s")


if __name__ == "__main__":
    main()
