"""What the extender's gang-plan check costs on a real API server: one node's pods against every pod.

Before filter passes the nodes of a gang's plan that no read has covered, the extender reads the pods bound
to each of them from the API server (``KubeListWatch.pods_on``: a pod list with a ``spec.nodeName`` field
selector at least as new as the filtered pod's resourceVersion, ``resourceVersionMatch=NotOlderThan``,
which the API server serves from its watch cache). Measured against the same list as a consistent read
(no resourceVersion: the API server first learns etcd's current revision) and against re-listing every
pod (``KubeListWatch.list(Kind.PODS)``, what the cache's relist does). This brings up a dev
cluster (real etcd and kube-apiserver, ``--nodes`` KWOK nodes of 8 GPUs), binds ``--pods`` one-GPU pods
spread over the nodes by ``nodeName``, and times the three reads, ``--calls`` each, in turn, on one
connection pool (ms: min / p50 / p99).

Run: ``python bench/plan_check_read.py [--nodes 500] [--pods 2000] [--calls 100] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from kube_scheduler_baseline import NAMESPACE, bench_nodes, pod_body  # noqa: E402
from kubernetes import client as k8s  # noqa: E402

from perfsched_dev.devcluster.cluster import DevCluster, UpOptions  # noqa: E402
from perfsched_dev.k8s import bootstrap  # noqa: E402
from scheduler.k8s import connect  # noqa: E402
from scheduler.k8s.cache import Kind  # noqa: E402
from scheduler.k8s.listwatch import KubeListWatch  # noqa: E402


def _ms(samples: list[float]) -> dict[str, float]:
    s = sorted(samples)
    return {
        "min": round(s[0] * 1000, 2),
        "p50": round(statistics.median(s) * 1000, 2),
        "p99": round(s[min(len(s) - 1, int(0.99 * len(s)))] * 1000, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=500)
    ap.add_argument("--pods", type=int, default=2000)
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.nodes < 1 or args.pods < 0 or args.calls < 1:
        sys.exit("plan_check_read: --nodes and --calls must be >= 1 and --pods >= 0")
    with tempfile.TemporaryDirectory(prefix="perfsched-plan-check-") as tmp:
        dc = DevCluster(Path(tmp) / "dc")
        state = dc.up(UpOptions(nodes=bench_nodes(args.nodes), schedulers=(), timeout_s=300))
        try:
            api = connect.api_client(state.kubeconfig)
            core = k8s.CoreV1Api(api)
            bootstrap.create_namespace(api, NAMESPACE)
            bodies = []
            for i in range(args.pods):
                body = pod_body(f"p-{i}", "default-scheduler")
                body["spec"]["nodeName"] = f"bench-{i % args.nodes}"
                bodies.append(body)
            with ThreadPoolExecutor(max_workers=8) as pool:
                list(pool.map(lambda body: core.create_namespaced_pod(NAMESPACE, body), bodies))
            source = KubeListWatch(api)
            version = core.read_namespaced_pod(f"p-{args.pods - 1}", NAMESPACE).metadata.resource_version
            reads: dict[str, Any] = {
                "one_node_not_older_than_ms": lambda node: source.pods_on(node, version),
                "one_node_consistent_ms": lambda node: source.pods_on(node),
                "every_pod_ms": lambda node: source.list(Kind.PODS)[0],
            }
            times: dict[str, list[float]] = {k: [] for k in reads}
            seen: dict[str, int] = {}
            for c in range(args.calls):
                node = f"bench-{c % args.nodes}"
                for key, read in reads.items():
                    t = time.perf_counter()
                    seen[key] = len(read(node))
                    times[key].append(time.perf_counter() - t)
            result = {
                "nodes": args.nodes,
                "pods": args.pods,
                "calls": args.calls,
                **{k: _ms(v) for k, v in times.items()},
                "pods_per_read": seen,
            }
        finally:
            dc.down()
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{args.nodes} KWOK nodes, {args.pods} bound pods, {args.calls} reads each (ms: min / p50 / p99)")
    labels = {
        "one_node_not_older_than_ms": "one node's pods, NotOlderThan (the check)",
        "one_node_consistent_ms": "one node's pods, consistent read",
        "every_pod_ms": "every pod",
    }
    for key, label in labels.items():
        r = result[key]
        print(f"  {label:42s} {r['min']:8.2f} {r['p50']:8.2f} {r['p99']:8.2f}")


if __name__ == "__main__":
    main()
