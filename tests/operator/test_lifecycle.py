"""Every lifecycle transition of a TrainingJob through the operator, against the fake API server.

start -> Admitted -> Running -> progress/ETA -> Succeeded; crash -> restart from checkpoint -> Failed after
the backoff limit; preempt and resize through a graceful delete and a restart from the checkpoint; the
minimum resize interval; non-preemptible jobs; bad specs; jobs larger than the cluster; foreign GPU use.
"""

from __future__ import annotations

import json

from scheduler.core.round import RoundCosts
from scheduler.k8s import crd
from scheduler.names import ANNOTATION_PROGRESS
from tests.operator.conftest import (
    Harness,
    ScriptedPolicy,
    alloc,
    gpu_node,
    make_harness,
    trainingjob,
)


def env_of(pod: dict) -> dict[str, str]:
    return {e["name"]: e.get("value", "<ref>") for e in pod["spec"]["containers"][0]["env"]}


def cond(status: dict, type_: str) -> dict:
    return next(c for c in status["conditions"] if c["type"] == type_)


# --- start, run, progress, complete ----------------------------------------------------------------------


def test_start_creates_the_gang_with_labels_env_and_service(h: Harness) -> None:
    h.api.add_node(gpu_node("n1", 8))
    h.api.add_trainingjob(trainingjob("bert"))  # rigid: 2 replicas x 2 GPUs
    op = h.operator()
    rep = op.run_round()
    assert rep.did("start", "ml/bert")
    pods = h.api.job_pods("ml", "bert")
    assert [p["metadata"]["name"] for p in pods] == ["bert-g1-0", "bert-g1-1"]
    p0 = pods[0]
    assert p0["spec"]["schedulerName"] == "perfsched"
    assert p0["spec"]["restartPolicy"] == "Never"
    assert p0["spec"]["terminationGracePeriodSeconds"] == 20
    assert p0["metadata"]["labels"] == {
        "perfsched.dev/job-name": "bert",
        "perfsched.dev/replica-index": "0",
        "perfsched.dev/generation": "1",
    }
    ann = p0["metadata"]["annotations"]
    assert ann["perfsched.dev/gpu-type"] == "A100"
    assert ann["perfsched.dev/planned-node"] == "n1"
    assert ann["perfsched.dev/start-progress"] == "0"
    assert p0["metadata"]["ownerReferences"][0]["kind"] == "TrainingJob"
    env = env_of(p0)
    assert env["WORLD_SIZE"] == "2" and env["RANK"] == "0"
    assert env["MASTER_ADDR"] == "bert-0.bert.ml.svc" and env["MASTER_PORT"] == "29500"
    assert env["PERFSCHED_JOB_NAME"] == "bert" and env["PERFSCHED_TOTAL_WORK"] == "1000"
    assert env["PERFSCHED_POD_NAME"] == "<ref>"
    assert env_of(pods[1])["RANK"] == "1"
    assert p0["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert ("ml", "bert") in h.api.services
    assert h.api.services[("ml", "bert")]["spec"]["clusterIP"] == "None"

    st = h.api.status_of("ml", "bert")
    assert st["phase"] == "Admitted"
    assert st["allocation"] == {
        "replicas": 2,
        "gpuType": "A100",
        "gpusPerReplica": 2,
        "nodes": ["n1"],
        "replicasPerNode": {"n1": 2},
    }
    assert st["gangGeneration"] == 1
    assert cond(st, "Admitted")["status"] == "True"
    assert st["predictedThroughput"] == 40.0  # fake oracle: 10/s per GPU x 4 GPUs
    assert st["selector"] == "perfsched.dev/job-name=bert"
    assert ("Normal", "Started") in [(t, r) for t, r, _ in h.api.events_for("bert")]


def test_running_progress_eta_and_learning(h: Harness) -> None:
    h.api.add_node(gpu_node("n1", 8))
    h.api.add_trainingjob(trainingjob("bert"))
    op = h.operator()
    op.run_round()
    h.settle_pods()
    h.clock.advance(10)
    op.run_round()
    st = h.api.status_of("ml", "bert")
    assert st["phase"] == "Running"
    assert cond(st, "Running")["status"] == "True"
    assert ("Normal", "Running") in [(t, r) for t, r, _ in h.api.events_for("bert")]
    # 10 s with 2 replicas x 2 GPUs running = 40 GPU-seconds
    assert st["attainedService"] == 40.0

    h.api.report_progress(
        "ml", "bert-g1-0", progress=250, checkpoint=200, throughput=25.0, time=h.clock.now()
    )
    h.clock.advance(5)
    op.run_round()
    st = h.api.status_of("ml", "bert")
    assert st["progress"] == 250 and st["checkpointProgress"] == 200
    assert st["progressPercent"] == 25.0 and st["progressPercentText"] == "25.0%"
    assert st["observedThroughput"] == 25.0
    # ETA from the observed rate: (1000 - 250) / 25 = 30 s after now
    assert st["estimatedCompletion"] == crd.rfc3339(h.clock.now() + 30)
    assert h.oracle.observed == [("ml/bert", "A100", 25.0)]
    op.run_round()  # the same report is not learned twice
    assert len(h.oracle.observed) == 1


def test_completes_when_replica0_reports_all_work(h: Harness) -> None:
    h.api.add_node(gpu_node("n1", 8))
    h.api.add_trainingjob(trainingjob("bert"))
    op = h.operator()
    op.run_round()
    h.settle_pods()
    h.api.report_progress(
        "ml", "bert-g1-0", progress=1000, checkpoint=1000, throughput=25.0, time=h.clock.now()
    )
    h.clock.advance(40)
    rep = op.run_round()
    assert rep.did("complete", "ml/bert")
    st = h.api.status_of("ml", "bert")
    assert st["phase"] == "Succeeded"
    assert st["progress"] == 1000 and st["progressPercent"] == 100.0
    # finished between rounds: the whole gang (2 x 2 GPUs) counts for the 40 s since it started
    assert st["attainedService"] == 160.0
    assert cond(st, "Succeeded")["status"] == "True"
    assert "allocation" not in st
    # the service goes; the workers get the grace period (20 s) to exit 0 by themselves
    assert ("ml", "bert") not in h.api.services
    h.api.set_pod_phase("ml", "bert-g1-0", "Succeeded")
    h.clock.advance(10)
    op.run_round()
    assert not any("deletionTimestamp" in p["metadata"] for p in h.api.job_pods("ml", "bert"))
    h.clock.advance(11)  # replica 1 hangs past the grace period: stopped
    op.run_round()
    pods = {p["metadata"]["name"]: p for p in h.api.job_pods("ml", "bert")}
    assert "deletionTimestamp" in pods["bert-g1-1"]["metadata"]
    assert pods["bert-g1-0"]["status"]["phase"] == "Succeeded"
    # a finished job stays finished: no new pods in later rounds
    h.api.finish_deletions()
    op.run_round()
    assert [p["metadata"]["name"] for p in h.api.job_pods("ml", "bert")] == ["bert-g1-0"]
    assert [r for _, r, _ in h.api.events_for("bert")].count("Succeeded") == 1


def test_completes_when_replica0_exits_zero(h: Harness) -> None:
    h.api.add_node(gpu_node("n1", 8))
    h.api.add_trainingjob(trainingjob("bert"))
    op = h.operator()
    op.run_round()
    h.settle_pods()
    h.api.set_pod_phase("ml", "bert-g1-1", "Succeeded")
    op.run_round()
    assert h.api.status_of("ml", "bert")["phase"] == "Running"  # replica 1 done first is not completion
    h.api.set_pod_phase("ml", "bert-g1-0", "Succeeded")
    op.run_round()
    assert h.api.status_of("ml", "bert")["phase"] == "Succeeded"


# --- failures --------------------------------------------------------------------------------------------


def test_crash_restarts_from_checkpoint_then_fails_after_backoff_limit() -> None:
    h = make_harness(backoff_limit=1)
    h.api.add_node(gpu_node("n1", 8))
    h.api.add_trainingjob(trainingjob("bert"))
    op = h.operator()
    op.run_round()
    h.settle_pods()
    h.api.report_progress("ml", "bert-g1-0", progress=300, checkpoint=200, throughput=20, time=h.clock.now())
    op.run_round()
    h.api.set_pod_phase("ml", "bert-g1-1", "Failed")
    rep = op.run_round()
    assert rep.did("restart", "ml/bert")
    st = h.api.status_of("ml", "bert")
    assert st["phase"] == "Pending" and st["failures"] == 1
    assert cond(st, "Running")["reason"] == "WorkerFailed"
    assert "pod bert-g1-1 failed" in st["message"]
    assert "allocation" not in st
    # the surviving replica is asked to checkpoint and exit; no new gang while it drains
    op.run_round()
    assert not any(p["metadata"]["name"].startswith("bert-g2") for p in h.api.job_pods("ml", "bert"))
    h.api.finish_deletions()
    rep = op.run_round()
    assert rep.did("start", "ml/bert")
    st = h.api.status_of("ml", "bert")
    # restarted from checkpoint 200: the 100 iterations after it are lost and counted
    assert (st["restarts"], st["gangGeneration"], st["progress"], st["lostWork"]) == (1, 2, 200, 100)
    g2 = [
        p for p in h.api.job_pods("ml", "bert") if p["metadata"]["labels"]["perfsched.dev/generation"] == "2"
    ]
    assert {p["metadata"]["annotations"]["perfsched.dev/start-progress"] for p in g2} == {"200"}

    h.settle_pods()
    h.api.set_pod_phase("ml", "bert-g2-0", "Failed")
    rep = op.run_round()
    assert rep.did("fail", "ml/bert")
    st = h.api.status_of("ml", "bert")
    assert st["phase"] == "Failed" and st["reason"] == "BackoffLimitExceeded"
    assert "backoff limit 1 exceeded after 2 worker failures" in cond(st, "Failed")["message"]
    h.api.finish_deletions()
    op.run_round()
    assert all(p["status"]["phase"] == "Failed" for p in h.api.job_pods("ml", "bert"))


def test_pod_deleted_from_running_gang_restarts_the_gang(h: Harness) -> None:
    h.api.add_node(gpu_node("n1", 8))
    h.api.add_trainingjob(trainingjob("bert"))
    op = h.operator()
    op.run_round()
    h.settle_pods()
    op.run_round()
    h.api.delete_pod("ml", "bert-g1-1", 0)
    h.api.finish_deletions()
    rep = op.run_round()
    assert rep.did("restart", "ml/bert")
    st = h.api.status_of("ml", "bert")
    assert cond(st, "Running")["reason"] == "GangBroken"
    assert "replica(s) 1 of the running gang disappeared" in cond(st, "Running")["message"]


def test_gang_not_scheduled_in_time_is_requeued() -> None:
    h = make_harness(gang_start_timeout_s=60)
    h.api.add_node(gpu_node("n1", 8))
    h.api.add_trainingjob(trainingjob("bert"))
    op = h.operator()
    op.run_round()
    h.clock.advance(61)  # nobody binds the pods
    rep = op.run_round()
    assert rep.did("restart", "ml/bert")
    st = h.api.status_of("ml", "bert")
    assert cond(st, "Running")["reason"] == "StartTimeout"
    assert "0/2 replicas running 60 s after the gang started" in cond(st, "Running")["message"]
    # requeued after the first backoff (30 s), counted against the backoff limit
    assert (st["requeueCount"], st["nextAttemptTime"]) == (1, crd.rfc3339(h.clock.now() + 30))
    assert h.api.job_pods("ml", "bert") == []  # unbound pods are deleted at once


# --- preemption and resizing -----------------------------------------------------------------------------


def test_preempt_drains_gracefully_and_restarts_from_checkpoint() -> None:
    policy = ScriptedPolicy()
    h = make_harness(policy)
    h.api.add_node(gpu_node("n1", 8))
    h.api.add_trainingjob(trainingjob("low", priority=-1))
    op = h.operator()
    a = alloc("ml/low", "A100", 2, n1=2)
    policy.want["ml/low"] = a
    op.run_round()
    h.settle_pods()
    h.api.report_progress("ml", "low-g1-0", progress=500, checkpoint=400, throughput=20, time=h.clock.now())
    op.run_round()

    policy.want["ml/low"] = None
    rep = op.run_round()
    assert rep.did("preempt", "ml/low")
    st = h.api.status_of("ml", "low")
    assert st["phase"] == "Preempted" and st["preemptions"] == 1
    assert cond(st, "Preempted")["status"] == "True"
    assert "workers get 20 s to checkpoint" in cond(st, "Preempted")["message"]
    pods = h.api.job_pods("ml", "low")
    assert all(p["metadata"]["deletionGracePeriodSeconds"] == 20 for p in pods)
    assert ("Warning", "Preempted") in [(t, r) for t, r, _ in h.api.events_for("low")]

    # while the workers checkpoint, the job is not in the round and its 4 GPUs stay taken
    h.api.report_progress("ml", "low-g1-0", progress=520, checkpoint=520, throughput=0, time=h.clock.now())
    policy.want["ml/low"] = a
    op.run_round()
    snap, jobs = policy.seen[-1]
    assert "ml/low" not in {j.name for j in jobs}
    assert snap.used_by_node() == {"n1": 4}
    assert set(snap.allocations) == {"ml/low-g1-0#held", "ml/low-g1-1#held"}
    assert h.api.status_of("ml", "low")["phase"] == "Preempted"

    h.api.finish_deletions()
    rep = op.run_round()
    assert rep.did("start", "ml/low")
    st = h.api.status_of("ml", "low")
    # the workers saved a checkpoint at 520 on SIGTERM: nothing lost
    assert (st["progress"], st["lostWork"], st["restarts"]) == (520, 0, 1)
    assert cond(st, "Preempted")["status"] == "False"


def test_non_preemptible_job_is_never_preempted() -> None:
    policy = ScriptedPolicy()
    h = make_harness(policy)
    h.api.add_node(gpu_node("n1", 8))
    h.api.add_trainingjob(trainingjob("vip", preemptible=False))
    op = h.operator()
    policy.want["ml/vip"] = alloc("ml/vip", "A100", 2, n1=2)
    op.run_round()
    h.settle_pods()
    policy.want["ml/vip"] = None
    rep = op.run_round()
    assert not rep.did("preempt", "ml/vip")
    assert h.api.status_of("ml", "vip")["phase"] == "Running"
    assert not any("deletionTimestamp" in p["metadata"] for p in h.api.job_pods("ml", "vip"))


def test_elastic_resize_respects_min_interval_then_restarts_with_new_world_size() -> None:
    policy = ScriptedPolicy()
    h = make_harness(policy, costs=RoundCosts(min_resize_interval_s=60))
    h.api.add_node(gpu_node("n1", 8))
    h.api.add_trainingjob(trainingjob("el", elastic=True, replicas={"min": 1, "max": 4, "gpusPerReplica": 1}))
    op = h.operator()
    policy.want["ml/el"] = alloc("ml/el", "A100", 1, n1=2)
    op.run_round()
    h.settle_pods()
    op.run_round()

    policy.want["ml/el"] = alloc("ml/el", "A100", 1, n1=4)
    h.clock.advance(30)  # 30 s < 60 s minimum interval: kept as it runs
    rep = op.run_round()
    assert not rep.did("resize", "ml/el")
    assert "minimum resize interval" in h.api.status_of("ml", "el")["message"]

    h.clock.advance(31)
    rep = op.run_round()
    assert rep.did("resize", "ml/el")
    st = h.api.status_of("ml", "el")
    assert (st["phase"], st["resizes"]) == ("Resizing", 1)
    assert cond(st, "Resized")["message"].startswith("resizing 2 -> 4 replicas")
    h.api.finish_deletions()
    op.run_round()
    g2 = [p for p in h.api.job_pods("ml", "el") if p["metadata"]["labels"]["perfsched.dev/generation"] == "2"]
    assert len(g2) == 4
    assert {env_of(p)["WORLD_SIZE"] for p in g2} == {"4"}
    assert sorted(env_of(p)["RANK"] for p in g2) == ["0", "1", "2", "3"]
    assert h.api.status_of("ml", "el")["phase"] == "Admitted"


# --- waiting and bad input -------------------------------------------------------------------------------


def test_job_larger_than_cluster_stays_pending_with_reason(h: Harness) -> None:
    h.api.add_node(gpu_node("n1", 8))
    h.api.add_trainingjob(trainingjob("huge", replicas={"max": 8, "gpusPerReplica": 2}))
    op = h.operator()
    op.run_round()
    st = h.api.status_of("ml", "huge")
    assert st["phase"] == "Pending"
    c = cond(st, "Admitted")
    assert (c["status"], c["reason"]) == ("False", "Unschedulable")
    assert c["message"] == "asks 16 GPUs, cluster has 8 of one allowed type"
    op.run_round()
    assert [r for _, r, _ in h.api.events_for("huge")] == ["Unschedulable"]  # one event, not one per round


def test_bad_specs_stay_pending_and_others_still_run(h: Harness) -> None:
    h.api.add_node(gpu_node("n1", 8))
    no_containers = trainingjob("empty")
    no_containers["spec"]["template"] = {"spec": {"containers": []}}
    h.api.add_trainingjob(no_containers)
    h.api.add_trainingjob(trainingjob("mystery", model="no-such-net"))
    h.api.add_trainingjob(trainingjob("nowhere", allowedGPUTypes=["H200"]))
    h.api.add_trainingjob(trainingjob("good"))
    op = h.operator()
    rep = op.run_round()
    assert rep.did("start", "ml/good")
    expected = {
        "empty": ("InvalidSpec", "spec.template.spec.containers is empty"),
        "mystery": ("InvalidSpec", "unknown model 'no-such-net' in spec.model"),
        "nowhere": ("Unschedulable", "no node has any of the GPU types in spec.allowedGPUTypes ['H200']"),
    }
    for name, (reason, needle) in expected.items():
        st = h.api.status_of("ml", name)
        assert st["phase"] == "Pending", name
        c = cond(st, "Admitted")
        assert c["reason"] == reason and needle in c["message"], (name, c)
        assert h.api.job_pods("ml", name) == []


def test_fifo_queue_reason_and_foreign_gpu_use(h: Harness) -> None:
    h.api.add_node(gpu_node("n1", 8))
    h.api.add_foreign_pod("other", "notebook", "n1", 6)  # 6 of 8 GPUs used outside perfsched
    h.api.add_trainingjob(trainingjob("bert"))  # needs 4
    op = h.operator()
    op.run_round()
    st = h.api.status_of("ml", "bert")
    c = cond(st, "Admitted")
    assert (st["phase"], c["reason"]) == ("Pending", "Waiting")
    assert c["message"].startswith("waiting for 4 GPUs of type A100: 2 free")


def test_priority_class_name_is_resolved(h: Harness) -> None:
    h.api.add_node(gpu_node("n1", 4))
    h.api.add_trainingjob(trainingjob("a"))
    h.api.add_trainingjob(trainingjob("b", priorityClassName="urgent"))
    op = h.operator()
    op.run_round()
    assert "PriorityClass 'urgent'" in cond(h.api.status_of("ml", "b"), "Admitted")["message"]
    h.api.add_priority_class("urgent", 1000)
    h.api.delete_trainingjob("ml", "a")
    op.run_round()
    assert h.api.status_of("ml", "b")["phase"] == "Admitted"


def test_progress_annotation_garbage_is_ignored(h: Harness) -> None:
    h.api.add_node(gpu_node("n1", 8))
    h.api.add_trainingjob(trainingjob("bert"))
    op = h.operator()
    op.run_round()
    h.settle_pods()
    h.api.pods[("ml", "bert-g1-0")]["metadata"].setdefault("annotations", {})[ANNOTATION_PROGRESS] = "{oops"
    op.run_round()
    st = h.api.status_of("ml", "bert")
    assert st["phase"] == "Running" and st["progress"] == 0


def test_progress_annotation_is_json_of_the_documented_shape() -> None:
    # the annotation format the operator reads is the one workers write (scheduler.k8s.progress)
    from scheduler.k8s.progress import parse_progress

    raw = json.dumps({"progress": 10, "checkpoint": 5, "throughput": 2.5, "time": 1.0})
    rep = parse_progress(raw)
    assert rep is not None and (rep.progress, rep.checkpoint, rep.throughput) == (10, 5, 2.5)


def test_round_sets_cluster_and_phase_gauges(h: Harness) -> None:
    from scheduler.metrics import REGISTRY

    h.api.add_node(gpu_node("n1", 8))
    h.api.add_trainingjob(trainingjob("bert"))  # 4 GPUs, starts
    h.api.add_trainingjob(trainingjob("huge", replicas={"max": 8, "gpusPerReplica": 2}))  # never fits
    h.clock.advance(90)  # both created at T0 by the fake API: 90 s ago
    h.operator().run_round()
    assert REGISTRY.get_sample_value("perfsched_cluster_gpus", {"gpu_type": "A100"}) == 8
    assert REGISTRY.get_sample_value("perfsched_cluster_gpus_allocated", {"gpu_type": "A100"}) == 4
    assert REGISTRY.get_sample_value("perfsched_operator_oldest_waiting_job_seconds") == 90
    assert REGISTRY.get_sample_value("perfsched_operator_jobs", {"phase": "Pending"}) == 1
    assert REGISTRY.get_sample_value("perfsched_operator_jobs", {"phase": "Admitted"}) == 1


def test_scheduler_binding_elsewhere_than_planned_never_wedges_the_round(h: Harness) -> None:
    # two 4-GPU nodes, two 4-GPU jobs: the round plans a on one node and b on the other
    h.api.add_node(gpu_node("n1", 4))
    h.api.add_node(gpu_node("n2", 4))
    h.api.add_trainingjob(trainingjob("a", replicas={"max": 1, "gpusPerReplica": 4}))
    h.api.add_trainingjob(trainingjob("b", replicas={"max": 1, "gpusPerReplica": 4}))
    op = h.operator()
    op.run_round()
    planned = {
        p["metadata"]["labels"]["perfsched.dev/job-name"]: p["metadata"]["annotations"][
            "perfsched.dev/planned-node"
        ]
        for p in h.api.pods.values()
    }
    assert sorted(planned.values()) == ["n1", "n2"]
    # kube-scheduler binds a onto b's planned node; b is not bound yet
    h.api.bind("ml", "a-g1-0", planned["b"])
    rep = op.run_round()
    assert rep.errors == [] and rep.actions == {}
    assert h.api.status_of("ml", "b")["phase"] == "Admitted"
    h.api.bind("ml", "b-g1-0", planned["a"])
    h.api.run_all_bound()
    rep = op.run_round()
    assert rep.errors == []
    assert {h.api.status_of("ml", n)["phase"] for n in "ab"} == {"Running"}
