"""The operator's lifecycle table: one row per transition of ``scheduler.operator.transitions.transition``.

Each row builds a TrainingJob (stored status + pods, observed with ``observe_job`` as a round would), hands
the transition a step (``Observed``: what the gang alone decides; ``Planned``: the planner's action) at
``NOW``, and checks what it returns, written out: the status fields as they go on the wire, the gang to
create, the pods to delete, the Events and the action counted. Pure: no API, no clock.

The job (see ``tests.operator.conftest.trainingjob``): resnet50, 1000 iterations, 2 replicas x 2 GPUs,
checkpoint grace 20 s, created at T0; ``NOW`` = T0 + 600 s.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from scheduler.core.decisions import Action, ActionKind, Unschedulable
from scheduler.core.types import Allocation, Job
from scheduler.k8s import crd
from scheduler.k8s.codec import PodInfo
from scheduler.k8s.progress import ProgressReport
from scheduler.operator.observe import GangState, PodView, observe_job
from scheduler.operator.status import status_wire
from scheduler.operator.transitions import (
    Event,
    GangStart,
    Observed,
    Outcome,
    Planned,
    Step,
    decision_key,
    status_events,
    transition,
)
from tests.operator.conftest import T0, alloc, trainingjob

NOW = T0 + 600
KEY = "ml/bert"
A2 = alloc(KEY, "A100", 2, n1=2)  # the gang: 2 replicas x 2 A100 on n1
A1 = alloc(KEY, "A100", 2, n1=1)  # resized to 1 replica
ALLOC_WIRE = {
    "replicas": 2,
    "gpuType": "A100",
    "gpusPerReplica": 2,
    "nodes": ["n1"],
    "replicasPerNode": {"n1": 2},
}
GONE = object()  # marks a status field the transition removes


def rfc(t: float) -> str:
    return crd.rfc3339(t)


def cond(type_: str, status: str, reason: str, message: str = "", since: float = T0) -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": rfc(since),
    }


def running_status(**extra: Any) -> dict[str, Any]:
    """A gang of generation 1 that runs: 2 x 2 A100 on n1, started at T0 + 60, accounted at T0 + 500."""
    base: dict[str, Any] = {
        "phase": "Running",
        "reason": "Running",
        "message": "2/2 replicas running",
        "gangGeneration": 1,
        "allocation": ALLOC_WIRE,
        "progress": 400,
        "checkpointProgress": 300,
        "attainedService": 1000.0,
        "accountedTime": T0 + 500,
        "admittedTime": rfc(T0 + 60),
        "startTime": rfc(T0 + 60),
        "lastChangeTime": rfc(T0 + 60),
        "predictedThroughput": 40.0,
        "estimatedCompletion": rfc(T0 + 700),
        "conditions": [
            cond("Admitted", "True", "Started", "started", T0 + 60),
            cond("Running", "True", "AllReplicasRunning", "2/2 replicas running", T0 + 70),
        ],
    }
    base.update(extra)
    return base


def preempted_status() -> dict[str, Any]:
    """Generation 1 was preempted at T0 + 400 (pods gone): progress 400, checkpoint 300."""
    return {
        "phase": "Preempted",
        "reason": "Preempted",
        "message": "preempted: scripted",
        "gangGeneration": 1,
        "progress": 400,
        "checkpointProgress": 300,
        "preemptions": 1,
        "attainedService": 1000.0,
        "admittedTime": rfc(T0 + 60),
        "startTime": rfc(T0 + 60),
        "lastChangeTime": rfc(T0 + 400),
        "conditions": [
            cond("Admitted", "False", "Preempted", "preempted: scripted", T0 + 400),
            cond("Running", "False", "Preempted", "preempted: scripted", T0 + 400),
            cond("Preempted", "True", "Preempted", "preempted: scripted", T0 + 400),
        ],
    }


def pod(
    replica: int,
    gen: int = 1,
    *,
    phase: str = "Running",
    node: str = "n1",
    deleting: bool = False,
    report: ProgressReport | None = None,
    created: float = T0,
) -> PodView:
    info = PodInfo(
        uid=f"u{gen}-{replica}",
        namespace="ml",
        name=f"bert-g{gen}-{replica}",
        node_name=node,
        gpus=2,
        phase=phase,
        scheduler_name="perfsched",
        job=KEY,
        generation=str(gen),
        replica_index=replica,
        gpu_type="A100",
        planned_node="n1",
    )
    failure = "container worker exited with code 1" if phase == "Failed" else ""
    return PodView(
        info=info, deleting=deleting, report=report, start_progress=None, created=created, failure=failure
    )


def r0_report(progress: float, checkpoint: float, throughput: float) -> ProgressReport:
    return ProgressReport(progress=progress, checkpoint=checkpoint, throughput=throughput, time=NOW - 5)


@dataclass
class Row:
    name: str
    status: dict[str, Any]
    pods: tuple[PodView, ...]
    step: str  # "observed", or an action kind / "wait" for a planned step
    expect_state: GangState
    #: wire fields of the new status that must have these values (GONE: absent); None: nothing written
    status_fields: dict[str, Any] | None
    #: the new status's conditions as (type, status, reason)
    conditions: list[tuple[str, str, str]] = field(default_factory=list)
    events: list[tuple[str, str]] = field(default_factory=list)  # (type, reason)
    event_text: str = ""  # a part of the (one) Event's message
    create: GangStart | None = None
    delete: tuple[str, ...] = ()
    count: str | None = None
    action: Action | None = None
    why: Unschedulable | None = None
    spec: dict[str, Any] = field(default_factory=dict)
    backoff_limit: int = 3
    predicted: float | None = None


ROWS = [
    Row(
        "new job waits: Pending, Admitted False Waiting, one Normal Event",
        {},
        (),
        "wait",
        GangState.IDLE,
        {
            "phase": "Pending",
            "reason": "Waiting",
            "message": "2 jobs ahead",
            "gangGeneration": 0,
            "totalWork": 1000.0,
            "progressPercentText": "0.0%",
            "selector": "perfsched.dev/job-name=bert",
        },
        [("Admitted", "False", "Waiting")],
        [("Normal", "Waiting")],
        "2 jobs ahead",
        why=Unschedulable("2 jobs ahead"),
    ),
    Row(
        "waiting again for the same reason: the text changes, no second Event",
        {
            "phase": "Pending",
            "reason": "Waiting",
            "message": "2 jobs ahead",
            "conditions": [cond("Admitted", "False", "Waiting", "2 jobs ahead")],
        },
        (),
        "wait",
        GangState.IDLE,
        {"phase": "Pending", "message": "1 job ahead"},
        [("Admitted", "False", "Waiting")],
        why=Unschedulable("1 job ahead"),
    ),
    Row(
        "never fits: Unschedulable is a Warning",
        {},
        (),
        "wait",
        GangState.IDLE,
        {"phase": "Pending", "reason": "Unschedulable", "message": "asks 16 GPUs, cluster has 8"},
        [("Admitted", "False", "Unschedulable")],
        [("Warning", "Unschedulable")],
        why=Unschedulable("asks 16 GPUs, cluster has 8", resolvable=False),
    ),
    Row(
        "a spec the API admitted that no round can use (unknown model): InvalidSpec, a Warning",
        {},
        (),
        "observed",
        GangState.IDLE,
        {
            "phase": "Pending",
            "reason": "InvalidSpec",
            "selector": "perfsched.dev/job-name=bert",
            "progress": GONE,
            "totalWork": GONE,
        },
        [("Admitted", "False", "InvalidSpec")],
        [("Warning", "InvalidSpec")],
        "unknown model 'no-such-net'",
        spec={"model": "no-such-net"},
    ),
    Row(
        "first START: intent with generation 1, the gang, Started; queue wait 600 s",
        {"phase": "Pending", "conditions": [cond("Admitted", "False", "Waiting", "queued")]},
        (),
        "start",
        GangState.IDLE,
        # ETA: 1000 iterations at 40/s = 25 s
        {
            "phase": "Admitted",
            "reason": "Started",
            "gangGeneration": 1,
            "allocation": ALLOC_WIRE,
            "restarts": 0,
            "lostWork": 0.0,
            "admittedTime": rfc(NOW),
            "startTime": rfc(NOW),
            "accountedTime": NOW,
            "predictedThroughput": 40.0,
            "estimatedCompletion": rfc(NOW + 25),
        },
        [("Admitted", "True", "Started"), ("Running", "False", "PodsStarting")],
        [("Normal", "Started")],
        "started 2 x 2 A100 GPU(s) on n1 x2, predicted 40 iterations/s: scripted",
        create=GangStart(A2, 1, 0.0),
        count="start",
        action=Action(ActionKind.START, KEY, None, A2, "scripted"),
        predicted=40.0,
    ),
    Row(
        "START after a preemption: generation 2 from checkpoint 300, 100 iterations lost, Restarted",
        preempted_status(),
        (),
        "start",
        GangState.IDLE,
        # lost: progress 400 - checkpoint 300; admitted/start time kept; ETA (1000 - 300) / 40 = 17.5 s
        {
            "phase": "Admitted",
            "reason": "Restarted",
            "gangGeneration": 2,
            "restarts": 1,
            "lostWork": 100.0,
            "progress": 300.0,
            "checkpointProgress": 300.0,
            "progressPercentText": "30.0%",
            "admittedTime": rfc(T0 + 60),
            "estimatedCompletion": rfc(NOW + 17.5),
            "preemptions": 1,
        },
        [
            ("Admitted", "True", "Restarted"),
            ("Running", "False", "PodsStarting"),
            ("Preempted", "False", "Restarted"),
        ],
        [("Normal", "Restarted")],
        "restarted 2 x 2 A100 GPU(s) on n1 x2 from checkpoint 300 iterations",
        create=GangStart(A2, 2, 300.0),
        count="start",
        action=Action(ActionKind.START, KEY, None, A2, ""),
        predicted=40.0,
    ),
    Row(
        "KEEP while the pods start: Admitted, no Event",
        running_status(phase="Admitted", reason="Started"),
        # created 10 s ago: well within the start timeout (300 s)
        (pod(0, phase="Pending", created=NOW - 10), pod(1, phase="Pending", created=NOW - 10)),
        "keep",
        GangState.STARTING,
        {"phase": "Admitted", "reason": "Started", "accountedTime": NOW, "allocation": ALLOC_WIRE},
        [("Admitted", "True", "Started"), ("Running", "False", "PodsStarting")],
        action=Action(ActionKind.KEEP, KEY, A2, A2, ""),
    ),
    Row(
        "KEEP when every replica runs: Running, one Event with the observed rate",
        running_status(
            phase="Admitted", reason="Started", conditions=[cond("Running", "False", "PodsStarting", "0/2")]
        ),
        (pod(0, report=r0_report(450, 300, 38.0)), pod(1)),
        "keep",
        GangState.RUNNING,
        # ETA: (1000 - 450) / 38 = 14.47 s -> NOW + 14 (whole seconds)
        {
            "phase": "Running",
            "reason": "Running",
            "observedThroughput": 38.0,
            "progress": 450.0,
            "estimatedCompletion": rfc(NOW + 550 / 38),
        },
        [("Running", "True", "AllReplicasRunning")],
        [("Normal", "Running")],
        "2/2 replicas running on 2 x 2 A100 GPU(s) on n1 x2, 38 iterations/s",
        action=Action(ActionKind.KEEP, KEY, A2, A2, ""),
    ),
    Row(
        "PREEMPT: intent without a gang, pods deleted with the grace period, Warning Preempted",
        running_status(),
        (pod(0, report=r0_report(400, 300, 40.0)), pod(1)),
        "preempt",
        GangState.RUNNING,
        {
            "phase": "Preempted",
            "reason": "Preempted",
            "preemptions": 1,
            "allocation": GONE,
            "accountedTime": GONE,
            "estimatedCompletion": GONE,
            "predictedThroughput": GONE,
            "lastChangeTime": rfc(NOW),
        },
        [
            ("Admitted", "False", "Preempted"),
            ("Running", "False", "Preempted"),
            ("Preempted", "True", "Preempted"),
        ],
        [("Warning", "Preempted")],
        "workers get 20 s to checkpoint (progress since the last checkpoint, up to 100 iterations, "
        "may be lost)",
        delete=("bert-g1-0", "bert-g1-1"),
        count="preempt",
        action=Action(ActionKind.PREEMPT, KEY, A2, None, "a higher priority job"),
    ),
    Row(
        "RESIZE 2 -> 1 replicas: Resizing, Normal Resized, the gang goes",
        running_status(),
        (pod(0), pod(1)),
        "resize",
        GangState.RUNNING,
        {"phase": "Resizing", "reason": "Resized", "resizes": 1, "allocation": GONE},
        [("Admitted", "True", "Started"), ("Running", "False", "Resized"), ("Resized", "True", "Resized")],
        [("Normal", "Resized")],
        "resizing 2 -> 1 replicas: scripted",
        delete=("bert-g1-0", "bert-g1-1"),
        count="resize",
        action=Action(ActionKind.RESIZE, KEY, A2, A1, "scripted"),
    ),
    Row(
        "replica 0 reports all work: Succeeded in 600 s, the Service goes, the pods exit on their own",
        running_status(),
        (pod(0, report=r0_report(1000, 1000, 40.0)), pod(1)),
        "observed",
        GangState.COMPLETED,
        # attained: 1000 + (NOW - accounted 500 s later = 100 s) x 2 running replicas x 2 GPUs = 1400
        {
            "phase": "Succeeded",
            "reason": "Completed",
            "message": "all 1000 iterations done",
            "progress": 1000.0,
            "progressPercentText": "100.0%",
            "completionTime": rfc(NOW),
            "attainedService": 1400.0,
            "allocation": GONE,
            "accountedTime": GONE,
        },
        [
            ("Admitted", "True", "Started"),
            ("Running", "False", "Completed"),
            ("Succeeded", "True", "Completed"),
        ],
        [("Normal", "Succeeded")],
        "all 1000 iterations done in 600 s",
        count="complete",
    ),
    Row(
        "a worker crashed (failure 1 of limit 3): torn down, restarts from the checkpoint",
        running_status(),
        (pod(0, phase="Failed"), pod(1)),
        "observed",
        GangState.CRASHED,
        {
            "phase": "Pending",
            "reason": "WorkerFailed",
            "failures": 1,
            "allocation": GONE,
            "observedThroughput": GONE,
            "lastChangeTime": rfc(NOW),
        },
        [("Admitted", "False", "WorkerFailed"), ("Running", "False", "WorkerFailed")],
        [("Warning", "WorkerFailed")],
        "pod bert-g1-0 failed: container worker exited with code 1; restarting from the last checkpoint "
        "(failure 1, backoff limit 3)",
        delete=("bert-g1-1",),
        count="restart",
    ),
    Row(
        "a worker crashed past the backoff limit: Failed, pods and Service go",
        running_status(failures=1),
        (pod(0, phase="Failed"), pod(1)),
        "observed",
        GangState.CRASHED,
        {
            "phase": "Failed",
            "reason": "BackoffLimitExceeded",
            "failures": 2,
            "completionTime": rfc(NOW),
            "allocation": GONE,
        },
        [
            ("Admitted", "True", "Started"),
            ("Running", "False", "WorkerFailed"),
            ("Failed", "True", "BackoffLimitExceeded"),
        ],
        [("Warning", "Failed")],
        "backoff limit 1 exceeded after 2 worker failures",
        delete=("bert-g1-1",),
        count="fail",
        backoff_limit=1,
    ),
    Row(
        "the node of a replica is gone: NodeFailed, torn down",
        running_status(),
        (pod(0), pod(1, node="n9")),
        "observed",
        GangState.BROKEN,
        {"phase": "Pending", "reason": "NodeFailed", "allocation": GONE},
        [("Admitted", "False", "NodeFailed"), ("Running", "False", "NodeFailed")],
        [("Warning", "NodeFailed")],
        "node n9 of the gang is gone; restarting from the last checkpoint",
        delete=("bert-g1-0", "bert-g1-1"),
        count="restart",
    ),
    Row(
        # the decision's Event again, under its key: the API records it once, the operator sends it once
        # per process (a leader that took over mid-change cannot tell from the pods whether it went out)
        "the preempted gang drains: phase stays Preempted, Running says why, its decision's Event again",
        preempted_status(),
        (pod(0, deleting=True), pod(1, deleting=True)),
        "observed",
        GangState.DRAINING,
        {"phase": "Preempted", "reason": "Preempted"},
        [
            ("Admitted", "False", "Preempted"),
            ("Running", "False", "Draining"),
            ("Preempted", "True", "Preempted"),
        ],
        [("Warning", "Preempted")],
    ),
    Row(
        "a gang half-created by a leader that died: the rest is created; its Event went out before the pods",
        running_status(phase="Admitted", reason="Started", message="started 2 x 2 A100"),
        (pod(0, phase="Pending"),),
        "observed",
        GangState.MISSING,
        None,
        create=GangStart(A2, 1, 300.0),
    ),
    Row(
        "a START whose leader died right after the status write: the gang and its Restarted Event",
        running_status(
            phase="Admitted", reason="Restarted", message="restarted 2 x 2 A100", gangGeneration=2
        ),
        (),
        "observed",
        GangState.MISSING,
        None,
        events=[("Normal", "Restarted")],
        event_text="restarted 2 x 2 A100",
        create=GangStart(A2, 2, 300.0),
    ),
    Row(
        "a PREEMPT whose leader died right after the status write: pods deleted now, Preempted sent now",
        preempted_status(),
        (pod(0), pod(1)),
        "observed",
        GangState.DRAINING,
        {"phase": "Preempted"},
        [
            ("Admitted", "False", "Preempted"),
            ("Running", "False", "Draining"),
            ("Preempted", "True", "Preempted"),
        ],
        [("Warning", "Preempted")],
        "preempted: scripted",
        delete=("bert-g1-0", "bert-g1-1"),
    ),
    Row(
        "a Failed job whose leader died before deleting its pods: deleted now, Failed sent now",
        running_status(
            phase="Failed",
            reason="BackoffLimitExceeded",
            message="backoff limit",
            allocation=None,
            completionTime=rfc(NOW - 10),
        ),
        (pod(1),),
        "observed",
        GangState.TERMINAL,
        None,
        events=[("Warning", "Failed")],
        event_text="backoff limit",
        delete=("bert-g1-1",),
    ),
]


def _outcome(row: Row) -> tuple[Outcome | None, crd.TrainingJobStatus]:
    obj = trainingjob("bert", **row.spec)
    obj["metadata"]["creationTimestamp"] = rfc(T0)
    status = {k: v for k, v in row.status.items() if v is not None}
    obj["status"] = status
    spec = crd.parse_spec(obj)
    total = spec.work.total if isinstance(spec, crd.TrainingJobSpec) else None
    view = observe_job(
        obj, row.pods, now=NOW, total_work=total, node_types={"n1": "A100", "n2": "A100"}, start_timeout_s=300
    )
    assert view.state is row.expect_state, view.detail
    job = crd.trainingjob_to_job(
        obj, now=NOW, known_model=lambda m: m == "resnet50", cluster_gpu_types={"A100"}
    )
    step: Step
    if row.step == "observed":
        step = Observed(job, backoff_limit=row.backoff_limit)
    else:
        assert isinstance(job, Job)
        step = Planned(job, row.action, row.why, row.predicted)
    return transition(spec, view, step, NOW), view.status


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_transition(row: Row) -> None:
    out, _ = _outcome(row)
    assert out is not None
    if row.status_fields is None:
        assert out.status is None
    else:
        assert out.status is not None
        wire = status_wire(out.status)
        for key, want in row.status_fields.items():
            if want is GONE:
                assert key not in wire, key
            else:
                assert wire.get(key) == want, (key, wire.get(key), want)
        assert [(c["type"], c["status"], c["reason"]) for c in wire.get("conditions", [])] == row.conditions
    assert [(e.type, e.reason) for e in out.events] == row.events
    if row.event_text:
        assert row.event_text in out.events[0].message
    assert out.create == row.create
    assert out.delete == row.delete
    assert out.count == row.count


def test_the_counters_and_metrics_of_a_start_and_a_completion() -> None:
    start = next(r for r in ROWS if r.name.startswith("first START"))
    out, _ = _outcome(start)
    assert out is not None and out.queue_wait_s == 600.0  # created at T0, started at T0 + 600
    restart = next(r for r in ROWS if r.name.startswith("START after a preemption"))
    out, _ = _outcome(restart)
    assert out is not None and (out.lost_work, out.work_unit, out.queue_wait_s) == (100.0, "iterations", None)
    done = next(r for r in ROWS if r.name.startswith("replica 0 reports all work"))
    out, _ = _outcome(done)
    assert out is not None and (out.jct_s, out.deadline_met, out.delete_service) == (600.0, None, True)


def test_a_transition_keeps_lastTransitionTime_unless_the_condition_flips() -> None:
    row = next(r for r in ROWS if r.name.startswith("PREEMPT"))
    out, _ = _outcome(row)
    assert out is not None and out.status is not None
    when = {c.type: c.last_transition_time for c in out.status.conditions}
    # Admitted flipped True -> False and Running True -> False now; Preempted is new
    assert when == {"Admitted": rfc(NOW), "Running": rfc(NOW), "Preempted": rfc(NOW)}
    row = next(r for r in ROWS if r.name.startswith("the preempted gang drains"))
    out, _ = _outcome(row)
    assert out is not None and out.status is not None
    # Running stays False (reason Preempted -> Draining): its transition time stays T0 + 400
    assert {c.type: c.last_transition_time for c in out.status.conditions}["Running"] == rfc(T0 + 400)


def test_status_events_follow_the_status_change_alone() -> None:
    """The Event is a function of the stored and the new status; an unchanged status announces nothing."""
    old = crd.TrainingJobStatus.model_validate(running_status())
    assert status_events(old, old, created=T0) == ()
    restarted = old.model_copy(update={"gang_generation": 2, "reason": "Restarted", "message": "again"})
    key = decision_key(restarted, "Restarted")  # names the decision: the same for every leader
    assert key == "Restarted.g2.r0.p0.f0.q0.Running"
    assert status_events(old, restarted, created=T0) == (Event("Normal", "Restarted", "again", key),)
    done = old.model_copy(
        update={"phase": "Succeeded", "message": "all done", "completion_time": rfc(T0 + 90.4)}
    )
    (succeeded,) = status_events(old, done, created=T0)
    assert (succeeded.type, succeeded.reason, succeeded.message) == (
        "Normal",
        "Succeeded",
        "all done in 90 s",
    )


def test_allocation_status_round_trips() -> None:
    a: Allocation = alloc(KEY, "V100", 1, n1=2, n2=1)
    row = Row("", {}, (), "start", GangState.IDLE, None, action=Action(ActionKind.START, KEY, None, a, ""))
    out, _ = _outcome(row)
    assert out is not None and out.status is not None
    alloc_wire = status_wire(out.status)["allocation"]
    assert alloc_wire == {
        "replicas": 3, "gpuType": "V100", "gpusPerReplica": 1, "nodes": ["n1", "n2"],
        "replicasPerNode": {"n1": 2, "n2": 1},
    }  # fmt: skip


def test_a_move_to_another_gpu_type_is_counted_as_a_migration_a_resize_in_place_is_not() -> None:
    resize = next(r for r in ROWS if r.name.startswith("RESIZE 2 -> 1 replicas"))
    out, _ = _outcome(resize)
    assert out is not None and out.count == "resize" and out.migration is None
    # the same 2-replica gang moved from A100 to V100: a RESIZE the planner marks as a migration
    moved = alloc(KEY, "V100", 2, n1=2)
    row = replace(resize, action=Action(ActionKind.RESIZE, KEY, A2, moved, "faster type"))
    out, _ = _outcome(row)
    assert out is not None and out.count == "resize" and out.migration == ("A100", "V100")
    assert out.events and "moving from" in out.events[0].message


@pytest.mark.parametrize(
    ("status", "pods", "observed"),
    [
        # replica 0 reports 2.0/s: the policy prices the gang's moves by that
        (running_status(), (pod(0, report=r0_report(500, 450, 2.0)), pod(1)), 2.0),
        # a worker whose clock runs fast (the emulator's time scale) reports 0.1/s per its own second, but
        # the gang went from 300 (its start) to 500 in the 540 s since it started at T0 + 60: 0.37/s
        (running_status(), (pod(0, report=r0_report(500, 450, 0.1)), pod(1)), 200 / 540),
        # no report yet since it started: not measured (a policy will not move it)
        (running_status(), (pod(0), pod(1)), None),
        # preempted: what it made on its last gang says nothing about the next one
        (preempted_status(), (), None),
    ],
)
def test_the_round_sees_the_throughput_measured_where_the_gang_runs(
    status: dict[str, Any], pods: tuple[PodView, ...], observed: float | None
) -> None:
    from scheduler.operator.transitions import job_for_round

    obj = trainingjob("bert")
    obj["metadata"]["creationTimestamp"] = rfc(T0)
    obj["status"] = status
    view = observe_job(obj, pods, now=NOW, total_work=1000.0, node_types={"n1": "A100"}, start_timeout_s=300)
    job = crd.trainingjob_to_job(
        obj, now=NOW, known_model=lambda m: m == "resnet50", cluster_gpu_types={"A100"}
    )
    assert isinstance(job, Job)
    got = job_for_round(view, job, NOW).observed_throughput
    assert got == pytest.approx(observed) if observed is not None else got is None
