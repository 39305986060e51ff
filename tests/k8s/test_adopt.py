"""Decoding adopted workloads (pure): gang shape, elastic bounds, predictor inputs, finished, problems."""

from __future__ import annotations

import json
from typing import Any

from scheduler.k8s.adopt import JOB, JOBSET, TRAINJOB, admit_patches, decode, list_rows, release_patch

Q = {"perfsched.dev/queue": "team-a"}


def job(gpus: int = 1, parallelism: int = 3, labels: Any = None, ann: Any = None, status: Any = None) -> Any:
    pod = {
        "containers": [
            {"name": "a", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}},
            {"name": "side"},
        ]
    }
    return {
        "metadata": {
            "name": "j",
            "namespace": "ml",
            "uid": "u",
            "labels": labels or Q,
            "annotations": ann or {},
        },
        "spec": {"suspend": True, "parallelism": parallelism, "template": {"spec": pod}},
        "status": status or {},
    }


def test_job_shape_and_predictor_inputs() -> None:
    ann = {"perfsched.dev/model": "bert", "perfsched.dev/batch-size": "32", "perfsched.dev/precision": "bf16"}
    w = decode(JOB, job(gpus=2, ann=ann))
    assert (w.replicas, w.gpus_per_replica, w.min_replicas, w.max_replicas) == (3, 2, 3, 3)
    assert (w.model, w.batch_size, w.precision, w.agnostic, w.problem) == ("bert", 32, "bf16", "", "")
    assert w.key == "job/ml/j" and w.pod_label_value == "u" and w.suspended
    assert w.dataset == ""  # the model's default dataset
    assert decode(JOB, job(ann={**ann, "perfsched.dev/dataset": "cifar10"})).dataset == "cifar10"


def test_problems_are_named() -> None:
    bad = {
        "perfsched.dev/batch-size": "-4",
        "perfsched.dev/precision": "fp7",
        "perfsched.dev/min-replicas": "5",
        "perfsched.dev/max-replicas": "2",
        "perfsched.dev/total-work": "lots",
    }
    w = decode(JOB, job(ann=bad), known_queues=["team-a"])
    for words in ("batch-size='-4'", "precision='fp7'", "1 <= min <= max", "total-work='lots'"):
        assert words in w.problem, words
    assert "asks for no nvidia.com/gpu" in decode(JOB, job(gpus=0)).problem
    assert "does not exist (queues: b)" in decode(JOB, job(), known_queues=["b"]).problem
    assert (
        "label perfsched.dev/queue is empty" in decode(JOB, job(labels={"perfsched.dev/queue": ""})).problem
    )
    assert "no perfsched.dev/model and perfsched.dev/batch-size" in decode(JOB, job()).agnostic


def test_finished_from_the_objects_own_conditions() -> None:
    done = {"conditions": [{"type": "Complete", "status": "True", "message": "ok"}]}
    failed = {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}
    assert decode(JOB, job(status=done)).finished == "Succeeded"
    assert decode(JOB, job(status=failed)).finish_message == "BackoffLimitExceeded"
    not_yet = {"conditions": [{"type": "Complete", "status": "False"}]}
    assert decode(JOB, job(status=not_yet)).finished == ""


def test_jobset_counts_gpu_pods_of_every_replicated_job() -> None:
    def rj(name: str, replicas: int, parallelism: int, gpus: int) -> Any:
        pod = {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": gpus}}}]}
        return {
            "name": name,
            "replicas": replicas,
            "template": {"spec": {"parallelism": parallelism, "template": {"spec": pod}}},
        }

    obj = {
        "metadata": {"name": "s", "labels": Q},
        "spec": {"replicatedJobs": [rj("a", 2, 2, 1), rj("b", 1, 1, 0)]},
    }
    w = decode(JOBSET, obj)
    assert (w.replicas, w.gpus_per_replica, w.problem) == (4, 1, "")  # 2 replicas x parallelism 2
    obj["spec"]["replicatedJobs"].append(rj("c", 1, 1, 2))
    assert "ask different GPUs per pod ([1, 2])" in decode(JOBSET, obj).problem
    obj["spec"]["replicatedJobs"].pop()
    obj["metadata"]["annotations"] = {"perfsched.dev/min-replicas": "1", "perfsched.dev/max-replicas": "4"}
    assert "cannot be resized" in decode(JOBSET, obj).problem


def test_trainjob_progress_from_trainer_status() -> None:
    obj = {
        "metadata": {"name": "t", "labels": Q},
        "spec": {"trainer": {"numNodes": 2, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 4}}}},
        "status": {"trainerStatus": {"progressPercentage": 40, "estimatedRemainingSeconds": 90}},
    }
    w = decode(TRAINJOB, obj)
    assert (w.replicas, w.gpus_per_replica, w.progress_fraction, w.eta_seconds) == (2, 4, 0.4, 90.0)
    assert w.pod_label_value == "t"


def test_multi_product_type_uses_node_affinity_and_release() -> None:
    w = decode(JOB, job())
    first, second = admit_patches(w, "A100", ["A100-PCIE-40GB", "A100-SXM4-40GB"], 3)
    aff = first["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]
    expr = aff["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchExpressions"][
        0
    ]
    assert expr == {
        "key": "nvidia.com/gpu.product",
        "operator": "In",
        "values": ["A100-PCIE-40GB", "A100-SXM4-40GB"],
    }
    assert "parallelism" not in first["spec"] and second == {"spec": {"suspend": False}}
    held = job(ann={"perfsched.dev/status": json.dumps({"phase": "Waiting"})})
    assert release_patch(decode(JOB, held)) == {
        "metadata": {"annotations": {"perfsched.dev/status": None}},
        "spec": {"suspend": False},
    }


def test_list_rows_show_perfscheds_view() -> None:
    st = {
        "phase": "Running",
        "queue": "team-a",
        "gpuType": "V100",
        "replicas": 2,
        "predictedThroughput": 3.21,
        "etaSeconds": 90,
        "message": "LAS queue 0",
    }
    labelled = job(ann={"perfsched.dev/status": json.dumps(st)})
    fresh = job()
    fresh["metadata"]["name"] = "new"
    other = job(labels={"app": "x"})
    other["metadata"]["name"] = "not-ours"
    rows = list_rows(JOB, [labelled, fresh, other])
    assert [r["NAME"] for r in rows] == ["j", "new"]
    assert rows[0] == {
        "KIND": "Job",
        "NAMESPACE": "ml",
        "NAME": "j",
        "PHASE": "Running",
        "QUEUE": "team-a",
        "GPU": "V100",
        "REPLICAS": "2",
        "PREDICTED/S": "3.21",
        "ETA": "90s",
        "MESSAGE": "LAS queue 0",
    }
    assert (rows[1]["PHASE"], rows[1]["MESSAGE"]) == ("Pending", "not seen by the operator yet")


def test_admission_tells_the_workers_the_plan_and_their_work() -> None:
    ann = {"perfsched.dev/model": "bert", "perfsched.dev/batch-size": "32", "perfsched.dev/total-work": "500"}
    w = decode(JOB, job(ann={**ann, "perfsched.dev/dataset": "squad"}))
    first, _ = admit_patches(w, "A100", ["A100-SXM4-40GB"], 3, admission=2, planned_node="a100-1")
    pod_ann = first["spec"]["template"]["metadata"]["annotations"]
    assert pod_ann == {
        "perfsched.dev/gpu-type": "A100",
        "perfsched.dev/admission": "2",
        "perfsched.dev/world-size": "3",
        "perfsched.dev/model": "bert",
        "perfsched.dev/dataset": "squad",
        "perfsched.dev/batch-size": "32",
        "perfsched.dev/precision": "fp32",
        "perfsched.dev/total-work": "500",
        "perfsched.dev/planned-node": "a100-1",
    }
