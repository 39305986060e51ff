"""Admission latency of adopted jobs: seconds and operator rounds from creating a labelled Job, JobSet or
TrainJob to perfsched having admitted it (its ``perfsched.dev/status`` says Running), on a dev cluster of
its own.

The cluster (``e2e/clusters/e2e-small.yaml``, KWOK nodes) runs the batch Job controller, the JobSet and
Trainer controllers when ``PERFSCHED_WITH_JOBSETS=1 bash e2e/install-tools.sh`` built them (else Jobs
only), ``perfsched extender`` and ``perfsched operator`` with its default round period (5 s) serving the
adoption webhook, which wakes the operator on each creation. Each job is 2 pods x 1 GPU of resnet50, made
one after the other; its pods run for 5 s. Rounds are the operator's completed rounds
(``perfsched_operator_rounds_total``) between just before the creation and the admission seen: the round
in flight at creation (if any) plus the one that admitted it, so 2 or less means admitted by the first
round after creation.

Run: ``python bench/adoption_latency.py [--jobs 5] [--json]``; prints the latencies and rounds per kind,
their median and max, and writes ``bench/results/adoption_latency.json``.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ANN = {"perfsched.dev/model": "resnet50", "perfsched.dev/batch-size": "128"}
RUN = {"perfsched.dev/kwok-run-duration": "5s"}
POD = {
    "restartPolicy": "Never",
    "containers": [{"name": "t", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
}


def rounds_done(metrics_url: str) -> float:
    """``perfsched_operator_rounds_total`` summed over results (rounds the operator completed)."""
    import httpx

    text = httpx.get(metrics_url, timeout=5).text
    return sum(float(m) for m in re.findall(r"^perfsched_operator_rounds_total\{[^}]*\} (\S+)$", text, re.M))


def bodies(i: int) -> dict[str, tuple[str, str, str, dict[str, Any]]]:
    meta = {"name": f"b{i}", "labels": {"perfsched.dev/queue": "team-a"}, "annotations": ANN}
    tmpl = {"metadata": {"annotations": RUN}, "spec": POD}
    rj = {
        "name": "w",
        "replicas": 2,
        "template": {"spec": {"parallelism": 1, "completions": 1, "template": tmpl}},
    }
    node = {"name": "node", "template": {"spec": {"template": {"metadata": {"annotations": RUN}}}}}
    patch = {
        "manager": "bench.perfsched.dev/latency",
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [node]}}},
    }
    job_spec = {"parallelism": 2, "completions": 2, "completionMode": "Indexed", "template": tmpl}
    trainer = {"numNodes": 2, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 1}}}
    tj_spec = {"runtimeRef": {"name": "perfsched-torch"}, "trainer": trainer, "runtimePatches": [patch]}
    return {
        "Job": ("batch", "v1", "jobs", {"kind": "Job", "metadata": meta, "spec": job_spec}),
        "JobSet": (
            "jobset.x-k8s.io",
            "v1alpha2",
            "jobsets",
            {"kind": "JobSet", "metadata": meta, "spec": {"replicatedJobs": [rj]}},
        ),
        "TrainJob": (
            "trainer.kubeflow.org",
            "v1alpha1",
            "trainjobs",
            {"kind": "TrainJob", "metadata": meta, "spec": tj_spec},
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=5, help="jobs of each kind (default 5)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    if args.jobs < 1:
        ap.error(f"--jobs must be >= 1, got {args.jobs}")

    from kubernetes import client as k8s

    from perfsched_dev.devcluster.cluster import DevCluster, UpOptions, perfsched_components
    from perfsched_dev.devcluster.process import free_ports
    from perfsched_dev.devcluster.tools import DevClusterError, find_jobset_tools
    from perfsched_dev.k8s import bootstrap
    from scheduler.k8s import connect
    from scheduler.sim.cluster import load_cluster_spec, node_labels, spec_to_nodes

    try:
        find_jobset_tools()
        controllers = True
    except DevClusterError:
        controllers = False
    spec = load_cluster_spec(ROOT / "e2e" / "clusters" / "e2e-small.yaml")
    dc = DevCluster(Path(tempfile.mkdtemp(prefix="perfsched-adoption-")))
    extender_port, operator_port, webhook_port = free_ports(3)
    run = dc.state_dir / "run"
    env = {
        "PERFSCHED_OPERATOR_WEBHOOK_HOST": "127.0.0.1",
        "PERFSCHED_OPERATOR_WEBHOOK_PORT": str(webhook_port),
        "PERFSCHED_OPERATOR_WEBHOOK_CERT_FILE": str(run / "apiserver.crt"),
        "PERFSCHED_OPERATOR_WEBHOOK_KEY_FILE": str(run / "apiserver.key"),
    }
    extender, operator, _ = perfsched_components(
        str(dc.kubeconfig_path), extender_port, operator_port, operator_env=env
    )
    state = dc.up(
        UpOptions(
            nodes=spec_to_nodes(spec), node_labels=node_labels(spec), extender_port=extender_port,
            extras=(extender, operator), batch_jobs=True, with_jobsets=controllers, webhook_port=webhook_port,
            timeout_s=180.0,
        )
    )  # fmt: skip
    api = connect.api_client(state.kubeconfig)
    custom = k8s.CustomObjectsApi(api)
    metrics_url = f"http://127.0.0.1:{operator_port}/metrics"
    kinds = ["Job", "JobSet", "TrainJob"] if controllers else ["Job"]
    out: dict[str, Any] = {"jobs": args.jobs, "round_period_s": 5.0, "kinds": {}}
    try:
        for kind in kinds:
            ns = f"adopt-{kind.lower()}"
            bootstrap.create_namespace(api, ns)
            lat, rounds = [], []
            for i in range(args.jobs):
                group, version, plural, body = bodies(i)[kind]
                body["apiVersion"] = f"{group}/{version}"
                r0 = rounds_done(metrics_url)
                t0 = time.monotonic()
                custom.api_client.call_api(
                    f"/apis/{group}/{version}/namespaces/{ns}/{plural}" if group != "batch"
                    else f"/apis/batch/v1/namespaces/{ns}/jobs",
                    "POST", body=body, auth_settings=["BearerToken"], _return_http_data_only=True,
                    header_params={"Content-Type": "application/json", "Accept": "application/json"},
                    response_type="object",
                )  # fmt: skip
                while True:
                    if group == "batch":
                        obj = api.sanitize_for_serialization(
                            k8s.BatchV1Api(api).read_namespaced_job(f"b{i}", ns)
                        )
                    else:
                        obj = custom.get_namespaced_custom_object(group, version, ns, plural, f"b{i}")
                    raw = (obj["metadata"].get("annotations") or {}).get("perfsched.dev/status", "{}")
                    if json.loads(raw).get("phase") == "Running":
                        lat.append(round(time.monotonic() - t0, 3))
                        rounds.append(rounds_done(metrics_url) - r0)
                        break
                    if time.monotonic() - t0 > 60:
                        raise SystemExit(f"{kind} b{i} not admitted within 60 s")
                    time.sleep(0.05)
                time.sleep(1.0)
            out["kinds"][kind] = {
                "seconds": lat,
                "median": statistics.median(lat),
                "max": max(lat),
                "rounds": rounds,
                "rounds_max": max(rounds),
            }
    finally:
        api.close()
        dc.down()
    results = ROOT / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "adoption_latency.json").write_text(json.dumps(out, indent=2))
    if args.json:
        print(json.dumps(out, indent=2))
        return
    for kind, fig in out["kinds"].items():
        print(
            f"{kind:<9} admitted after {fig['seconds']} s: "
            f"median {fig['median']:.2f} s, max {fig['max']:.2f} s; completed rounds {fig['rounds']} "
            f"(max {fig['rounds_max']:g})"
        )


if __name__ == "__main__":
    main()
