"""Gangs that cannot start, GPU nodes that fail, and an operator that dies mid-change (the fake API server).

- start timeout: a gang whose replicas are not all Running ``startTimeoutSeconds`` after it started is
  stopped (its pods deleted, its GPUs free), requeued with exponential backoff and Fails past the backoff
  limit; the condition and the Event quote the pods' own reason;
- node failure: a node NotReady beyond the grace period, deleted or tainted NoExecute restarts every gang
  on it from its last checkpoint on healthy GPUs, never partially, counting the lost work, and its GPUs
  leave the planner's capacity until it is healthy;
- failover: an operator killed after any write of a resize, preemption or migration leaves no pod the
  status does not own once the next leader ran one round, and each decision has one Event.
"""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.core.round import RoundCosts
from scheduler.k8s import crd
from scheduler.operator.observe import MESSAGE_CAP, quoted
from scheduler.operator.reconcile import Operator
from scheduler.policies import make_policy
from tests.operator.conftest import (
    Harness,
    ScriptedPolicy,
    alloc,
    gpu_node,
    make_harness,
    trainingjob,
)


def cond(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == type_)


def reasons(h: Harness, name: str) -> list[str]:
    return [r for _, r, _ in h.api.events_for(name)]


def live_pods(h: Harness, job: str) -> list[str]:
    return [
        p["metadata"]["name"]
        for p in h.api.job_pods("ml", job)
        if "deletionTimestamp" not in p["metadata"]
        and p["status"].get("phase") not in ("Succeeded", "Failed")
    ]


def unschedulable(h: Harness, pod: str, message: str) -> None:
    """Play kube-scheduler failing to place a pod (its FailedScheduling message in PodScheduled)."""
    h.api.pods[("ml", pod)]["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    ]


def waiting(h: Harness, pod: str, reason: str, message: str) -> None:
    """Play a kubelet that cannot start a bound pod's container."""
    h.api.pods[("ml", pod)]["status"]["containerStatuses"] = [
        {"name": "worker", "state": {"waiting": {"reason": reason, "message": message}}}
    ]


def not_ready(h: Harness, node: str, since: float) -> None:
    h.api.nodes[node]["status"]["conditions"] = [
        {"type": "Ready", "status": "Unknown", "lastTransitionTime": crd.rfc3339(since)}
    ]


def ready(h: Harness, node: str) -> None:
    h.api.nodes[node]["status"]["conditions"] = [
        {"type": "Ready", "status": "True", "lastTransitionTime": crd.rfc3339(h.clock.now())}
    ]


PVC = 'persistentvolumeclaim "perfsched-checkpoints" not found'


# --- start timeout ---------------------------------------------------------------------------------------


def test_the_pods_reason_is_quoted_and_capped() -> None:
    assert quoted("ErrImagePull", 'pull "x:1"\n failed') == 'ErrImagePull "pull "x:1" failed"'
    long = quoted("Unschedulable", "y" * 1000)
    assert len(long) == len('Unschedulable ""') + MESSAGE_CAP and long.endswith('..."')
    assert quoted("ImagePullBackOff", "") == "ImagePullBackOff"


def test_stuck_gang_says_why_then_is_stopped_and_requeued_with_backoff() -> None:
    h = make_harness(gang_start_timeout_s=300, requeue_backoff_s=30)
    h.api.add_node(gpu_node("n1", 8))
    h.api.add_trainingjob(trainingjob("bert", startTimeoutSeconds=60, backoffLimit=2))
    op = h.operator()
    op.run_round()
    for pod in ("bert-g1-0", "bert-g1-1"):
        unschedulable(h, pod, f"0/1 nodes are available: {PVC}. preemption: 0/1 nodes are available")
    op.run_round()  # at once: the condition says why in the pods' words, not yet a Warning
    run = cond(h.api.status_of("ml", "bert"), "Running")
    assert run["reason"] == "PodsStarting" and PVC in run["message"]
    assert "PodsNotStarting" not in reasons(h, "bert")
    h.clock.advance(10)  # the problem lasts (PROBLEM_AFTER_S): it becomes the reason, with an Event
    op.run_round()
    st = h.api.status_of("ml", "bert")
    run = cond(st, "Running")
    assert run["reason"] == "PodsNotStarting"
    assert f'pods bert-g1-0, bert-g1-1: Unschedulable "0/1 nodes are available: {PVC}.' in run["message"]
    assert reasons(h, "bert").count("PodsNotStarting") == 1
    op.run_round()
    assert reasons(h, "bert").count("PodsNotStarting") == 1  # once per gang, not per round

    h.clock.advance(51)  # spec.startTimeoutSeconds 60 < the operator's 300
    rep = op.run_round()
    assert rep.did("restart", "ml/bert")
    st = h.api.status_of("ml", "bert")
    assert h.api.job_pods("ml", "bert") == []  # unbound: deleted at once, nothing held
    assert "allocation" not in st and st["requeueCount"] == 1
    assert st["nextAttemptTime"] == crd.rfc3339(h.clock.now() + 30)  # first backoff: 30 s
    run = cond(st, "Running")
    assert run["reason"] == "StartTimeout" and PVC in run["message"]
    assert "start timeout 1 of backoff limit 2" in run["message"]
    assert [(t, r) for t, r, _ in h.api.events_for("bert")][-1] == ("Warning", "StartTimeout")

    h.clock.advance(10)  # backing off: not started although the GPUs are free
    assert not op.run_round().did("start", "ml/bert")
    st = h.api.status_of("ml", "bert")
    assert cond(st, "Admitted")["reason"] == "StartBackoff" and PVC in cond(st, "Admitted")["message"]
    assert h.api.job_pods("ml", "bert") == []

    h.clock.advance(21)  # 31 s after the timeout: the next attempt
    assert op.run_round().did("start", "ml/bert")
    assert live_pods(h, "bert") == ["bert-g2-0", "bert-g2-1"]
    h.clock.advance(61)  # stuck again: the second backoff doubles
    assert op.run_round().did("restart", "ml/bert")
    st = h.api.status_of("ml", "bert")
    assert (st["requeueCount"], st["nextAttemptTime"]) == (2, crd.rfc3339(h.clock.now() + 60))

    h.clock.advance(61)
    assert op.run_round().did("start", "ml/bert")
    h.clock.advance(61)  # third timeout > backoffLimit 2: Failed
    assert op.run_round().did("fail", "ml/bert")
    st = h.api.status_of("ml", "bert")
    assert (st["phase"], st["reason"], st["requeueCount"]) == ("Failed", "StartTimeoutExceeded", 3)
    assert "backoff limit 2 exceeded after 3 start timeouts" in st["message"]
    assert h.api.job_pods("ml", "bert") == []


def test_a_short_start_timeout_reports_the_problem_halfway() -> None:
    # PROBLEM_AFTER_S is 10 s, but a gang with 8 s to start is told at 4 s, before it is stopped
    h = make_harness()
    h.api.add_node(gpu_node("n1", 8))
    h.api.add_trainingjob(trainingjob("bert", startTimeoutSeconds=8))
    op = h.operator()
    op.run_round()
    unschedulable(h, "bert-g1-0", PVC)
    h.clock.advance(3)
    op.run_round()
    assert cond(h.api.status_of("ml", "bert"), "Running")["reason"] == "PodsStarting"
    h.clock.advance(1)
    op.run_round()
    assert cond(h.api.status_of("ml", "bert"), "Running")["reason"] == "PodsNotStarting"


def test_a_fixed_cause_lets_the_next_attempt_run() -> None:
    h = make_harness(gang_start_timeout_s=60, requeue_backoff_s=10)
    h.api.add_node(gpu_node("n1", 8))
    h.api.add_trainingjob(trainingjob("bert"))
    op = h.operator()
    op.run_round()
    h.clock.advance(61)
    assert op.run_round().did("restart", "ml/bert")
    h.clock.advance(11)  # the claim was created meanwhile: this time kube-scheduler binds the gang
    assert op.run_round().did("start", "ml/bert")
    h.settle_pods()
    op.run_round()
    st = h.api.status_of("ml", "bert")
    assert (st["phase"], st["requeueCount"]) == ("Running", 1)
    h.clock.advance(400)  # a running gang never times out
    assert not op.run_round().did("restart", "ml/bert")


def test_bound_pods_that_cannot_pull_their_image_release_their_gpus() -> None:
    h = make_harness(ScriptedPolicy(), gang_start_timeout_s=60)
    assert isinstance(h.policy, ScriptedPolicy)
    h.api.add_node(gpu_node("n1", 4))
    h.api.add_trainingjob(trainingjob("bert"))
    h.policy.want["ml/bert"] = alloc("ml/bert", "A100", 2, n1=2)
    op = h.operator()
    op.run_round()
    h.api.bind_as_planned()  # bound, but the kubelet cannot pull the image
    msg = 'Back-off pulling image "trainer:1": not found'
    waiting(h, "bert-g1-0", "ImagePullBackOff", msg)
    waiting(h, "bert-g1-1", "ContainerCreating", "")  # still being created: not a problem
    h.clock.advance(10)
    op.run_round()
    run = cond(h.api.status_of("ml", "bert"), "Running")
    assert run["message"].endswith(f'pod bert-g1-0: ImagePullBackOff "{msg}"')
    h.clock.advance(51)
    h.api.calls.clear()
    assert op.run_round().did("restart", "ml/bert")
    assert [c for c in h.api.calls if c[0] == "delete_pod"] == [
        ("delete_pod", "ml", "bert-g1-0"),
        ("delete_pod", "ml", "bert-g1-1"),
    ]
    # bound and never Running: a grace period of 1 s (no checkpoint to wait for), gone by the next round
    assert all(p["metadata"]["deletionGracePeriodSeconds"] == 1 for p in h.api.job_pods("ml", "bert"))
    run = cond(h.api.status_of("ml", "bert"), "Running")
    assert run["reason"] == "StartTimeout" and "ImagePullBackOff" in run["message"]


def test_a_gang_still_being_bound_is_not_a_failure_before_the_timeout() -> None:
    h = make_harness(gang_start_timeout_s=60)
    h.api.add_node(gpu_node("n1", 8))
    h.api.add_trainingjob(trainingjob("bert"))
    op = h.operator()
    op.run_round()
    h.api.bind("ml", "bert-g1-0", "n1")  # replica 1 is still being bound with its gang
    h.clock.advance(59)
    rep = op.run_round()
    assert not rep.did("restart", "ml/bert")
    run = cond(h.api.status_of("ml", "bert"), "Running")
    assert run["reason"] == "PodsStarting" and "PodsNotStarting" not in reasons(h, "bert")


# --- node failure -----------------------------------------------------------------------------------------


def running_gang(h: Harness, **nodes: int) -> None:
    """Job ``bert`` (2 replicas of 2 GPUs) runs on ``nodes`` and has reported progress 300, checkpoint 200."""
    assert isinstance(h.policy, ScriptedPolicy)
    h.api.add_trainingjob(trainingjob("bert", replicas={"min": 2, "max": 2, "gpusPerReplica": 2}))
    h.policy.want["ml/bert"] = alloc("ml/bert", "A100", 2, **nodes)
    op = h.operator()
    op.run_round()
    h.settle_pods()
    h.api.report_progress("ml", "bert-g1-0", progress=300, checkpoint=200, throughput=20, time=h.clock.now())
    op.run_round()
    assert h.api.status_of("ml", "bert")["phase"] == "Running"


@pytest.mark.parametrize("failure", ["not_ready", "deleted", "no_execute"])
def test_a_failed_node_restarts_its_gangs_from_the_checkpoint_on_healthy_gpus(failure: str) -> None:
    policy = ScriptedPolicy()
    h = make_harness(policy, node_failure_grace_s=40)
    h.api.add_node(gpu_node("n1", 8))
    h.api.add_node(gpu_node("n2", 8))
    h.api.add_node(gpu_node("n3", 8))
    running_gang(h, n1=1, n2=1)
    del policy.want["ml/bert"]  # the real decision from here: keep what runs, start what waits
    op = h.operator()
    if failure == "not_ready":
        not_ready(h, "n2", since=h.clock.now())
        h.clock.advance(30)  # within the grace period: the gang stays, n2 takes no new gang
        assert not op.run_round().did("restart", "ml/bert")
        assert live_pods(h, "bert") == ["bert-g1-0", "bert-g1-1"]
        snapshot = policy.seen[-1][0]
        n2 = next(n for n in snapshot.nodes if n.name == "n2")
        # no new gang: decoded as not schedulable (its Ready condition), or its capacity is what its pod holds
        assert not n2.schedulable or n2.capacity_for_jobs == 2
        h.clock.advance(11)  # 41 s > 40 s
    elif failure == "deleted":
        h.api.remove_node("n2")
    else:
        h.api.nodes["n2"]["spec"] = {"taints": [{"key": "gpu-health", "effect": "NoExecute"}]}
    rep = op.run_round()
    assert rep.did("restart", "ml/bert")
    st = h.api.status_of("ml", "bert")
    run = cond(st, "Running")
    assert run["reason"] == "NodeFailed" and "node n2" in run["message"]
    assert st.get("failures", 0) == 0 and st.get("requeueCount", 0) == 0  # not the job's fault
    assert "NodeFailed" in reasons(h, "bert")
    # never partial: the replica on the healthy node is stopped too (with its grace period to checkpoint),
    # the one on the failed node is removed at once (no kubelet is left to confirm it)
    pods = {p["metadata"]["name"]: p for p in h.api.job_pods("ml", "bert")}
    assert "bert-g1-1" not in pods and "deletionTimestamp" in pods["bert-g1-0"]["metadata"]
    # n2 left the capacity (a tainted node stays listed with what its pods held when the round began)
    assert all(n.capacity_for_jobs <= 2 for n in policy.seen[-1][0].nodes if n.name == "n2")
    h.api.finish_deletions()

    policy.want["ml/bert"] = alloc("ml/bert", "A100", 2, n1=1, n3=1)
    rep = op.run_round()  # one round after: running again on healthy GPUs, from the checkpoint
    assert rep.did("start", "ml/bert")
    assert all(n.capacity_for_jobs == 0 for n in policy.seen[-1][0].nodes if n.name == "n2")
    st = h.api.status_of("ml", "bert")
    assert "n2" not in st["allocation"]["nodes"]
    assert (st["lostWork"], st["checkpointProgress"], st["restarts"]) == (100, 200, 1)
    starts = [
        p["metadata"]["annotations"]["perfsched.dev/start-progress"] for p in h.api.job_pods("ml", "bert")
    ]
    assert set(starts) == {"200"}


@pytest.mark.parametrize(
    ("tolerations", "restarts"),
    [
        ([{"key": "gpu-health", "operator": "Exists", "effect": "NoExecute"}], False),
        ([{"key": "gpu-health", "operator": "Equal", "value": "degraded", "effect": "NoExecute"}], False),
        ([{"operator": "Exists"}], False),  # tolerates every taint
        ([{"key": "gpu-health", "operator": "Equal", "value": "dead", "effect": "NoExecute"}], True),
        ([{"key": "gpu-health", "operator": "Exists", "effect": "NoSchedule"}], True),
        # tolerated for a while only: the taint manager evicts it afterwards, so it restarts now
        ([{"key": "gpu-health", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}], True),
        ([], True),
    ],
)
def test_a_noexecute_taint_the_template_tolerates_leaves_the_gang_running(
    tolerations: list[dict[str, Any]], restarts: bool
) -> None:
    policy = ScriptedPolicy()
    h = make_harness(policy, node_failure_grace_s=40)
    for n in ("n1", "n2", "n3"):
        h.api.add_node(gpu_node(n, 8))
    h.api.add_trainingjob(
        trainingjob("bert", replicas={"min": 2, "max": 2, "gpusPerReplica": 2}),
    )
    h.api.trainingjobs[("ml", "bert")]["spec"]["template"]["spec"]["tolerations"] = tolerations
    policy.want["ml/bert"] = alloc("ml/bert", "A100", 2, n1=1, n2=1)
    op = h.operator()
    op.run_round()
    h.settle_pods()
    op.run_round()
    del policy.want["ml/bert"]  # keep what runs
    h.api.nodes["n2"]["spec"] = {
        "taints": [{"key": "gpu-health", "value": "degraded", "effect": "NoExecute"}]
    }
    rep = op.run_round()
    assert rep.did("restart", "ml/bert") is restarts
    if not restarts:
        assert live_pods(h, "bert") == ["bert-g1-0", "bert-g1-1"]
        assert h.api.status_of("ml", "bert")["phase"] == "Running"
        # the tainted node keeps what runs there and takes no new gang
        n2 = next(n for n in policy.seen[-1][0].nodes if n.name == "n2")
        assert n2.capacity_for_jobs == 2


def test_a_node_that_recovers_within_the_grace_period_changes_nothing() -> None:
    policy = ScriptedPolicy()
    h = make_harness(policy, node_failure_grace_s=40)
    h.api.add_node(gpu_node("n1", 8))
    running_gang(h, n1=2)
    del policy.want["ml/bert"]
    not_ready(h, "n1", since=h.clock.now())
    h.clock.advance(39)
    op = h.operator()
    assert not op.run_round().did("restart", "ml/bert")
    ready(h, "n1")
    h.clock.advance(100)
    rep = op.run_round()
    assert not rep.did("restart", "ml/bert") and h.api.status_of("ml", "bert")["phase"] == "Running"
    assert next(n for n in policy.seen[-1][0].nodes if n.name == "n1").capacity_for_jobs == 8


def test_pods_stuck_terminating_on_a_failed_node_do_not_hold_the_job_back() -> None:
    policy = ScriptedPolicy()
    h = make_harness(policy, node_failure_grace_s=40)
    h.api.add_node(gpu_node("n1", 8))
    h.api.add_node(gpu_node("n2", 8))
    running_gang(h, n1=2)
    policy.want["ml/bert"] = None  # preempted: its pods get SIGTERM ...
    op = h.operator()
    assert op.run_round().did("preempt", "ml/bert")
    not_ready(h, "n1", since=h.clock.now())  # ... and their node dies: nobody confirms they are gone
    h.clock.advance(41)
    policy.want["ml/bert"] = alloc("ml/bert", "A100", 2, n2=2)
    rep = op.run_round()  # the orphans are removed at once, and the job starts again in the same round
    assert rep.did("start", "ml/bert")
    assert [p["metadata"]["name"] for p in h.api.job_pods("ml", "bert")] == ["bert-g2-0", "bert-g2-1"]


# --- failover without orphans ----------------------------------------------------------------------------


def die_after(h: Harness, verb: str, times: int = 1) -> None:
    """The operator process dies right after its ``times``-th successful ``verb`` call."""
    real = getattr(h.api, verb)
    done = {"n": 0}

    def wrapped(*args: object, **kwargs: object) -> object:
        out = real(*args, **kwargs)
        done["n"] += 1
        if done["n"] >= times:
            h.leader[0] = False
        return out

    setattr(h.api, verb, wrapped)
    h.revive = lambda: setattr(h.api, verb, real)  # type: ignore[attr-defined]


def owned(h: Harness, job: str) -> list[str]:
    """Live pods of ``job`` (not being deleted) that its status does not own."""
    st = h.api.status_of("ml", job)
    gen = str(st.get("gangGeneration", 0)) if st.get("allocation") else None
    return [
        p["metadata"]["name"]
        for p in h.api.job_pods("ml", job)
        if "deletionTimestamp" not in p["metadata"]
        and p["status"].get("phase") not in ("Succeeded", "Failed")
        and p["metadata"]["labels"]["perfsched.dev/generation"] != gen
    ]


CHANGES = {
    # a user scaled a 2-replica elastic gang to 1 (the case)
    "resize": (alloc("ml/bert", "A100", 2, n1=1), "Resized"),
    "preempt": (None, "Preempted"),
    "migrate": (alloc("ml/bert", "V100", 2, v1=2), "Resized"),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
@pytest.mark.parametrize(
    ("verb", "times"),
    [
        ("patch_trainingjob_status", 1),  # intent written, no Event, no pod touched
        ("create_event", 1),  # Event sent, no pod touched
        ("delete_pod", 1),  # one of two pods deleted
    ],
)
def test_an_operator_killed_at_any_step_of_a_change_leaves_no_orphan(
    change: str, verb: str, times: int
) -> None:
    policy = ScriptedPolicy()
    h = make_harness(policy)
    h.api.add_node(gpu_node("n1", 8))
    h.api.add_node(gpu_node("v1", 8, "V100"))
    h.api.add_trainingjob(trainingjob("bert", elastic=True))
    policy.want["ml/bert"] = alloc("ml/bert", "A100", 2, n1=2)
    op = h.operator()
    op.run_round()
    h.settle_pods()
    op.run_round()
    h.clock.advance(120)  # past the minimum resize interval
    want, reason = CHANGES[change]
    before = reasons(h, "bert").count(reason)
    policy.want["ml/bert"] = want
    die_after(h, verb, times)
    assert h.operator().run_round().skipped  # killed mid-change

    h.revive()  # type: ignore[attr-defined]
    h.leader[0] = True
    h.operator().run_round()  # the next leader's first round finishes it
    assert owned(h, "bert") == []
    assert reasons(h, "bert").count(reason) == before + 1  # one Event per decision, across the failover
    h.api.finish_deletions()
    h.operator().run_round()
    h.settle_pods()
    h.operator().run_round()
    assert owned(h, "bert") == [] and reasons(h, "bert").count(reason) == before + 1
    if want is not None:
        st = h.api.status_of("ml", "bert")
        assert (st["phase"], st["allocation"]["gpuType"]) == ("Running", want.gpu_type)


def test_a_teardown_whose_leader_died_after_the_status_write_is_announced_once() -> None:
    # a pod of the running gang is being deleted (by a person, an eviction): the gang is broken and torn
    # down; the leader dies right after writing that. The pod already being deleted does not mean that
    # the teardown's Event went out: the next leader sends it, and later rounds do not repeat it.
    policy = ScriptedPolicy()
    h = make_harness(policy)
    h.api.add_node(gpu_node("n1", 8))
    running_gang(h, n1=2)
    h.api.delete_pod("ml", "bert-g1-1", 30)
    die_after(h, "patch_trainingjob_status", 1)
    assert h.operator().run_round().skipped
    assert h.api.status_of("ml", "bert")["reason"] == "GangBroken"
    assert "GangBroken" not in reasons(h, "bert")
    h.revive()  # type: ignore[attr-defined]
    h.leader[0] = True
    op = h.operator()
    op.run_round()
    assert reasons(h, "bert").count("GangBroken") == 1 and owned(h, "bert") == []
    op.run_round()
    h.operator().run_round()  # another leader while pods still drain: the API has it under its name
    assert reasons(h, "bert").count("GangBroken") == 1


def test_a_decision_event_that_failed_to_be_recorded_is_sent_while_its_pods_drain() -> None:
    from scheduler.k8s.errors import ApiUnavailable

    policy = ScriptedPolicy()
    h = make_harness(policy)
    h.api.add_node(gpu_node("n1", 8))
    h.api.add_trainingjob(trainingjob("bert", elastic=True))
    policy.want["ml/bert"] = alloc("ml/bert", "A100", 2, n1=2)
    op = h.operator()
    op.run_round()
    h.settle_pods()
    op.run_round()
    policy.want["ml/bert"] = alloc("ml/bert", "A100", 2, n1=1)
    h.api.fail_next("create_event", ApiUnavailable("the API server timed out"))
    assert op.run_round().did("resize", "ml/bert")
    assert "Resized" not in reasons(h, "bert")  # lost; its pods are being deleted all the same
    op.run_round()
    op.run_round()
    assert reasons(h, "bert").count("Resized") == 1
    h.api.finish_deletions()
    op.run_round()
    h.settle_pods()
    op.run_round()
    assert reasons(h, "bert").count("Resized") == 1 and h.api.status_of("ml", "bert")["resizes"] == 1


# --- slow nodes -------------------------------------------------------------------------------------------


def _run_on_a_slow_node(h: Harness, policy: ScriptedPolicy) -> tuple[Operator, list[tuple[str, str]]]:
    """n1-n3 (8 A100 each) run a ResNet-50 and a BERT gang of 2 GPUs each; n3 makes 60 % of the predicted
    throughput for 12 minutes of reports: the operator flags it at the end of its last round."""
    jobs = []
    for n in ("n1", "n2", "n3"):
        h.api.add_node(gpu_node(n, 8))
        for model in ("resnet50", "bert"):
            name = f"{model}-{n}"
            h.api.add_trainingjob(
                trainingjob(name, model=model, replicas={"min": 1, "max": 1, "gpusPerReplica": 2})
            )
            policy.want[f"ml/{name}"] = alloc(f"ml/{name}", "A100", 2, **{n: 1})
            jobs.append((name, n))
    op = h.operator()
    op.run_round()
    h.settle_pods()
    for i in range(7):  # a report every 2 min for 12 min: 7 reports per job, spanning 720 s >= 600 s
        for name, n in jobs:
            # predicted 10/s per GPU x 2 = 20/s; n3 makes 60 % of it, the others 100 %
            rate = 12.0 if n == "n3" else 20.0
            h.api.report_progress(
                "ml", f"{name}-g1-0", progress=10 + i, checkpoint=0, throughput=rate, time=h.clock.now()
            )
        op.run_round()
        h.clock.advance(120)
    return op, jobs


@pytest.mark.parametrize("exclude", [False, True])
def test_a_node_where_every_model_runs_slow_is_flagged_once_with_its_ratio(exclude: bool) -> None:
    from scheduler import metrics

    policy = ScriptedPolicy()
    h = make_harness(policy, exclude_slow_nodes=exclude)
    op, _ = _run_on_a_slow_node(h, policy)
    slow = [e for e in h.api.events if (e.get("involvedObject") or {}).get("kind") == "Node"]
    assert [(e["involvedObject"]["name"], e["reason"]) for e in slow] == [("n3", "SlowNode")]
    assert "0.60x the throughput of the same models on peer A100 nodes (2 model(s)" in slow[0]["message"]
    assert metrics.NODE_SLOWDOWN_RATIO.labels(node="n3")._value.get() == pytest.approx(0.6)
    assert metrics.NODE_SLOWDOWN_RATIO.labels(node="n1")._value.get() == pytest.approx(1 / 0.8)
    # opt-in: a flagged node takes no new gang (its capacity is what its pods hold: 2 x 2 GPUs)
    op.run_round()
    n3 = next(n for n in policy.seen[-1][0].nodes if n.name == "n3")
    assert n3.capacity_for_jobs == (4 if exclude else 8)


@pytest.mark.parametrize(("restart_cost_s", "moves"), [(0.0, True), (30.0, False)])
def test_gangs_on_a_slow_node_move_off_it_when_the_predicted_gain_pays_the_restart(
    restart_cost_s: float, moves: bool
) -> None:
    from scheduler import metrics

    policy = ScriptedPolicy()
    h = make_harness(policy, move_off_slow_nodes=True, costs=RoundCosts(restart_cost_s=restart_cost_s))
    migrations = metrics.OPERATOR_MIGRATIONS.labels(from_type="A100", to_type="A100")._value.get()
    # n3 is flagged after the 6th round of reports (10 min of them); the next round moves its gangs
    op, _ = _run_on_a_slow_node(h, policy)
    on_n3 = ["resnet50-n3", "bert-n3"]
    # each n3 gang: 1000 iterations, 16 done at 12/s (60 % of 20/s): 82 s left; off n3 it saves
    # 82 x (1 - 0.6) = 32.8 s; the restart costs 16 / 12 = 1.3 s of lost work plus restart_cost_s, and
    # must be paid twice over: 2.7 s < 32.8 s moves, 2 x 31.3 s = 62.7 s > 32.8 s does not
    resized = {name: h.api.status_of("ml", name).get("resizes", 0) for name in ["resnet50-n1", *on_n3]}
    moved = [n for n in on_n3 if resized[n] == 1]
    assert moved == (on_n3 if moves else []) and resized["resnet50-n1"] == 0, resized
    after = metrics.OPERATOR_MIGRATIONS.labels(from_type="A100", to_type="A100")._value.get()
    assert after - migrations == len(moved)
    for name in moved:
        (event,) = [e for e in h.api.events_for(name) if e[1] == "Resized"]
        assert event[0] == "Normal" and "slow node n3 runs at 0.60x its peers" in event[2], event
    if not moves:
        return
    # the gangs checkpoint and exit; the policy restarts them, and n3 (flagged) takes no new gang
    h.api.finish_deletions()
    op.policy = make_policy("fifo")
    op.run_round()
    h.settle_pods()
    op.run_round()
    for name in on_n3:
        st = h.api.status_of("ml", name)
        assert st["phase"] == "Running" and "n3" not in st["allocation"]["nodes"], st
    # one move per job per window: the moved gangs are not moved again, whatever runs where
    assert not any(op.run_round().did("resize", f"ml/{n}") for n in on_n3)


def test_a_slow_node_is_flagged_with_the_learning_oracle_that_corrects_each_job() -> None:
    """The operator's learning oracle keeps a correction per job: each gang's own answer follows its own
    measurements, so compared with it a slow node's gangs would read as fast as their peers. The
    detection compares them with the answer without the job's own record (the same for every job of the
    model), so n3 (60 % of its peers' throughput) is flagged and n1, n2 are not."""
    from scheduler.oracles.learning import CorrectedOracle

    policy = ScriptedPolicy()
    h = make_harness(policy)
    h.oracle = CorrectedOracle.load()  # type: ignore[assignment]
    _run_on_a_slow_node(h, policy)
    slow = [e for e in h.api.events if (e.get("involvedObject") or {}).get("kind") == "Node"]
    assert [(e["involvedObject"]["name"], e["reason"]) for e in slow] == [("n3", "SlowNode")]
    assert "0.60x the throughput of the same models on peer A100 nodes (2 model(s)" in slow[0]["message"]
