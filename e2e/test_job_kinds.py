"""Unmodified batch/v1 Jobs, JobSets and TrainJobs scheduled by perfsched on the real control plane.

A dev cluster of its own (``e2e/clusters/e2e-small.yaml``: 2 x 8 A100, 2 x 4 V100, 2 x 4 K80) with the
batch Job controller, and, when ``PERFSCHED_WITH_JOBSETS=1 bash e2e/install-tools.sh`` built them, the
JobSet and Kubeflow Trainer controllers (their tests are skipped otherwise). ``perfsched extender`` and
``perfsched operator`` run as processes, the operator serving the adoption webhook. Each job is 2 pods x
1 GPU labelled ``perfsched.dev/queue``; KWOK runs its pods for a few seconds, then they succeed. The test
checks what a user sees: the job suspended at creation, admitted on the policy's GPU type (its pods on
nodes of that type), completed by its own controller, and perfsched's status and Events on it; and that a
higher-priority Job preempts a running one through their TrainingQueue, which then resumes. A Job whose
pods mount a claim that does not exist is suspended again at its start timeout, saying why in its pods'
words.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.harness import KubeCluster, wait_until

LABEL = {"perfsched.dev/queue": "team-a"}
RUN = {"perfsched.dev/kwok-run-duration": "3s"}
POD_SPEC = {
    "restartPolicy": "Never",
    "containers": [
        {
            "name": "train",
            "image": "registry.invalid/trainer:e2e",
            "resources": {"limits": {"nvidia.com/gpu": 1}},
        }
    ],
}


@pytest.fixture(scope="module")
def jk_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KubeCluster, bool]]:
    from e2e.conftest import DEFAULT_SPEC
    from perfsched_dev.devcluster.cluster import DevCluster, UpOptions, perfsched_components
    from perfsched_dev.devcluster.process import free_ports
    from perfsched_dev.devcluster.tools import DevClusterError, find_jobset_tools
    from scheduler.k8s import connect
    from scheduler.sim.cluster import load_cluster_spec, node_labels, spec_to_nodes

    try:
        find_jobset_tools()
        controllers = True
    except DevClusterError:
        controllers = False
    spec = load_cluster_spec(DEFAULT_SPEC)
    dc = DevCluster(tmp_path_factory.mktemp("jobkinds-cluster"))
    extender_port, operator_port, webhook_port = free_ports(3)
    run = dc.state_dir / "run"
    env = {
        "PERFSCHED_OPERATOR_ROUND_PERIOD_SECONDS": "1",
        "PERFSCHED_OPERATOR_LEADER_ELECT": "false",
        "PERFSCHED_OPERATOR_WEBHOOK_HOST": "127.0.0.1",
        "PERFSCHED_OPERATOR_WEBHOOK_PORT": str(webhook_port),
        "PERFSCHED_OPERATOR_WEBHOOK_CERT_FILE": str(run / "apiserver.crt"),
        "PERFSCHED_OPERATOR_WEBHOOK_KEY_FILE": str(run / "apiserver.key"),
    }
    # the emulator plays the workers of jobs that declare their work (perfsched.dev/total-work): they
    # report progress, checkpoint on SIGTERM and resume from their checkpoint; the others run as KWOK says
    extender, operator, emulator = perfsched_components(
        str(dc.kubeconfig_path),
        extender_port,
        operator_port,
        operator_env=env,
        emulator_args=("--checkpoint-interval", "5"),
    )
    options = UpOptions(
        nodes=spec_to_nodes(spec),
        node_labels=node_labels(spec),
        extender_port=extender_port,
        extras=(extender, operator, emulator),
        batch_jobs=True,
        with_jobsets=controllers,
        webhook_port=webhook_port,
        timeout_s=180.0,
    )
    try:
        state = dc.up(options)
    except DevClusterError as exc:
        pytest.fail(f"the e2e control plane did not start:\n{exc}", pytrace=False)
    api = connect.api_client(state.kubeconfig)
    try:
        yield KubeCluster(kubeconfig=state.kubeconfig, endpoints=dict(state.endpoints), api=api), controllers
    finally:
        api.close()
        dc.down()


def _status(obj: dict[str, Any]) -> dict[str, Any]:
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get("perfsched.dev/status")
    return json.loads(raw) if raw else {}


def _events(kube: KubeCluster, ns: str, name: str) -> list[tuple[str, str]]:
    evs = kube.core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
    return [(e.reason, e.message) for e in evs]


def _node_types(kube: KubeCluster) -> dict[str, str]:
    return {
        n.metadata.name: n.metadata.labels.get("nvidia.com/gpu.product", "")
        for n in kube.core.list_node().items
    }


def _rounds(kube: KubeCluster) -> float:
    """Rounds the operator has completed (``perfsched_operator_rounds_total``, all results)."""
    import httpx

    text = httpx.get(f"{kube.endpoints['perfsched-operator']}/metrics", timeout=5).text
    return sum(float(v) for v in re.findall(r"^perfsched_operator_rounds_total\{[^}]*\} (\S+)$", text, re.M))


def _check_run(
    kube: KubeCluster, ns: str, name: str, get: Any, pod_selector: str, done: str, rounds_before: float
) -> None:
    """Admitted on the policy's type by the first round after creation, pods there, finished, status +
    Events. ``rounds_before``: the operator's completed rounds just before the job was created."""
    t0 = time.monotonic()
    while (st := _status(get())).get("phase") != "Running":
        assert time.monotonic() - t0 < 30, f"{name} not admitted within 30 s: {st}"
        time.sleep(0.05)
    admitted_s, rounds = time.monotonic() - t0, _rounds(kube) - rounds_before
    # the round in flight at creation (if any) did not list it; the next one (the webhook wakes the
    # operator) admits it: at most 2 rounds completed, i.e. admitted <= 1 round after creation
    assert rounds <= 2, f"{name} admitted after {rounds:g} completed rounds ({admitted_s:.2f} s)"
    products = _node_types(kube)

    def bound() -> list[Any] | None:
        found = kube.core.list_namespaced_pod(ns, label_selector=pod_selector).items
        placed = [p for p in found if p.spec.node_name]
        return placed if len(placed) >= 2 else None

    for p in wait_until(bound, 60, f"2 pods of {name} bound"):
        assert p.spec.scheduler_name == "perfsched"
        assert p.metadata.annotations.get("perfsched.dev/gpu-type") == st["gpuType"]
        # the nodeSelector perfsched wrote is the GPU product of the node the pod runs on
        assert (p.spec.node_selector or {}).get("nvidia.com/gpu.product") == products[p.spec.node_name]
    wait_until(
        lambda: any(
            c.get("type") == done and c.get("status") == "True"
            for c in (get().get("status") or {}).get("conditions") or []
        ),
        90,
        f"{name} {done}",
    )
    wait_until(lambda: _status(get()).get("phase") == "Succeeded", 30, f"{name} status Succeeded")
    reasons = [r for r, _ in _events(kube, ns, name)]
    assert "Admitted" in reasons and "Succeeded" in reasons, reasons


def test_batch_job_suspended_admitted_completed(jk_cluster: tuple[KubeCluster, bool]) -> None:
    from kubernetes import client as k8s

    from perfsched_dev.k8s import bootstrap

    kube, _ = jk_cluster
    ns = "jobs-e2e"
    bootstrap.create_namespace(kube.api, ns)
    batch = k8s.BatchV1Api(kube.api)
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "labels": LABEL},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "completionMode": "Indexed",
            "template": {"metadata": {"annotations": RUN}, "spec": POD_SPEC},
        },
    }
    r0 = _rounds(kube)
    created = batch.create_namespaced_job(ns, body)
    assert created.spec.suspend is True  # the webhook suspended it at creation
    assert created.spec.template.spec.scheduler_name == "perfsched"

    def get() -> dict[str, Any]:
        return kube.api.sanitize_for_serialization(batch.read_namespaced_job("train", ns))  # type: ignore[no-any-return]

    uid = created.metadata.uid
    _check_run(kube, ns, "train", get, f"batch.kubernetes.io/controller-uid={uid}", "Complete", r0)

    # a labelled Job asking for no GPU is refused and stays suspended
    nogpu = json.loads(json.dumps(body))
    nogpu["metadata"]["name"] = "nogpu"
    nogpu["spec"]["template"]["spec"]["containers"][0]["resources"] = {}
    batch.create_namespaced_job(ns, nogpu)
    st = wait_until(
        lambda: (
            (s := _status(kube.api.sanitize_for_serialization(batch.read_namespaced_job("nogpu", ns)))).get(
                "phase"
            )
            == "Refused"
            and s
        ),
        20,
        "nogpu refused",
    )
    assert "asks for no nvidia.com/gpu" in st["message"]
    assert batch.read_namespaced_job("nogpu", ns).spec.suspend is True


def test_batch_job_that_cannot_start_is_suspended_again_saying_why(
    jk_cluster: tuple[KubeCluster, bool],
) -> None:
    """A Job whose pods mount a claim that does not exist (kube-scheduler cannot place them) and says
    ``perfsched.dev/start-timeout-seconds: 8``: admitted, then suspended again once 8 s passed with its
    pods not running, requeued with backoff, the pods' own reason quoted in its status and Event."""
    from kubernetes import client as k8s

    from perfsched_dev.k8s import bootstrap

    kube, _ = jk_cluster
    ns = "stuck-e2e"
    bootstrap.create_namespace(kube.api, ns)
    batch = k8s.BatchV1Api(kube.api)
    spec = json.loads(json.dumps(POD_SPEC))
    spec["volumes"] = [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "no-such-claim"}}]
    spec["containers"][0]["volumeMounts"] = [{"name": "ckpt", "mountPath": "/ckpt"}]
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "stuck",
            "labels": LABEL,
            "annotations": {"perfsched.dev/start-timeout-seconds": "8"},
        },
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "template": {"metadata": {"annotations": RUN}, "spec": spec},
        },
    }
    batch.create_namespaced_job(ns, body)

    def status() -> dict[str, Any]:
        return _status(kube.api.sanitize_for_serialization(batch.read_namespaced_job("stuck", ns)))

    wait_until(lambda: status().get("phase") == "Running", 30, "stuck admitted")
    admitted = time.monotonic()
    st = wait_until(lambda: (s := status()).get("requeueCount") and s, 40, "stuck suspended again")
    assert isinstance(st, dict)
    waited = time.monotonic() - admitted
    print(f"stuck Job: suspended again {waited:.1f} s after its admission was seen (timeout 8 s)")
    print(f"stuck Job: {st['message']}")
    assert batch.read_namespaced_job("stuck", ns).spec.suspend is True
    assert st["phase"] == "Waiting" and st["requeueCount"] == 1, st
    assert 'persistentvolumeclaim "no-such-claim" not found' in st["message"], st
    assert "start timeout 1 of backoff limit" in st["message"] and "next attempt at" in st["message"]
    assert any(r == "StartTimeout" and "no-such-claim" in m for r, m in _events(kube, ns, "stuck"))
    # its controller deletes its pods: nothing of it stays on the cluster while it backs off
    wait_until(
        lambda: (
            not kube.core.list_namespaced_pod(ns, label_selector="batch.kubernetes.io/job-name=stuck").items
        ),
        30,
        "stuck's pods gone",
    )
    batch.delete_namespaced_job("stuck", ns, propagation_policy="Background")


def test_jobset_and_trainjob(jk_cluster: tuple[KubeCluster, bool]) -> None:
    from perfsched_dev.k8s import bootstrap

    kube, controllers = jk_cluster
    if not controllers:
        pytest.skip(
            "JobSet/Trainer controllers not built: PERFSCHED_WITH_JOBSETS=1 bash e2e/install-tools.sh"
        )
    ns = "jobsets-e2e"
    bootstrap.create_namespace(kube.api, ns)
    custom = kube.custom
    js = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "labels": LABEL},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 2,
                    "template": {
                        "spec": {
                            "parallelism": 1,
                            "completions": 1,
                            "backoffLimit": 0,
                            "template": {"metadata": {"annotations": RUN}, "spec": POD_SPEC},
                        }
                    },
                }
            ]
        },
    }
    r0 = _rounds(kube)
    created = custom.create_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", ns, "jobsets", js)
    assert created["spec"]["suspend"] is True

    def get_js() -> dict[str, Any]:
        return custom.get_namespaced_custom_object("jobset.x-k8s.io", "v1alpha2", ns, "jobsets", "js")  # type: ignore[no-any-return]

    _check_run(kube, ns, "js", get_js, "jobset.sigs.k8s.io/jobset-name=js", "Completed", r0)

    tj = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "tj", "labels": LABEL},
        "spec": {
            "runtimeRef": {"name": "perfsched-torch"},
            "trainer": {"numNodes": 2, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 1}}},
            "runtimePatches": [
                {
                    "manager": "e2e.perfsched.dev/test",
                    "trainingRuntimeSpec": {
                        "template": {
                            "spec": {
                                "replicatedJobs": [
                                    {
                                        "name": "node",
                                        "template": {
                                            "spec": {"template": {"metadata": {"annotations": RUN}}}
                                        },
                                    }
                                ]
                            }
                        }
                    },
                }
            ],
        },
    }
    r0 = _rounds(kube)
    created = custom.create_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", ns, "trainjobs", tj)
    assert created["spec"]["suspend"] is True

    def get_tj() -> dict[str, Any]:
        return custom.get_namespaced_custom_object("trainer.kubeflow.org", "v1alpha1", ns, "trainjobs", "tj")  # type: ignore[no-any-return]

    _check_run(kube, ns, "tj", get_tj, "jobset.sigs.k8s.io/jobset-name=tj", "Complete", r0)


def test_higher_priority_job_preempts_a_running_one_which_resumes_from_its_checkpoint(
    jk_cluster: tuple[KubeCluster, bool],
) -> None:
    """A queue of 2 GPUs: a low-priority 2 x 1 GPU Job that declares its work runs (the emulator plays
    its workers: progress reports, a checkpoint on SIGTERM); a high-priority one arrives and takes the
    queue's GPUs; the low one is re-suspended (its pods deleted with their grace period, in which the
    workers save a checkpoint), then admitted again, and its new pods resume from that checkpoint, not
    from zero, and run to completion. The decision's reason reaches the preempted Job's Events."""
    from kubernetes import client as k8s

    from perfsched_dev.k8s import bootstrap
    from scheduler.k8s.progress import parse_progress
    from scheduler.names import GROUP, TRAININGQUEUE_PLURAL, VERSION

    kube, _ = jk_cluster
    ns = "preempt-e2e"
    bootstrap.create_namespace(kube.api, ns)
    sched = k8s.SchedulingV1Api(kube.api)
    for name, value in (("e2e-low", 10), ("e2e-high", 1000)):
        sched.create_priority_class({"metadata": {"name": name}, "value": value})
    queue = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingQueue", "metadata": {"name": "team-a"},
             "spec": {"quotas": [{"gpuType": "*", "nominal": 2}]}}  # fmt: skip
    kube.custom.create_cluster_custom_object(GROUP, VERSION, TRAININGQUEUE_PLURAL, queue)
    batch = k8s.BatchV1Api(kube.api)

    def job(name: str, prio: str, pod_ann: dict[str, str], ann: dict[str, str]) -> dict[str, Any]:
        spec = {**POD_SPEC, "priorityClassName": prio, "terminationGracePeriodSeconds": 5}
        tmpl = {"metadata": {"annotations": pod_ann}, "spec": spec}
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "labels": LABEL, "annotations": ann},
            "spec": {"parallelism": 2, "completions": 2, "completionMode": "Indexed", "template": tmpl},
        }

    def status(name: str) -> dict[str, Any]:
        return _status(kube.api.sanitize_for_serialization(batch.read_namespaced_job(name, ns)))

    def done(name: str) -> bool:
        conds = batch.read_namespaced_job(name, ns).status.conditions or []
        return any(c.type == "Complete" and c.status == "True" for c in conds)

    def reports(admission: str) -> list[float]:
        """Progress the low Job's workers of this admission report (one value per reporting pod)."""
        out = []
        for p in kube.core.list_namespaced_pod(ns, label_selector="batch.kubernetes.io/job-name=low").items:
            ann = p.metadata.annotations or {}
            rep = parse_progress(ann.get("perfsched.dev/progress"))
            if ann.get("perfsched.dev/admission") == admission and rep is not None:
                out.append(rep.progress)
        return out

    # recommendation (movielens-20m, batch 8192) runs 3.8-5.5 it/s on 2 A100, V100 or K80 (the emulator's
    # true table): 110 iterations are 20-29 s of work on whichever type the policy picks
    low_ann = {
        "perfsched.dev/model": "recommendation",
        "perfsched.dev/dataset": "movielens-20m",
        "perfsched.dev/batch-size": "8192",
        "perfsched.dev/total-work": "110",
    }
    try:
        batch.create_namespaced_job(ns, job("low", "e2e-low", {}, low_ann))
        wait_until(lambda: status("low").get("phase") == "Running", 30, "low admitted")
        # it trains: its workers report progress (admission 1)
        before = max(wait_until(lambda: [p for p in reports("1") if p >= 10.0], 60, "low at 10 iterations"))
        r0 = _rounds(kube)
        batch.create_namespaced_job(
            ns, job("high", "e2e-high", {"perfsched.dev/kwok-run-duration": "3s"}, {})
        )
        wait_until(lambda: status("high").get("phase") == "Running", 30, "high admitted")
        assert _rounds(kube) - r0 <= 2  # admitted (and the low one preempted) by the round after creation
        # written in the same round, just after the high one's admission
        st = wait_until(lambda: (s := status("low")).get("phase") == "Waiting" and s, 10, "low preempted")
        assert st["message"].startswith("preempted: queue team-a"), st
        assert st["restarts"] == 1
        assert batch.read_namespaced_job("low", ns).spec.suspend is True
        preempted = [m for r, m in _events(kube, ns, "low") if r == "Preempted"]
        assert preempted and "queue team-a" in preempted[0]
        wait_until(lambda: done("high"), 60, "high complete")
        wait_until(lambda: status("low").get("phase") == "Running", 60, "low admitted again")
        assert batch.read_namespaced_job("low", ns).spec.suspend is False
        # the pods of its second admission resume from the checkpoint saved on SIGTERM, not from zero
        resumed = wait_until(lambda: reports("2"), 60, "low's resumed workers report")
        assert min(resumed) >= before, (resumed, before)
        wait_until(lambda: done("low"), 90, "low complete after resuming")
        assert [r for r, _ in _events(kube, ns, "low")].count("Admitted") == 2
        final = wait_until(
            lambda: (s := status("low")).get("phase") == "Succeeded" and s, 30, "low Succeeded"
        )
        assert final.get("predictedThroughput") and final["restarts"] == 1, final
    finally:
        kube.custom.delete_cluster_custom_object(GROUP, VERSION, TRAININGQUEUE_PLURAL, "team-a")
