"""DRA accounting and Workload API gangs over a stream of TrainingJobs on a local control plane.

Brings up a dev cluster (real etcd, kube-apiserver, kube-scheduler with the ``perfsched`` profile, KWOK
GPU nodes of a simulator cluster spec whose GPUs are ResourceSlice devices: ``--gpu-api dra`` or
``mixed``; with ``--workload-api`` the gang API and kube-scheduler's GangScheduling plugin), starts
``perfsched extender``, ``perfsched emulate`` (time-scaled) and ``perfsched operator`` (FIFO with
backfill; with ``--workload-api`` a Workload and PodGroup per gang), submits ``--jobs`` TrainingJobs at
once (every fourth a gang of 8 x 1 GPU, the others 1 x 1, 1 x 2 and 2 x 2 GPUs) and samples until all
have Succeeded (``e2e/jobstream.py``):

- per DRA node and sample, whether the extender's free GPUs equal what DynamicResources can allocate
  (the node's devices minus those allocated ResourceClaims hold); nodes whose claims changed while the
  extender was asked are counted "in flux" and not compared;
- per gang of 8: how many landed in one NVLink domain, of those for which one domain had 8 free GPUs
  before any of its pods was bound, and samples that saw a gang partly bound.

Run: ``python bench/dra_stream.py [--jobs 200] [--cluster e2e/clusters/dra-stream.yaml] [--gpu-api dra]
[--workload-api]``; prints the figures and writes ``bench/results/dra_stream.json``. Needs the control
plane binaries (``e2e/install-tools.sh``, Kubernetes 1.37 for ``--workload-api``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from e2e import jobstream  # noqa: E402
from e2e.harness import Component  # noqa: E402
from e2e.test_operator import TIME_SCALE, operator_env  # noqa: E402
from perfsched_dev.devcluster.cluster import DevCluster, UpOptions  # noqa: E402
from perfsched_dev.k8s import bootstrap  # noqa: E402
from scheduler.core.errors import ConfigError  # noqa: E402
from scheduler.k8s import connect  # noqa: E402
from scheduler.sim.cluster import load_cluster_spec, node_labels, spec_to_nodes  # noqa: E402

NAMESPACE = "dra-stream"


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--cluster", default=str(HERE.parent / "e2e" / "clusters" / "dra-stream.yaml"))
    ap.add_argument("--gpu-api", choices=("dra", "mixed"), default="dra")
    ap.add_argument("--workload-api", action="store_true", help="gangs under Workload / PodGroup")
    ap.add_argument("--no-opportunistic-batching", action="store_true")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds for all jobs to succeed")
    ap.add_argument("--gangs-detail", action="store_true", help="print every gang's record")
    ap.add_argument("--logs", default="", help="keep the components' logs in this directory")
    args = ap.parse_args()
    if args.jobs < 1:
        ap.error(f"--jobs must be at least 1, got {args.jobs}")
    try:
        spec = load_cluster_spec(args.cluster)
    except ConfigError as exc:
        ap.error(f"--cluster: {exc}")
    nodes = spec_to_nodes(spec)
    result: dict[str, Any] = {
        "jobs": args.jobs,
        "cluster": spec.name,
        "nodes": len(nodes),
        "gpus": sum(n.gpus for n in nodes),
        "gpu_api": args.gpu_api,
        "workload_api": args.workload_api,
        "opportunistic_batching": not args.no_opportunistic_batching,
    }
    with tempfile.TemporaryDirectory(prefix="perfsched-dra-stream-") as tmp:
        dc = DevCluster(Path(tmp) / "dc")
        logs = Path(args.logs) if args.logs else Path(tmp) / "components"
        comps: list[Component] = []
        t0 = time.monotonic()
        state = dc.up(
            UpOptions(
                nodes=nodes,
                node_labels=node_labels(spec),
                gpu_api=args.gpu_api,
                workload_api=args.workload_api,
                opportunistic_batching=not args.no_opportunistic_batching,
                timeout_s=300,
            )
        )
        try:
            api = connect.api_client(state.kubeconfig)
            bootstrap.create_namespace(api, NAMESPACE)
            bootstrap.wait_service_account(api, NAMESPACE)
            env = {"KUBECONFIG": state.kubeconfig}
            port = state.ports["extender"]
            ext = ["perfsched", "extender", "--host", "127.0.0.1", "--port", str(port)]
            comps.append(Component("extender", ext, logs, env, f"http://127.0.0.1:{port}/readyz").start(120))
            emulate = ["perfsched", "emulate", "--time-scale", str(TIME_SCALE), "--report-interval", "0.5"]
            emulate += ["--checkpoint-interval", "100", "--namespace", NAMESPACE]
            comps.append(
                Component("emulator", emulate, logs, {**env, "PERFSCHED_EMULATOR_TICK_SECONDS": "0.25"})
            )
            comps[-1].start()
            extra = {"PERFSCHED_OPERATOR_WORKLOAD_API": "true"} if args.workload_api else {}
            # a longer lease than the e2e tests': rounds on a loaded 2-core VM can outlast a 4 s lease
            extra.update(
                PERFSCHED_OPERATOR_LEASE_DURATION_SECONDS="30",
                PERFSCHED_OPERATOR_RENEW_DEADLINE_SECONDS="20",
                PERFSCHED_OPERATOR_RETRY_PERIOD_SECONDS="2",
            )
            op_env = {**env, **operator_env(NAMESPACE, "fifo:backfill=true", **extra)}
            comps.append(Component("operator", ["perfsched", "operator"], logs, op_env).start())
            result["setup_s"] = round(time.monotonic() - t0, 1)
            sampler = jobstream.StreamSampler(
                api, state.extender_url, NAMESPACE, jobstream.gang_jobs(args.jobs), interval_s=args.interval
            )
            t1 = time.monotonic()
            with sampler:
                jobstream.submit_jobs(api, NAMESPACE, args.jobs)
                while (done := jobstream.phases(api, NAMESPACE)).get("Succeeded", 0) < args.jobs:
                    if time.monotonic() - t1 > args.timeout:
                        raise SystemExit(
                            f"not all {args.jobs} jobs succeeded in {args.timeout:g} s: {dict(done)}"
                        )
                    if done.get("Failed"):
                        raise SystemExit(f"jobs failed: {dict(done)}; logs in {logs}")
                    time.sleep(2.0)
            result["run_s"] = round(time.monotonic() - t1, 1)
            api.close()
        finally:
            for comp in reversed(comps):
                comp.stop()
            dc.down()
    result.update(sampler.summary())
    if args.gangs_detail:
        for key, rec in result["gangs"].items():
            print(f"  {key}: {rec}")
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "dra_stream.json").write_text(json.dumps(result, indent=2))
    _print(result)


def _pct(a: int, b: int) -> str:
    return f"{100 * a / b:.1f}%" if b else "n/a"


def _print(r: dict[str, Any]) -> None:
    print(
        f"{r['jobs']} TrainingJobs on {r['nodes']} KWOK nodes / {r['gpus']} GPUs ({r['cluster']}), "
        f"--gpu-api {r['gpu_api']}, Workload API {'on' if r['workload_api'] else 'off'}"
        f"{'' if r['opportunistic_batching'] else ', opportunistic batching off'}; "
        f"setup {r['setup_s']} s, all Succeeded in {r['run_s']} s"
    )
    print(
        f"  free GPUs, extender vs DynamicResources: {r['node_equal']} of {r['node_checks']} node-samples "
        f"equal ({_pct(r['node_equal'], r['node_checks'])}) over {r['samples']} samples of "
        f"{r['dra_nodes']} DRA nodes; {r['node_in_flux']} node-samples in flux (not compared)"
    )
    for m in r["mismatches"]:
        print(f"    {m}")
    print(
        "    unequal on the same node in two samples running, claims unchanged: "
        f"{len(r['persistent_mismatches'])}"
    )
    for e in r["errors"]:
        print(f"    sampling error: {e}")
    print(
        f"  gangs of 8 x 1 GPU: {r['gangs_placed']} placed, {r['one_domain']} in one NVLink domain "
        f"({_pct(r['one_domain'], r['gangs_placed'])}); {r['seen_before_binding']} seen before any pod bound"
    )
    print(
        f"    planned in one domain by the operator: {r['planned_one_domain']}, of them bound there: "
        f"{r['planned_one_domain_and_kept']} "
        f"({_pct(r['planned_one_domain_and_kept'], r['planned_one_domain'])})"
    )
    print(
        "    one domain of the gang's GPU type had 8 free at the operator's decision (its own view, after "
        f"the round's earlier starts; {r['judged_at_decision']} gangs judged by their Started Event): "
        f"{r['fits_at_decision']}, of them in one domain: {r['fits_at_decision_and_one_domain']} "
        f"({_pct(r['fits_at_decision_and_one_domain'], r['fits_at_decision'])}); started spread although "
        f"a domain had room: {r['spread_although_fitted']}"
    )
    print("    secondary, judged by the bench's own 1 s samples:")
    print(
        "    one domain of the gang's GPU type had 8 free when its pods appeared: "
        f"{r['one_of_its_type_fits']}, "
        f"of them in one domain: {r['one_of_its_type_fits_and_one_domain']} "
        f"({_pct(r['one_of_its_type_fits_and_one_domain'], r['one_of_its_type_fits'])})"
    )
    print(
        "    one domain of the gang's GPU type had 8 free at the last sample before its job was admitted "
        f"(free as the operator plans; {r['judged_at_start']} gangs judged): "
        f"{r['one_of_its_type_fits_at_start']}, "
        f"of them in one domain: {r['one_of_its_type_fits_at_start_and_one_domain']} "
        f"({_pct(r['one_of_its_type_fits_at_start_and_one_domain'], r['one_of_its_type_fits_at_start'])})"
    )
    print(
        f"    one domain of any type had 8 free: {r['one_fits']}, of them in one domain: "
        f"{r['one_fits_and_one_domain']} ({_pct(r['one_fits_and_one_domain'], r['one_fits'])})"
    )
    print(f"  pods bound off their planned node: {r['pods_off_plan']} of {r['pods_planned']} planned pods")
    print(
        f"    samples that saw a gang partly bound: {r['partial_samples']}; gangs partly bound in two "
        f"samples running: {r['persistent_partial']}"
    )


if __name__ == "__main__":
    main()
