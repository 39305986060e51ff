"""The start timeout of adopted Jobs, JobSets and TrainJobs (decision 0104), on the fake API servers.

The tests play the kinds' controllers, kube-scheduler and the kubelet: an admitted job's pods appear
bound or unbound, Pending with their own reason (ImagePullBackOff, FailedScheduling) or with none.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from scheduler.k8s.adopt import JOB, JOBSET, WorkloadKind, decode
from scheduler.k8s.fakeworkloads import FakeWorkloadApi
from scheduler.operator.adopted import Adopter
from scheduler.operator.reconcile import Operator
from tests.operator.conftest import Harness, ScriptedPolicy, alloc, gpu_node, make_harness
from tests.operator.test_adopted import batch_job, jobset

MODEL = {"perfsched.dev/model": "resnet50", "perfsched.dev/batch-size": "128"}
PULL = 'Back-off pulling image "registry.example.com/trainer:404"'


def setup(**timeouts: Any) -> tuple[Harness, FakeWorkloadApi, Operator]:
    h = make_harness(ScriptedPolicy())
    h.api.add_node(gpu_node("a1", 4, "A100"))
    h.api.add_trainingqueue(
        {"metadata": {"name": "team-a"}, "spec": {"quotas": [{"gpuType": "*", "nominal": 8}]}}
    )
    wapi = FakeWorkloadApi(h.clock.now)
    kw = {"start_timeout_s": 60.0, "backoff_limit": 1, "requeue_backoff_s": 30.0, **timeouts}
    adopter = Adopter(wapi, known_model=lambda m: m == "resnet50", **kw)
    op = Operator(h.api, h.policy, h.oracle, config=h.config, clock=h.clock, adopter=adopter)
    return h, wapi, op


def status(wapi: FakeWorkloadApi, name: str, kind: WorkloadKind = JOB) -> Any:
    raw = (wapi.get(kind, "ml", name)["metadata"].get("annotations") or {}).get("perfsched.dev/status")
    return json.loads(raw) if raw else {}


def pending_pods(
    h: Harness,
    wapi: FakeWorkloadApi,
    name: str,
    n: int,
    *,
    node: str = "a1",
    reason: str = "",
    kind: WorkloadKind = JOB,
) -> None:
    """Play the controller creating ``n`` 1-GPU pods that do not run: bound to ``node`` (unbound when "")
    with a container waiting for ``reason`` (a FailedScheduling condition when unbound; none when "")."""
    obj = wapi.get(kind, "ml", name)
    value = obj["metadata"]["uid"] if kind is JOB else name
    for i in range(n):
        pod = h.api.add_foreign_pod("ml", f"{name}-{i}", node, 1)
        pod["metadata"]["labels"] = {kind.pod_label: value}
        pod["status"]["phase"] = "Pending"
        if not node:
            del pod["spec"]["nodeName"]
            if reason:
                cond = {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": reason,
                }
                pod["status"]["conditions"] = [cond]
        elif reason:
            waiting = {"waiting": {"reason": "ImagePullBackOff", "message": reason}}
            pod["status"]["containerStatuses"] = [{"name": "train", "state": waiting}]


def run_pods(h: Harness) -> None:
    for pod in h.api.pods.values():
        pod["status"] = {"phase": "Running"}


def test_bound_pods_that_cannot_pull_their_image_time_out_release_their_gpus_and_back_off() -> None:
    h, wapi, op = setup(backoff_limit=3)
    wapi.add(JOB, batch_job("train"))
    h.policy.want["job/ml/train"] = alloc("job/ml/train", "A100", 1, a1=2)
    assert op.run_round().did("start", "job/ml/train")
    pending_pods(h, wapi, "train", 2, reason=PULL)
    del h.policy.want["job/ml/train"]

    # a problem is news once it lasts (10 s, or half the timeout): one Warning Event, the reason in the status
    h.clock.advance(5)
    op.run_round()
    assert not any(r == "PodsNotStarting" for r, _ in wapi.events_for("train"))
    h.clock.advance(6)
    op.run_round()
    st = status(wapi, "train")
    assert st["phase"] == "Running"
    assert st["message"] == f'pods not running yet: pods train-0, train-1: ImagePullBackOff "{PULL}"'
    h.clock.advance(10)
    op.run_round()
    assert [r for r, _ in wapi.events_for("train")].count("PodsNotStarting") == 1
    assert wapi.get(JOB, "ml", "train")["spec"]["suspend"] is False  # within its timeout it runs on

    # 60 s after its admission: suspended again in that round, its GPUs released, requeued after 30 s
    h.clock.advance(40)
    seen = len(h.policy.seen)
    rep = op.run_round()
    assert wapi.get(JOB, "ml", "train")["spec"]["suspend"] is True
    snap, jobs = h.policy.seen[seen]
    assert jobs == () and not snap.allocations  # no job, no reservation, its pods hold nothing
    st = status(wapi, "train")
    assert (st["phase"], st["requeueCount"]) == ("Waiting", 1)
    assert "start timeout 1 of backoff limit 3" in st["message"]
    assert (
        f'0/2 pods running 60 s after its admission: pods train-0, train-1: ImagePullBackOff "{PULL}"'
        in (st["message"])
    )
    assert st["nextAttemptTime"] in st["message"] and "(in 30 s)" in st["message"]
    (event,) = [m for r, m in wapi.events_for("train") if r == "StartTimeout"]
    assert event == st["message"]
    assert not rep.errors

    # backing off: outside the round, nothing rewritten; the controller deletes the pods meanwhile
    n_patches = len(wapi.patches)
    h.clock.advance(20)
    seen = len(h.policy.seen)
    op.run_round()
    assert h.policy.seen[seen][1] == () and len(wapi.patches) == n_patches
    h.api.pods.clear()
    h.clock.advance(11)
    seen = len(h.policy.seen)
    h.policy.want["job/ml/train"] = None
    op.run_round()
    assert [j.name for j in h.policy.seen[seen][1]] == ["job/ml/train"]
    st = status(wapi, "train")
    assert (st["phase"], st["requeueCount"]) == ("Waiting", 1)

    # admitted again, it times out again: the backoff doubles
    h.policy.want["job/ml/train"] = alloc("job/ml/train", "A100", 1, a1=2)
    op.run_round()
    assert status(wapi, "train")["requeueCount"] == 1  # the count stays across admissions
    pending_pods(h, wapi, "train", 2, reason=PULL)
    del h.policy.want["job/ml/train"]
    h.clock.advance(61)
    op.run_round()
    st = status(wapi, "train")
    assert st["requeueCount"] == 2 and "(in 60 s)" in st["message"]


def test_past_the_backoff_limit_it_stays_suspended_and_says_so() -> None:
    h, wapi, op = setup(backoff_limit=0)
    wapi.add(JOB, batch_job("train"))
    h.policy.want["job/ml/train"] = alloc("job/ml/train", "A100", 1, a1=2)
    op.run_round()
    msg = '0/4 nodes are available: persistentvolumeclaim "ckpt" not found'
    pending_pods(h, wapi, "train", 2, node="", reason=msg)
    h.clock.advance(61)
    seen = len(h.policy.seen)
    op.run_round()
    assert wapi.get(JOB, "ml", "train")["spec"]["suspend"] is True
    assert h.policy.seen[seen][1] == () and not h.policy.seen[seen][0].allocations
    st = status(wapi, "train")
    assert st["phase"] == "Stopped" and st["requeueCount"] == 1
    assert st["message"].startswith("backoff limit 0 exceeded after 1 start timeouts: stays suspended")
    assert st["message"].endswith(f'pods train-0, train-1: Unschedulable "{msg}"')
    assert any(r == "StartTimeoutExceeded" and "ckpt" in m for r, m in wapi.events_for("train"))

    # it never comes back by itself: not in the round, never unsuspended, nothing rewritten
    h.api.pods.clear()
    n_patches = len(wapi.patches)
    for _ in range(3):
        h.clock.advance(3600)
        seen = len(h.policy.seen)
        op.run_round()
        assert h.policy.seen[seen][1] == ()
    assert len(wapi.patches) == n_patches and wapi.get(JOB, "ml", "train")["spec"]["suspend"] is True

    # its owner fixed it and removed perfsched's status: a fresh start
    del wapi.get(JOB, "ml", "train")["metadata"]["annotations"]["perfsched.dev/status"]
    seen = len(h.policy.seen)
    op.run_round()
    assert [j.name for j in h.policy.seen[seen][1]] == ["job/ml/train"]


def test_pods_pending_without_a_reason_are_no_problem_and_a_started_job_never_times_out() -> None:
    h, wapi, op = setup()
    wapi.add(JOB, batch_job("train"))
    h.policy.want["job/ml/train"] = alloc("job/ml/train", "A100", 1, a1=2)
    op.run_round()
    del h.policy.want["job/ml/train"]
    pending_pods(h, wapi, "train", 2, node="")  # being bound: no reason yet
    h.clock.advance(30)
    op.run_round()
    assert status(wapi, "train")["message"] == "scripted by the test"
    assert not any(r == "PodsNotStarting" for r, _ in wapi.events_for("train"))
    # a reason shows; then the gang is bound and runs: the reason goes, the admission's message is back
    for pod in h.api.pods.values():
        pod["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "no room"}
        ]
    h.clock.advance(1)
    op.run_round()
    assert status(wapi, "train")["message"].startswith("pods not running yet: pods train-0, train-1")
    for pod in h.api.pods.values():
        pod["spec"]["nodeName"] = "a1"
    run_pods(h)
    h.clock.advance(1)
    op.run_round()
    st = status(wapi, "train")
    assert st["message"] == "scripted by the test" and st["startedTime"]
    # once it ran, its pods' later trouble is its controller's: no start timeout
    for pod in h.api.pods.values():
        pod["status"]["phase"] = "Pending"
    h.clock.advance(600)
    op.run_round()
    assert wapi.get(JOB, "ml", "train")["spec"]["suspend"] is False
    assert status(wapi, "train")["phase"] == "Running"


def test_annotation_sets_the_timeout_of_a_jobset() -> None:
    h, wapi, op = setup()
    js = jobset("js")
    js["metadata"]["annotations"] = {**MODEL, "perfsched.dev/start-timeout-seconds": "20"}
    wapi.add(JOBSET, js)
    h.policy.want["jobset/ml/js"] = alloc("jobset/ml/js", "A100", 1, a1=2)
    op.run_round()
    del h.policy.want["jobset/ml/js"]
    pending_pods(h, wapi, "js", 2, reason=PULL, kind=JOBSET)
    h.clock.advance(15)
    op.run_round()
    assert wapi.get(JOBSET, "ml", "js")["spec"]["suspend"] is False
    h.clock.advance(6)
    op.run_round()
    assert wapi.get(JOBSET, "ml", "js")["spec"]["suspend"] is True
    st = status(wapi, "js", JOBSET)
    assert st["requeueCount"] == 1 and "0/2 pods running 20 s after its admission" in st["message"]


@pytest.mark.parametrize("value", ["0", "-5", "abc", "1.5", "86401", ""])
def test_invalid_start_timeout_is_refused_naming_the_annotation(value: str) -> None:
    h, wapi, op = setup()
    wapi.add(JOB, batch_job("bad", ann={**MODEL, "perfsched.dev/start-timeout-seconds": value}))
    h.policy.want["job/ml/bad"] = alloc("job/ml/bad", "A100", 1, a1=2)
    op.run_round()
    assert h.policy.seen[-1][1] == ()
    assert wapi.get(JOB, "ml", "bad")["spec"]["suspend"] is True
    st = status(wapi, "bad")
    want = f"annotation perfsched.dev/start-timeout-seconds={value!r} is not a whole number of seconds"
    assert st["phase"] == "Refused" and want in st["message"]
    assert any(r == "Refused" and want in m for r, m in wapi.events_for("bad"))


def test_decode_reads_the_start_timeout() -> None:
    ok = batch_job("ok", ann={**MODEL, "perfsched.dev/start-timeout-seconds": "86400"})
    assert decode(JOB, ok).start_timeout_s == 86400 and not decode(JOB, ok).problem
    assert decode(JOB, batch_job("plain")).start_timeout_s is None


def test_at_the_timeout_a_pod_that_runs_keeps_its_gpus_and_one_that_never_ran_does_not() -> None:
    """Half a gang runs, the other half cannot pull its image: at the timeout the round counts the running
    pod's GPU as held (its controller gives it its grace period to checkpoint), the other one's as free."""
    h, wapi, op = setup()
    wapi.add(JOB, batch_job("train"))
    h.policy.want["job/ml/train"] = alloc("job/ml/train", "A100", 1, a1=2)
    op.run_round()
    del h.policy.want["job/ml/train"]
    pending_pods(h, wapi, "train", 2, reason=PULL)
    h.api.pods[("ml", "train-0")]["status"] = {"phase": "Running"}
    h.clock.advance(61)
    seen = len(h.policy.seen)
    op.run_round()
    snap, jobs = h.policy.seen[seen]
    assert jobs == ()
    assert sorted(snap.allocations) == ["ml/train-0#held"]
    assert "1/2 pods running" in status(wapi, "train")["message"]
    # while its controller deletes them, the same: the never-ran pod holds nothing, the running one does
    for pod in h.api.pods.values():
        pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    h.clock.advance(1)
    seen = len(h.policy.seen)
    op.run_round()
    assert sorted(h.policy.seen[seen][0].allocations) == ["ml/train-0#held"]
