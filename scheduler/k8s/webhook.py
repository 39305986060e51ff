"""The mutating admission webhook that suspends adopted workloads at creation.

Adapter module, pure: ``mutate(review, namespace_queue)`` answers one ``admission.k8s.io/v1``
``AdmissionReview`` request with its response. A batch/v1 Job, JobSet or TrainJob that is perfsched's
(label ``perfsched.dev/queue``, or created in a namespace a TrainingQueue selects, see
``scheduler.k8s.adopt``) is patched (JSONPatch) to ``spec.suspend: true`` and, where the kind's pod
templates are in the object, ``schedulerName: perfsched``; the operator admits it later. A job carrying
Kueue's ``kueue.x-k8s.io/queue-name`` and not perfsched's label is left alone; one with both is still
suspended (so it never runs outside either scheduler's accounting) and the operator refuses it with an
Event. A labelled object of a kind perfsched does not adopt is admitted unchanged except for a
``perfsched.dev/status`` annotation naming the problem, and the response carries a warning that
``kubectl`` prints. The webhook never denies a request: if it is down (``failurePolicy: Ignore``), the
operator suspends a labelled job it finds running before it was admitted.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from typing import Any

from scheduler.k8s.adopt import JOB, JOBSET, SCHEDULER_NAME, SUPPORTED, WORKLOAD_KINDS, status_patch
from scheduler.names import ANNOTATION_STATUS, KUEUE_QUEUE_LABEL, LABEL_QUEUE

Obj = dict[str, Any]


def _escape(key: str) -> str:
    """A JSON pointer token (RFC 6901)."""
    return key.replace("~", "~0").replace("/", "~1")


def _ops(kind: str, obj: Mapping[str, Any]) -> list[Obj]:
    """JSONPatch operations that suspend ``obj`` and send its pods to perfsched's scheduler profile."""
    ops: list[Obj] = [{"op": "add", "path": "/spec/suspend", "value": True}]
    spec = obj.get("spec") or {}
    if kind == JOB.kind and isinstance((spec.get("template") or {}).get("spec"), dict):
        ops.append({"op": "add", "path": "/spec/template/spec/schedulerName", "value": SCHEDULER_NAME})
    elif kind == JOBSET.kind:
        for i, rj in enumerate(spec.get("replicatedJobs") or []):
            pod = (((rj.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec")
            if isinstance(pod, dict):
                path = f"/spec/replicatedJobs/{i}/template/spec/template/spec/schedulerName"
                ops.append({"op": "add", "path": path, "value": SCHEDULER_NAME})
    # a TrainJob's pod templates are in its runtime: the runtime names the scheduler (docs/job-kinds.md)
    return ops


def mutate(review: Mapping[str, Any], namespace_queue: Callable[[str], str], only_namespace: str = "") -> Obj:
    """The ``AdmissionReview`` response to ``review`` (see the module docstring); never raises."""
    request = review.get("request") if isinstance(review, Mapping) else None
    if not isinstance(request, Mapping):
        return {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": "", "allowed": True},
        }
    response: Obj = {"uid": str(request.get("uid") or ""), "allowed": True}
    out: Obj = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
    obj = request.get("object")
    if request.get("operation") != "CREATE" or not isinstance(obj, Mapping):
        return out
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    namespace = str(request.get("namespace") or meta.get("namespace") or "")
    kind = str((request.get("kind") or {}).get("kind") or obj.get("kind") or "")
    labelled = LABEL_QUEUE in labels
    if only_namespace and namespace != only_namespace:
        return out  # an operator scoped to one namespace adopts nothing elsewhere
    if not labelled and (
        KUEUE_QUEUE_LABEL in labels or kind not in WORKLOAD_KINDS or not namespace_queue(namespace)
    ):
        return out
    if kind in WORKLOAD_KINDS:
        ops = _ops(kind, obj)
    else:
        problem = (
            f"perfsched does not schedule {kind or 'this kind'}: it adopts {SUPPORTED}; "
            f"remove label {LABEL_QUEUE}"
        )
        text = status_patch({"phase": "Refused", "message": problem})["metadata"]["annotations"][
            ANNOTATION_STATUS
        ]
        ops = [] if meta.get("annotations") else [{"op": "add", "path": "/metadata/annotations", "value": {}}]
        ops.append(
            {"op": "add", "path": f"/metadata/annotations/{_escape(ANNOTATION_STATUS)}", "value": text}
        )
        response["warnings"] = [problem]
    response["patchType"] = "JSONPatch"
    response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
    return out
