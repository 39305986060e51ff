"""Adopted batch/v1 Jobs, JobSets and TrainJobs through the operator's round, on the fake API servers.

The tests play the kinds' controllers: pods of an unsuspended workload appear with the label its
controller puts on them (``add_pods``), and ``FakeWorkloadApi.finish`` sets its finished condition.
"""

from __future__ import annotations

import json
from typing import Any

from scheduler.k8s.adopt import JOB, JOBSET, TRAINJOB, WorkloadKind
from scheduler.k8s.fakeworkloads import FakeWorkloadApi
from scheduler.operator.adopted import Adopter
from scheduler.operator.reconcile import Operator
from scheduler.policies import make_policy
from tests.operator.conftest import PRODUCTS, Harness, ScriptedPolicy, alloc, gpu_node, make_harness

GPU = {"limits": {"nvidia.com/gpu": 1}}


def pod_spec(gpus: int = 1) -> dict[str, Any]:
    res = {"limits": {"nvidia.com/gpu": gpus}} if gpus else {}
    return {"containers": [{"name": "train", "image": "trainer:1", "resources": res}]}


def batch_job(name: str, *, gpus: int = 1, parallelism: int = 2, labels: Any = None, ann: Any = None) -> Any:
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "labels": {"perfsched.dev/queue": "team-a"} if labels is None else labels,
            "annotations": ann
            if ann is not None
            else {"perfsched.dev/model": "resnet50", "perfsched.dev/batch-size": "128"},
        },
        "spec": {
            "suspend": True,
            "parallelism": parallelism,
            "completions": parallelism,
            "template": {"spec": pod_spec(gpus)},
        },
    }


def jobset(name: str) -> Any:
    rj = {
        "name": "workers",
        "replicas": 2,
        "template": {"spec": {"parallelism": 1, "completions": 1, "template": {"spec": pod_spec(1)}}},
    }
    launcher = {"name": "launcher", "replicas": 1, "template": {"spec": {"template": {"spec": pod_spec(0)}}}}
    return {
        "metadata": {"name": name, "namespace": "ml", "labels": {"perfsched.dev/queue": "team-a"}},
        "spec": {"suspend": True, "replicatedJobs": [launcher, rj]},
    }


def trainjob(name: str) -> Any:
    return {
        "metadata": {"name": name, "namespace": "ml", "labels": {"perfsched.dev/queue": "team-a"}},
        "spec": {
            "suspend": True,
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {"numNodes": 2, "resourcesPerNode": GPU},
            "runtimePatches": [{"manager": "someone.else/tool", "time": "2026-01-01T00:00:00Z"}],
        },
    }


def setup(policy: Any = None) -> tuple[Harness, FakeWorkloadApi, Operator]:
    h = make_harness(policy or ScriptedPolicy())
    h.api.add_node(gpu_node("a1", 4, "A100"))
    h.api.add_node(gpu_node("v1", 4, "V100"))
    h.api.add_trainingqueue(
        {"metadata": {"name": "team-a"}, "spec": {"quotas": [{"gpuType": "*", "nominal": 8}]}}
    )
    wapi = FakeWorkloadApi(h.clock.now)
    adopter = Adopter(wapi, known_model=lambda m: m in {"resnet50", "bert"})
    op = Operator(h.api, h.policy, h.oracle, config=h.config, clock=h.clock, adopter=adopter)
    return h, wapi, op


def status(wapi: FakeWorkloadApi, kind: WorkloadKind, name: str) -> Any:
    raw = (wapi.get(kind, "ml", name)["metadata"].get("annotations") or {}).get("perfsched.dev/status")
    return json.loads(raw) if raw else {}


def add_pods(h: Harness, wapi: FakeWorkloadApi, kind: WorkloadKind, name: str, node: str, n: int) -> None:
    """Play the controller and kube-scheduler: ``n`` running 1-GPU pods of the workload on ``node``."""
    obj = wapi.get(kind, "ml", name)
    value = obj["metadata"]["uid"] if kind is JOB else name
    for i in range(n):
        pod = h.api.add_foreign_pod("ml", f"{name}-{i}", node, 1)
        pod["metadata"]["labels"] = {kind.pod_label: value}


def test_batch_job_is_admitted_on_the_policys_gpu_type_then_completes() -> None:
    h, wapi, op = setup()
    wapi.add(JOB, batch_job("train"))
    h.policy.want["job/ml/train"] = alloc("job/ml/train", "V100", 1, v1=2)
    rep = op.run_round()
    assert rep.did("start", "job/ml/train")
    obj = wapi.get(JOB, "ml", "train")
    assert obj["spec"]["suspend"] is False
    tmpl = obj["spec"]["template"]
    assert tmpl["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": PRODUCTS["V100"]}
    assert tmpl["metadata"]["annotations"]["perfsched.dev/gpu-type"] == "V100"
    # placement written while suspended, the unsuspend after it (the API refuses template changes otherwise)
    assert [p[2]["spec"].get("suspend") for p in wapi.patches[:2]] == [None, False]
    st = status(wapi, JOB, "train")
    assert (st["phase"], st["gpuType"], st["replicas"], st["queue"]) == ("Running", "V100", 2, "team-a")
    assert ("Admitted", "admitted on 2 x V100: scripted by the test") in wapi.events_for("train")

    # its pods run on V100: the round accounts them to the job (not as foreign pods) and keeps it
    add_pods(h, wapi, JOB, "train", "v1", 2)
    h.clock.advance(60)
    seen_before = len(h.policy.seen)
    del h.policy.want["job/ml/train"]
    rep = op.run_round()
    snap, jobs = h.policy.seen[seen_before]
    assert snap.allocations["job/ml/train"].gpu_type == "V100"
    assert not any(k.endswith("#held") for k in snap.allocations)
    assert [j.name for j in jobs] == ["job/ml/train"]
    # attained service: 60 s x 2 GPUs
    assert status(wapi, JOB, "train")["attainedService"] == 120.0

    wapi.finish(JOB, "ml", "train", "Complete", "Job completed")
    op.run_round()
    assert status(wapi, JOB, "train")["phase"] == "Succeeded"
    assert ("Succeeded", "Job completed") in wapi.events_for("train")


def test_waiting_job_says_why_and_preemption_resuspends() -> None:
    h, wapi, op = setup()
    wapi.add(JOB, batch_job("train"))
    h.policy.want["job/ml/train"] = None
    op.run_round()
    assert wapi.get(JOB, "ml", "train")["spec"]["suspend"] is True
    st = status(wapi, JOB, "train")
    assert st["phase"] == "Waiting" and st["message"]
    h.policy.want["job/ml/train"] = alloc("job/ml/train", "A100", 1, a1=2)
    op.run_round()
    add_pods(h, wapi, JOB, "train", "a1", 2)
    h.policy.want["job/ml/train"] = None
    rep = op.run_round()
    assert rep.did("preempt", "job/ml/train")
    assert wapi.get(JOB, "ml", "train")["spec"]["suspend"] is True
    assert status(wapi, JOB, "train")["phase"] == "Waiting"
    assert any(r == "Preempted" for r, _ in wapi.events_for("train"))


def test_jobset_and_trainjob_admission_patches() -> None:
    h, wapi, op = setup()
    wapi.add(JOBSET, jobset("js"))
    wapi.add(TRAINJOB, trainjob("tj"))
    h.policy.want["jobset/ml/js"] = alloc("jobset/ml/js", "A100", 1, a1=2)
    h.policy.want["trainjob/ml/tj"] = alloc("trainjob/ml/tj", "V100", 1, v1=2)
    rep = op.run_round()
    assert rep.did("start", "jobset/ml/js") and rep.did("start", "trainjob/ml/tj")
    js = wapi.get(JOBSET, "ml", "js")["spec"]
    launcher, workers = js["replicatedJobs"]
    assert "nodeSelector" not in launcher["template"]["spec"]["template"]["spec"]  # asks no GPU
    assert workers["template"]["spec"]["template"]["spec"]["nodeSelector"] == {
        "nvidia.com/gpu.product": PRODUCTS["A100"]
    }
    assert js["suspend"] is False
    tj = wapi.get(TRAINJOB, "ml", "tj")["spec"]
    managers = [p["manager"] for p in tj["runtimePatches"]]
    assert managers == ["someone.else/tool", "perfsched.dev/operator"]  # the other manager's entry is kept
    ours = tj["runtimePatches"][1]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    assert ours["name"] == "node"
    assert ours["template"]["spec"]["template"]["spec"]["nodeSelector"] == {
        "nvidia.com/gpu.product": PRODUCTS["V100"]
    }
    assert tj["suspend"] is False and tj["trainer"]["numNodes"] == 2


def test_elastic_job_is_sized_by_the_policy() -> None:
    h, wapi, op = setup()
    ann = {
        "perfsched.dev/model": "resnet50",
        "perfsched.dev/batch-size": "128",
        "perfsched.dev/min-replicas": "1",
        "perfsched.dev/max-replicas": "4",
    }
    wapi.add(JOB, batch_job("el", parallelism=2, ann=ann))
    h.policy.want["job/ml/el"] = alloc("job/ml/el", "A100", 1, a1=4)
    op.run_round()
    assert wapi.get(JOB, "ml", "el")["spec"]["parallelism"] == 4
    assert status(wapi, JOB, "el")["replicas"] == 4


def test_bad_input_is_refused_and_stays_suspended() -> None:
    h, wapi, op = setup()
    wapi.add(JOB, batch_job("nogpu", gpus=0))
    wapi.add(JOB, batch_job("noqueue", labels={"perfsched.dev/queue": "nope"}))
    both = {"perfsched.dev/queue": "team-a", "kueue.x-k8s.io/queue-name": "lq"}
    wapi.add(JOB, batch_job("both", labels=both))
    wapi.add(
        JOB, batch_job("nonet", ann={"perfsched.dev/model": "no-such-net", "perfsched.dev/batch-size": "8"})
    )
    op.run_round()
    assert h.policy.seen[-1][1] == ()  # none of them reached the policy
    for name, words in [
        ("nogpu", "asks for no nvidia.com/gpu"),
        ("noqueue", "TrainingQueue 'nope' named by label perfsched.dev/queue does not exist"),
        ("both", "kueue.x-k8s.io/queue-name"),
        ("nonet", "unknown model 'no-such-net' in annotation perfsched.dev/model"),
    ]:
        assert wapi.get(JOB, "ml", name)["spec"]["suspend"] is True
        st = status(wapi, JOB, name)
        assert st["phase"] == "Refused" and words in st["message"], (name, st)
        assert any(r == "Refused" and words in m for r, m in wapi.events_for(name))
    # refused once: a second round writes and records nothing new
    n_patches, n_events = len(wapi.patches), len(wapi.events)
    op.run_round()
    assert (len(wapi.patches), len(wapi.events)) == (n_patches, n_events)


def test_kueue_job_is_left_alone_and_removing_the_label_releases() -> None:
    h, wapi, op = setup()
    wapi.add(JOB, batch_job("kq", labels={"kueue.x-k8s.io/queue-name": "lq"}))
    wapi.add(JOB, batch_job("mine"))
    h.policy.want["job/ml/mine"] = None
    op.run_round()
    assert [p[1] for p in wapi.patches] == ["mine"]  # the Kueue job was not touched
    assert status(wapi, JOB, "mine")["phase"] == "Waiting"
    del wapi.get(JOB, "ml", "mine")["metadata"]["labels"]["perfsched.dev/queue"]
    op.run_round()
    obj = wapi.get(JOB, "ml", "mine")
    assert obj["spec"]["suspend"] is False
    assert "perfsched.dev/status" not in obj["metadata"]["annotations"]
    assert any(r == "Released" for r, _ in wapi.events_for("mine"))


def test_unsuspended_labelled_job_is_suspended_until_admitted() -> None:
    h, wapi, op = setup()
    job = batch_job("early")
    job["spec"]["suspend"] = False
    wapi.add(JOB, job)
    h.policy.want["job/ml/early"] = None
    op.run_round()
    assert wapi.get(JOB, "ml", "early")["spec"]["suspend"] is True
    assert any(r == "Suspended" for r, _ in wapi.events_for("early"))


def test_agnostic_job_status_says_why_and_real_policy_admits_it() -> None:
    _h, wapi, op = setup(make_policy("las"))
    wapi.add(JOB, batch_job("plain", ann={}))
    rep = op.run_round()
    assert rep.did("start", "job/ml/plain")
    st = status(wapi, JOB, "plain")
    assert "no perfsched.dev/model and perfsched.dev/batch-size annotation" in st["predictor"]


def test_unlabelled_job_in_a_selected_namespace_is_adopted_into_that_queue() -> None:
    h, wapi, op = setup()
    h.api.add_namespace("ml", {"team": "b"})
    selector = {"namespaces": {"matchLabels": {"team": "b"}}, "quotas": [{"gpuType": "*", "nominal": 8}]}
    h.api.add_trainingqueue({"metadata": {"name": "team-b"}, "spec": selector})
    job = batch_job("plain", labels={})
    job["spec"]["suspend"] = False  # created before the queue selected the namespace
    wapi.add(JOB, job)
    wapi.add(JOB, batch_job("kq", labels={"kueue.x-k8s.io/queue-name": "lq"}))  # Kueue's, even here
    h.policy.want["job/ml/plain"] = None
    op.run_round()
    assert wapi.get(JOB, "ml", "plain")["spec"]["suspend"] is True
    assert status(wapi, JOB, "plain")["queue"] == "team-b"
    assert [j.queue for j in h.policy.seen[-1][1]] == ["team-b"]
    assert not wapi.events_for("kq") and "perfsched.dev/status" not in (
        wapi.get(JOB, "ml", "kq")["metadata"].get("annotations") or {}
    )


def test_namespace_scope_and_forbidden_kind() -> None:
    from scheduler.k8s.errors import Forbidden

    h, wapi, _ = setup()
    adopter = Adopter(wapi, namespace="ml")
    op = Operator(h.api, h.policy, h.oracle, config=h.config, clock=h.clock, adopter=adopter)
    other = batch_job("elsewhere")
    other["metadata"]["namespace"] = "other"
    wapi.add(JOB, other)
    wapi.add(JOB, batch_job("here"))
    h.policy.want["job/ml/here"] = None
    wapi.fail_next(Forbidden("jobs.batch is forbidden"))  # the first list (Jobs) is refused by RBAC
    rep = op.run_round()
    assert rep.errors == [] and not wapi.patches  # said once in the log, not a round error
    op.run_round()
    assert [p[1] for p in wapi.patches] == ["here"]  # the other namespace's Job is not touched


def test_higher_priority_job_preempts_through_the_queue_and_the_other_resumes() -> None:
    h, wapi, op = setup(make_policy("las"))
    h.api.delete_trainingqueue("team-a")
    h.api.add_trainingqueue(
        {"metadata": {"name": "team-a"}, "spec": {"quotas": [{"gpuType": "*", "nominal": 2}]}}
    )
    h.api.add_priority_class("low", 10)
    h.api.add_priority_class("high", 1000)
    low, high = batch_job("low"), batch_job("high")
    low["spec"]["template"]["spec"]["priorityClassName"] = "low"
    high["spec"]["template"]["spec"]["priorityClassName"] = "high"
    wapi.add(JOB, low)
    assert op.run_round().did("start", "job/ml/low")
    node = "a1" if status(wapi, JOB, "low")["gpuType"] == "A100" else "v1"
    add_pods(h, wapi, JOB, "low", node, 2)
    h.clock.advance(30)
    wapi.add(JOB, high)
    rep = op.run_round()
    # the queue holds 2 GPUs: the high-priority job takes them, the low one is re-suspended (graceful)
    assert rep.did("preempt", "job/ml/low") and rep.did("start", "job/ml/high")
    assert wapi.get(JOB, "ml", "low")["spec"]["suspend"] is True
    assert status(wapi, JOB, "low")["message"].startswith("preempted: queue team-a")
    # its pods go; the high one finishes; the low one is admitted again
    for i in range(2):
        h.api.delete_pod("ml", f"low-{i}", 0)
    h.api.finish_deletions()
    wapi.finish(JOB, "ml", "high", "Complete")
    rep = op.run_round()
    assert rep.did("start", "job/ml/low")
    assert wapi.get(JOB, "ml", "low")["spec"]["suspend"] is False
    assert status(wapi, JOB, "low")["attainedService"] == 60.0  # 30 s x 2 GPUs before the preemption


def test_predicted_throughput_and_restarts_survive_placing_and_preemption() -> None:
    """The admission's prediction stays in the status while kube-scheduler places the pods (no new one that
    round); a preemption counts a restart, which the next round's core job carries, as a TrainingJob's."""
    h, wapi, op = setup()
    wapi.add(JOB, batch_job("train"))
    h.policy.want["job/ml/train"] = alloc("job/ml/train", "A100", 1, a1=2)
    op.run_round()
    # RecordingOracle: 10 units/s per GPU x 2 GPUs
    assert status(wapi, JOB, "train")["predictedThroughput"] == 20.0
    # the pods are told the plan's node (the extender gathers them there), the admission and the inputs
    ann = wapi.get(JOB, "ml", "train")["spec"]["template"]["metadata"]["annotations"]
    assert ann["perfsched.dev/planned-node"] == "a1" and ann["perfsched.dev/admission"] == "1"
    assert (ann["perfsched.dev/model"], ann["perfsched.dev/batch-size"]) == ("resnet50", "128")
    assert "perfsched.dev/total-work" not in ann  # the job declares none
    h.clock.advance(31)  # past the status refresh: the annotation is rewritten this round
    add_pods(h, wapi, JOB, "train", "", 2)  # created, not bound: the job is being placed
    for p in h.api.pods.values():
        del p["spec"]["nodeName"]
        p["status"]["phase"] = "Pending"
    op.run_round()
    st = status(wapi, JOB, "train")
    assert (st["phase"], st["predictedThroughput"]) == ("Running", 20.0)

    for p in h.api.pods.values():
        p["spec"]["nodeName"] = "a1"
        p["status"]["phase"] = "Running"
    h.policy.want["job/ml/train"] = None
    rep = op.run_round()
    assert rep.did("preempt", "job/ml/train")
    assert status(wapi, JOB, "train")["restarts"] == 1
    h.api.pods.clear()
    seen = len(h.policy.seen)
    op.run_round()
    (job,) = h.policy.seen[seen][1]
    assert job.restarts == 1
    h.policy.want["job/ml/train"] = alloc("job/ml/train", "V100", 1, v1=2)
    op.run_round()  # its second admission: a new run of its workers
    ann = wapi.get(JOB, "ml", "train")["spec"]["template"]["metadata"]["annotations"]
    assert (ann["perfsched.dev/admission"], ann["perfsched.dev/planned-node"]) == ("2", "v1")


def test_admitted_job_being_placed_holds_its_planned_node() -> None:
    """While kube-scheduler places an admitted job's pods, the round holds GPUs for it on the node the
    policy planned (where the extender sends its pods), not on the first node of the type by name."""
    h, wapi, op = setup()
    h.api.add_node(gpu_node("a2", 4, "A100"))
    wapi.add(JOB, batch_job("train"))
    h.policy.want["job/ml/train"] = alloc("job/ml/train", "A100", 1, a2=2)
    op.run_round()
    assert status(wapi, JOB, "train")["plannedNode"] == "a2"
    seen = len(h.policy.seen)
    op.run_round()  # no pods yet: being placed
    snap = h.policy.seen[seen][0]
    held = snap.allocations["job/ml/train#planned"]
    assert dict(held.replicas_per_node) == {"a2": 2}


def test_progress_of_a_job_that_declares_its_work_comes_from_its_workers_reports() -> None:
    """The workers report on their pods as a TrainingJob's do; the job's progress (what LAS and the ETA
    read) and its status's progressPercent follow, refreshed with the attained service."""
    from scheduler.k8s.progress import ProgressReport

    h, wapi, op = setup()
    ann = {
        "perfsched.dev/model": "resnet50",
        "perfsched.dev/batch-size": "128",
        "perfsched.dev/total-work": "1000",
    }
    wapi.add(JOB, batch_job("train", ann=ann))
    h.policy.want["job/ml/train"] = alloc("job/ml/train", "A100", 1, a1=2)
    op.run_round()
    add_pods(h, wapi, JOB, "train", "a1", 2)
    report = ProgressReport(250.0, 200.0, 5.0, h.clock.now()).to_annotation()
    for p in h.api.pods.values():
        p["metadata"]["annotations"] = {"perfsched.dev/progress": report}
    h.clock.advance(31)
    seen = len(h.policy.seen)
    del h.policy.want["job/ml/train"]
    op.run_round()
    (job,) = h.policy.seen[seen][1]
    assert job.progress == 250.0  # 25% of 1,000
    assert status(wapi, JOB, "train")["progressPercent"] == 25.0
