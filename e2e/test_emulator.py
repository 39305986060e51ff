"""The workload emulator on the real control plane: a TrainingJob's pods progress at the job's true
throughput for the placement they got, report it in ``perfsched.dev/progress``, and end Succeeded."""

from __future__ import annotations

import time
from typing import Any

from e2e.harness import KubeCluster, gpu_pod, wait_until
from perfmodel.truth import GroundTruth
from scheduler.k8s.progress import parse_progress
from scheduler.names import LABEL_NETWORK_GBPS

ITERATIONS = 3000
TIME_SCALE = 100.0


def _job(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "perfsched.dev/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {
            "model": "resnet50",
            "dataset": "imagenet",
            "batchSize": 256,
            "work": {"iterations": ITERATIONS},
            "replicas": {"max": 2, "gpusPerReplica": 4},
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "worker", "image": "x"}]}
            },
        },
    }


def test_emulated_gang_progresses_at_its_true_throughput_and_succeeds(
    kube_cluster: KubeCluster, fresh_namespace: str, start_component: Any
) -> None:
    ns, core = fresh_namespace, kube_cluster.core
    kube_cluster.custom.create_namespaced_custom_object(
        "perfsched.dev", "v1alpha1", ns, "trainingjobs", _job("rn50")
    )
    # what the operator would create: two 4-GPU workers; pinned to the V100 nodes (one per node)
    for i in range(2):
        pod = gpu_pod(
            f"rn50-g1-{i}",
            4,
            scheduler_name="default-scheduler",
            labels={
                "perfsched.dev/job-name": "rn50",
                "perfsched.dev/replica-index": str(i),
                "perfsched.dev/generation": "1",
            },
        )
        pod["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": "Tesla-V100-SXM2-16GB"}
        core.create_namespaced_pod(ns, pod)
    # 8 V100 over 2 nodes at the V100 nodes' declared network, true iterations/s; at time scale 100 the
    # job needs ITERATIONS / (rate x 100) s
    v100 = core.list_node(label_selector="nvidia.com/gpu.product=Tesla-V100-SXM2-16GB").items
    gbps = min(float((n.metadata.labels or {}).get(LABEL_NETWORK_GBPS, "100")) for n in v100)
    rate = GroundTruth.load().throughput("resnet50", 256, "V100", 8, 2, "imagenet", network_gbps=gbps)
    assert rate is not None and rate > 0
    expected_s = ITERATIONS / (rate * TIME_SCALE)
    assert 2 < expected_s < 20

    start_component(
        ["perfsched", "emulate", "--time-scale", str(TIME_SCALE), "--checkpoint-interval", "200",
         "--report-interval", "0.5", "--namespace", ns],
        name="emulator",
        env={"PERFSCHED_EMULATOR_TICK_SECONDS": "0.25"},
    )  # fmt: skip

    def report() -> Any:
        ann = core.read_namespaced_pod("rn50-g1-0", ns).metadata.annotations or {}
        return parse_progress(ann.get("perfsched.dev/progress"))

    first = wait_until(
        lambda: (r := report()) is not None and r.progress > 0 and r, 30, "a first progress report"
    )
    t_first = time.monotonic()
    assert first.progress < ITERATIONS
    assert abs(first.throughput - rate) <= 1e-4 * rate  # the true throughput, not a prediction
    assert first.checkpoint <= first.progress

    mid = wait_until(lambda: (r := report()) is not None and r.checkpoint > 0 and r, 30, "a checkpoint")
    assert mid.checkpoint <= mid.progress <= ITERATIONS

    def done() -> bool:
        phases = {core.read_namespaced_pod(f"rn50-g1-{i}", ns).status.phase for i in range(2)}
        return phases == {"Succeeded"}

    wait_until(done, 60, "both workers to end Succeeded")
    elapsed = time.monotonic() - t_first
    final = report()
    assert final is not None
    assert (final.progress, final.checkpoint) == (ITERATIONS, ITERATIONS)
    # it took (about) as long as the true throughput says, not much less
    remaining_s = (ITERATIONS - first.progress) / (rate * TIME_SCALE)
    assert elapsed >= 0.8 * remaining_s, (elapsed, remaining_s)


def test_progress_reporter_writes_the_annotation_a_real_worker_would(
    kube_cluster: KubeCluster, fresh_namespace: str
) -> None:
    from scheduler.worker import ProgressReporter

    ns, core = fresh_namespace, kube_cluster.core
    pod = gpu_pod("trainer-g2-0", 1, annotations={"perfsched.dev/start-progress": "300"})
    core.create_namespaced_pod(ns, pod)
    reporter = ProgressReporter("trainer-g2-0", ns, min_interval_s=0, kubeconfig=kube_cluster.kubeconfig)
    assert reporter.start_progress() == 300.0
    assert reporter.report(350.0)
    assert reporter.checkpoint(400.0)
    ann = core.read_namespaced_pod("trainer-g2-0", ns).metadata.annotations
    report = parse_progress(ann["perfsched.dev/progress"])
    assert report is not None
    assert (report.progress, report.checkpoint) == (400.0, 400.0)
    assert ann["perfsched.dev/start-progress"] == "300"  # the reporter only adds its own key
