"""Same workload, same decisions: one job mix submitted as TrainingJobs, then as JobSets, batch Jobs and
TrainJobs, through the real operator on a KWOK dev cluster; compares what perfsched decided for each job.

The cluster (``e2e/clusters/e2e-small.yaml``: 2 x 8 A100, 2 x 4 V100, 2 x 4 K80, 32 GPUs) runs the batch
Job, JobSet and Trainer controllers, ``perfsched extender`` and ``perfsched operator`` (default policy,
round period ``--period``) with its adoption webhook. Each kind runs in a namespace of its own, one kind
after the other: the ``--jobs`` jobs (models with different GPU-type advantages, rigid gangs of 1-8 GPUs,
about 1.5 times the cluster's GPUs in all) arrive one every ``--gap`` seconds (more than a round, so every
kind's rounds see the same arrivals), in the same order; KWOK runs each pod for the job's fixed
duration, so jobs finish in the same order whatever their kind and the queue drains the same way. A
poller (every 0.1 s) records per job its first admission (GPU type, GPUs, the nodes its pods landed on),
when it was admitted, how often it was preempted, the predicted throughput perfsched wrote, and how many
operator rounds completed between its creation and its first decision (the round in flight at creation,
if any, plus the one that decided it: 2 means decided by the first round after creation).

Compared with the TrainingJob run, per job: the GPU type, the GPU count, the start batch (jobs admitted
within one round of each other form a batch; a job's start order is its batch's rank) and the number of
nodes its pods span. Prints the match rates and every difference, and writes
``bench/results/adopted_decisions.json``.

Run: ``python bench/adopted_decisions.py [--jobs 12] [--kinds TrainingJob,JobSet,Job] [--period 2]``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: (model, dataset, global batch size); their speed-ups from K80 to V100 to A100 differ widely
MODELS = [
    ("resnet50", "imagenet", 256),
    ("transformer", "multi30k", 128),
    ("resnet18", "cifar10", 128),
    ("lstm", "wikitext-2", 64),
    ("cyclegan", "monet2photo", 1),
    ("recommendation", "movielens-20m", 8192),
]
#: (pods, GPUs per pod), cycled
SHAPES = [(2, 1), (1, 4), (4, 1), (2, 2), (1, 1), (1, 8), (2, 4)]
KINDS = ("TrainingJob", "JobSet", "Job", "TrainJob")
GAP_S = 1.5  # admissions closer than this (less than one round period apart) belong to one start batch


def job_spec(i: int) -> dict[str, Any]:
    """The kind-independent description of job ``i``."""
    model, dataset, batch = MODELS[i % len(MODELS)]
    pods, gpus = SHAPES[i % len(SHAPES)]
    return {
        "name": f"j{i:02d}",
        "model": model,
        "dataset": dataset,
        "batch": batch,
        "pods": pods,
        "gpus": gpus,
        "run_s": 20 + 4 * i,
    }


def manifest(kind: str, j: dict[str, Any]) -> tuple[str, str, str, dict[str, Any]]:
    """(group, version, plural, body) of job ``j`` as ``kind``."""
    run = {"perfsched.dev/kwok-run-duration": f"{j['run_s']}s"}
    limits = {"nvidia.com/gpu": j["gpus"]}
    pod = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 5,
        "containers": [
            {"name": "train", "image": "registry.invalid/train:bench", "resources": {"limits": limits}}
        ],
    }
    if kind == "TrainingJob":
        body = {
            "apiVersion": "perfsched.dev/v1alpha1",
            "kind": "TrainingJob",
            "metadata": {"name": j["name"]},
            "spec": {
                "model": j["model"],
                "dataset": j["dataset"],
                "batchSize": j["batch"],
                "work": {"iterations": 1_000_000},
                "replicas": {"max": j["pods"], "gpusPerReplica": j["gpus"]},
                "checkpointGraceSeconds": 5,
                "template": {
                    "metadata": {"annotations": run},
                    "spec": {"containers": [{"name": "train", "image": "registry.invalid/train:bench"}]},
                },
            },
        }
        return "perfsched.dev", "v1alpha1", "trainingjobs", body
    meta = {
        "name": j["name"],
        "labels": {"perfsched.dev/queue": "bench"},
        "annotations": {
            "perfsched.dev/model": j["model"],
            "perfsched.dev/dataset": j["dataset"],
            "perfsched.dev/batch-size": str(j["batch"]),
            "perfsched.dev/total-work": "1000000",
        },
    }
    tmpl = {"metadata": {"annotations": run}, "spec": pod}
    if kind == "Job":
        spec = {
            "parallelism": j["pods"],
            "completions": j["pods"],
            "completionMode": "Indexed",
            "template": tmpl,
        }
        return (
            "batch",
            "v1",
            "jobs",
            {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec},
        )
    if kind == "JobSet":
        rj = {
            "name": "workers",
            "replicas": j["pods"],
            "template": {"spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0, "template": tmpl}},
        }
        body = {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": meta,
            "spec": {"replicatedJobs": [rj]},
        }
        return "jobset.x-k8s.io", "v1alpha2", "jobsets", body
    node = {"name": "node", "template": {"spec": {"template": {"metadata": {"annotations": run}}}}}
    spec = {
        "runtimeRef": {"name": "perfsched-torch"},
        "trainer": {"numNodes": j["pods"], "resourcesPerNode": {"limits": limits}},
        "runtimePatches": [
            {
                "manager": "bench.perfsched.dev/decisions",
                "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [node]}}},
            }
        ],
    }
    body = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": meta, "spec": spec}
    return "trainer.kubeflow.org", "v1alpha1", "trainjobs", body


def decision_of(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    """What perfsched decided for ``obj`` as it stands: phase (Waiting, Running, Succeeded, Failed, or
    "" before any decision), GPU type, GPUs, predicted throughput."""
    if kind == "TrainingJob":
        st = obj.get("status") or {}
        phase = str(st.get("phase") or "")
        alloc = st.get("allocation") or {}
        if phase in ("Admitted", "Running", "Resizing") and alloc.get("gpuType"):
            phase = "Running"
        elif phase in ("Pending", "Preempted"):
            phase = "Waiting"
        return {
            "phase": phase,
            "gpuType": alloc.get("gpuType", ""),
            "gpus": int(alloc.get("replicas") or 0) * int(alloc.get("gpusPerReplica") or 0),
            "predicted": st.get("predictedThroughput"),
        }
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get("perfsched.dev/status") or "{}"
    st = json.loads(raw)
    return {
        "phase": str(st.get("phase") or ""),
        "gpuType": str(st.get("gpuType") or ""),
        "gpus": int(st.get("replicas") or 0),  # replicas of GPU pods; x GPUs per pod below
        "predicted": st.get("predictedThroughput"),
    }


def pod_owner(kind: str, pod: dict[str, Any]) -> str:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if kind == "TrainingJob":
        return str(labels.get("perfsched.dev/job-name") or "")
    if kind == "Job":
        return str(labels.get("batch.kubernetes.io/job-name") or labels.get("job-name") or "")
    return str(labels.get("jobset.sigs.k8s.io/jobset-name") or "")


def rounds_done(metrics_url: str) -> float:
    """``perfsched_operator_rounds_total`` summed over results (rounds the operator completed)."""
    import httpx

    text = httpx.get(metrics_url, timeout=5).text
    return sum(float(m) for m in re.findall(r"^perfsched_operator_rounds_total\{[^}]*\} (\S+)$", text, re.M))


def run_kind(
    kind: str,
    jobs: list[dict[str, Any]],
    api: Any,
    ns: str,
    metrics_url: str,
    timeout_s: float,
    gap_s: float,
) -> dict[str, dict[str, Any]]:
    from kubernetes import client as k8s

    custom = k8s.CustomObjectsApi(api)
    core = k8s.CoreV1Api(api)
    batch = k8s.BatchV1Api(api)

    def lister(group: str, version: str, plural: str) -> Callable[[], list[dict[str, Any]]]:
        if group == "batch":
            return lambda: api.sanitize_for_serialization(batch.list_namespaced_job(ns)).get("items") or []  # type: ignore[no-any-return]
        return lambda: custom.list_namespaced_custom_object(group, version, ns, plural)["items"]  # type: ignore[no-any-return]

    rec: dict[str, dict[str, Any]] = {}
    group, version, plural, _ = manifest(kind, jobs[0])
    list_all = lister(group, version, plural)
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    pending = list(jobs)
    while True:
        now = time.monotonic()
        if now > deadline:
            left = sorted(n for n, r in rec.items() if "finished" not in r)
            raise SystemExit(f"{kind}: {len(left)} jobs not finished after {timeout_s:g} s: {left}")
        if pending and now - t0 >= gap_s * (len(jobs) - len(pending)):
            # the next arrival: one job every ``gap_s`` seconds, the same sequence for every kind
            j = pending.pop(0)
            body = manifest(kind, j)[3]
            rounds_before = rounds_done(metrics_url)
            t = time.monotonic()
            if group == "batch":
                batch.create_namespaced_job(ns, body)
            else:
                custom.create_namespaced_custom_object(group, version, ns, plural, body)
            rec[j["name"]] = {"created": t, "rounds_at_creation": rounds_before, "preemptions": 0, "last": ""}
        pods = json.loads(core.list_namespaced_pod(ns, _preload_content=False).data)["items"]
        nodes_of: dict[str, set[str]] = {}
        for p in pods:
            node = (p.get("spec") or {}).get("nodeName")
            if node and (p.get("status") or {}).get("phase") in ("Pending", "Running"):
                nodes_of.setdefault(pod_owner(kind, p), set()).add(node)
        for obj in list_all():
            name = obj["metadata"]["name"]
            r = rec.get(name)
            if r is None:
                continue
            d = decision_of(kind, obj)
            if d["phase"] and "decided" not in r:
                r["decided"] = time.monotonic() - r["created"]
                r["decided_rounds"] = rounds_done(metrics_url) - r["rounds_at_creation"]
            if d["phase"] == "Running" and "admitted" not in r:
                r["admitted"] = now - t0
                r["gpuType"] = d["gpuType"]
                r["gpus"] = d["gpus"]
            if d["phase"] == "Running" and r.get("nodes") is None and nodes_of.get(name):
                r["nodes"] = sorted(nodes_of[name])
            if d["predicted"] is not None:
                r["predicted"] = d["predicted"]
            if r["last"] == "Running" and d["phase"] == "Waiting":
                r["preemptions"] += 1
            if d["phase"] in ("Succeeded", "Failed") and "finished" not in r:
                r["finished"] = now - t0
                r["outcome"] = d["phase"]
            r["last"] = d["phase"] or r["last"]
        if not pending and all("finished" in r for r in rec.values()):
            break
        time.sleep(0.1)
    # tear down: delete the objects, wait for their pods to go
    for j in jobs:
        if group == "batch":
            batch.delete_namespaced_job(j["name"], ns, propagation_policy="Background")
        else:
            custom.delete_namespaced_custom_object(group, version, ns, plural, j["name"])
    core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
    end = time.monotonic() + 60
    while core.list_namespaced_pod(ns).items and time.monotonic() < end:
        time.sleep(0.5)
    by_spec = {j["name"]: j for j in jobs}
    for name, r in rec.items():
        if kind != "TrainingJob" and r.get("gpus"):
            r["gpus"] = r["gpus"] * by_spec[name]["gpus"]
        r.pop("last", None)
        r.pop("created", None)
        r.pop("rounds_at_creation", None)
    return rec


def batches(rec: dict[str, dict[str, Any]]) -> dict[str, int]:
    """Start batch of each job: admissions less than ``GAP_S`` apart share one."""
    order = sorted((r["admitted"], n) for n, r in rec.items() if "admitted" in r)
    out: dict[str, int] = {}
    rank, last = -1, -1e9
    for t, n in order:
        if t - last > GAP_S:
            rank += 1
        out[n] = rank
        last = t
    return out


def compare(base: dict[str, dict[str, Any]], other: dict[str, dict[str, Any]]) -> dict[str, Any]:
    bb, ob = batches(base), batches(other)
    fields: dict[str, tuple[Callable[[str], Any], Callable[[str], Any]]] = {
        "gpuType": (lambda n: base[n].get("gpuType"), lambda n: other[n].get("gpuType")),
        "gpus": (lambda n: base[n].get("gpus"), lambda n: other[n].get("gpus")),
        "start batch": (lambda n: bb.get(n), lambda n: ob.get(n)),
        "nodes spanned": (
            lambda n: len(base[n].get("nodes") or ()),
            lambda n: len(other[n].get("nodes") or ()),
        ),
    }
    out: dict[str, Any] = {"match": {}, "differences": []}
    names = sorted(base)
    for field_name, (a, b) in fields.items():
        same = [n for n in names if a(n) == b(n)]
        out["match"][field_name] = f"{len(same)}/{len(names)}"
        for n in names:
            if a(n) != b(n):
                out["differences"].append(f"{n} {field_name}: TrainingJob {a(n)!r}, here {b(n)!r}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=12)
    ap.add_argument(
        "--kinds", default="TrainingJob,JobSet,Job", help=f"comma-separated, of {', '.join(KINDS)}"
    )
    ap.add_argument("--period", type=float, default=2.0, help="operator round period (s)")
    ap.add_argument("--gap", type=float, default=3.0, help="seconds between arrivals (more than a round)")
    ap.add_argument("--timeout", type=float, default=420.0, help="seconds per kind before giving up")
    args = ap.parse_args()
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds or kinds[0] != "TrainingJob":
        ap.error(f"--kinds: TrainingJob first, then any of {', '.join(KINDS[1:])}; got {args.kinds!r}")
    if args.jobs < 2:
        ap.error(f"--jobs must be >= 2, got {args.jobs}")
    if args.gap < 0 or args.period <= 0:
        ap.error(f"--gap must be >= 0 and --period > 0, got {args.gap} and {args.period}")

    from perfsched_dev.devcluster.cluster import DevCluster, UpOptions, perfsched_components
    from perfsched_dev.devcluster.process import free_ports
    from perfsched_dev.devcluster.tools import DevClusterError, find_jobset_tools
    from perfsched_dev.k8s import bootstrap
    from scheduler.k8s import connect
    from scheduler.sim.cluster import load_cluster_spec, node_labels, spec_to_nodes

    needs_controllers = any(k in ("JobSet", "TrainJob") for k in kinds)
    if needs_controllers:
        try:
            find_jobset_tools()
        except DevClusterError as exc:
            raise SystemExit(f"JobSet/TrainJob need the controllers: {exc}") from None
    spec = load_cluster_spec(ROOT / "e2e" / "clusters" / "e2e-small.yaml")
    dc = DevCluster(Path(tempfile.mkdtemp(prefix="perfsched-adopted-decisions-")))
    extender_port, operator_port, webhook_port = free_ports(3)
    run = dc.state_dir / "run"
    env = {
        "PERFSCHED_OPERATOR_ROUND_PERIOD_SECONDS": str(args.period),
        "PERFSCHED_OPERATOR_LEADER_ELECT": "false",
        "PERFSCHED_OPERATOR_WEBHOOK_HOST": "127.0.0.1",
        "PERFSCHED_OPERATOR_WEBHOOK_PORT": str(webhook_port),
        "PERFSCHED_OPERATOR_WEBHOOK_CERT_FILE": str(run / "apiserver.crt"),
        "PERFSCHED_OPERATOR_WEBHOOK_KEY_FILE": str(run / "apiserver.key"),
    }
    extender, operator, _ = perfsched_components(
        str(dc.kubeconfig_path), extender_port, operator_port, operator_env=env
    )
    jobs = [job_spec(i) for i in range(args.jobs)]
    out: dict[str, Any] = {
        "jobs": jobs,
        "cluster": "e2e-small",
        "round_period_s": args.period,
        "arrival_gap_s": args.gap,
        "runs": {},
        "compared": {},
    }
    state = dc.up(
        UpOptions(
            nodes=spec_to_nodes(spec),
            node_labels=node_labels(spec),
            extender_port=extender_port,
            extras=(extender, operator),
            batch_jobs=True,
            with_jobsets=needs_controllers,
            webhook_port=webhook_port,
            timeout_s=180.0,
        )
    )
    api = connect.api_client(state.kubeconfig)
    metrics_url = f"http://127.0.0.1:{operator_port}/metrics"
    try:
        for kind in kinds:
            ns = f"bench-{kind.lower()}"
            bootstrap.create_namespace(api, ns)
            bootstrap.wait_service_account(api, ns)
            t = time.monotonic()
            out["runs"][kind] = run_kind(kind, jobs, api, ns, metrics_url, args.timeout, args.gap)
            print(f"{kind}: {args.jobs} jobs done in {time.monotonic() - t:.0f} s", flush=True)
    finally:
        api.close()
        dc.down()
    base = out["runs"]["TrainingJob"]
    for kind in kinds[1:]:
        out["compared"][kind] = compare(base, out["runs"][kind])
        rounds = [r["decided_rounds"] for r in out["runs"][kind].values() if "decided_rounds" in r]
        secs = [r["decided"] for r in out["runs"][kind].values() if "decided" in r]
        out["compared"][kind]["decided_rounds_max"] = max(rounds) if rounds else None
        out["compared"][kind]["decided_s_max"] = round(max(secs), 2) if secs else None
        out["compared"][kind]["without_prediction"] = sorted(
            n for n, r in out["runs"][kind].items() if r.get("predicted") is None
        )
    results = ROOT / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "adopted_decisions.json").write_text(json.dumps(out, indent=2, default=str))
    print(f"{args.jobs} jobs, e2e-small, round period {args.period:g} s")
    for kind in kinds:
        rec = out["runs"][kind]
        b = batches(rec)
        row = ", ".join(
            f"{n}:{r.get('gpus')}x{r.get('gpuType')}@{b.get(n)}"
            + (f"/p{r['preemptions']}" if r["preemptions"] else "")
            for n, r in sorted(rec.items())
        )
        print(f"  {kind:<11} {row}")
    for kind, c in out["compared"].items():
        print(
            f"{kind} vs TrainingJob: "
            + ", ".join(f"{k} {v}" for k, v in c["match"].items())
            + f"; decided within {c['decided_rounds_max']} completed rounds (max {c['decided_s_max']} s)"
            + f"; without predictedThroughput: {c['without_prediction'] or 'none'}"
        )
        for d in c["differences"]:
            print(f"    {d}")


if __name__ == "__main__":
    main()
