"""The mutating webhook's answers (pure): who is suspended, what is patched, what is left alone."""

from __future__ import annotations

import base64
import json
from typing import Any

from scheduler.k8s.webhook import mutate


def review(
    kind: str, labels: dict[str, str], spec: Any = None, namespace: str = "ml", op: str = "CREATE"
) -> Any:
    obj = {"metadata": {"name": "x", "labels": labels}, "spec": spec if spec is not None else {}}
    return {
        "request": {
            "uid": "u1",
            "operation": op,
            "namespace": namespace,
            "kind": {"kind": kind},
            "object": obj,
        }
    }


def patch_of(answer: Any) -> list[Any]:
    raw = answer["response"].get("patch")
    return json.loads(base64.b64decode(raw)) if raw else []


def no_queue(ns: str) -> str:
    return ""


POD = {"template": {"spec": {"containers": [{"name": "c"}]}}}
Q = {"perfsched.dev/queue": "team-a"}


def test_labelled_job_is_suspended_and_sent_to_perfsched() -> None:
    out = mutate(review("Job", Q, dict(POD)), no_queue)
    assert out["response"]["uid"] == "u1" and out["response"]["allowed"] is True
    assert out["response"]["patchType"] == "JSONPatch"
    assert patch_of(out) == [
        {"op": "add", "path": "/spec/suspend", "value": True},
        {"op": "add", "path": "/spec/template/spec/schedulerName", "value": "perfsched"},
    ]


def test_jobset_every_replicated_job_and_trainjob_suspend_only() -> None:
    rjs = [{"name": "a", "template": {"spec": POD}}, {"name": "b", "template": {"spec": POD}}]
    ops = patch_of(mutate(review("JobSet", Q, {"replicatedJobs": rjs}), no_queue))
    assert [o["path"] for o in ops] == [
        "/spec/suspend",
        "/spec/replicatedJobs/0/template/spec/template/spec/schedulerName",
        "/spec/replicatedJobs/1/template/spec/template/spec/schedulerName",
    ]
    ops = patch_of(mutate(review("TrainJob", Q, {"trainer": {}}), no_queue))
    assert ops == [{"op": "add", "path": "/spec/suspend", "value": True}]


def test_left_alone_kueue_unlabelled_updates() -> None:
    for r in (
        review("Job", {"kueue.x-k8s.io/queue-name": "lq"}, dict(POD)),
        review("Job", {}, dict(POD)),
        review("Job", Q, dict(POD), op="UPDATE"),
        {"nonsense": 1},
    ):
        assert "patch" not in mutate(r, no_queue)["response"]


def test_both_labels_still_suspended_namespace_selection_adopts() -> None:
    both = {**Q, "kueue.x-k8s.io/queue-name": "lq"}
    assert patch_of(mutate(review("Job", both, dict(POD)), no_queue))[0]["path"] == "/spec/suspend"
    selected = mutate(
        review("Job", {}, dict(POD), namespace="team-a-ns"), lambda ns: "team-a" if ns == "team-a-ns" else ""
    )
    assert patch_of(selected)[0] == {"op": "add", "path": "/spec/suspend", "value": True}


def test_unsupported_kind_gets_a_status_and_a_warning() -> None:
    out = mutate(review("PyTorchJob", Q, {}), no_queue)
    ops = patch_of(out)
    assert ops[0] == {"op": "add", "path": "/metadata/annotations", "value": {}}
    assert ops[1]["path"] == "/metadata/annotations/perfsched.dev~1status"
    status = json.loads(ops[1]["value"])
    assert status["phase"] == "Refused" and "does not schedule PyTorchJob" in status["message"]
    assert "batch/v1 Job" in out["response"]["warnings"][0]


def test_an_operator_scoped_to_a_namespace_suspends_nothing_elsewhere() -> None:
    assert "patch" not in mutate(review("Job", Q, dict(POD), namespace="other"), no_queue, "ml")["response"]
    assert "patch" in mutate(review("Job", Q, dict(POD), namespace="ml"), no_queue, "ml")["response"]
