"""Gangs under the upstream Workload API: the Workload and PodGroup manifests of a gang generation (pure).

Kubernetes 1.37 serves ``scheduling.k8s.io/v1beta1`` Workload and PodGroup objects (feature gate
``GenericWorkload``; kube-scheduler's ``GangScheduling`` plugin). A pod that names a PodGroup in
``spec.schedulingGroup.podGroupName`` waits at PreEnqueue until ``minCount`` pods of the group exist,
then the group is scheduled in one cycle and binds all or none. With the operator's setting
``PERFSCHED_OPERATOR_WORKLOAD_API`` on, every gang generation gets one Workload and one PodGroup, both
named ``<job>-g<generation>`` (the prefix of the generation's pod names), with a gang policy whose
``minCount`` is the gang's replica count, and each pod of the generation points to that PodGroup. Both
objects are owned by the TrainingJob, so the garbage collector removes them with it; the operator
deletes the previous generation's pair when it starts a new one (a restart, a resize, a migration).

The gang's placement is still the operator's: every pod carries its ``perfsched.dev/planned-node``, and
the extender's filter keeps each pod to its planned node (``scheduler/extender/gang.py``), so the whole
gang lands in the NVLink domain the policy chose even though kube-scheduler only *assumes* the earlier
gang-mates while it filters the later ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduler.names import GANG_API_GROUP, GANG_API_VERSION, GROUP, TRAININGJOB_KIND

Obj = dict[str, Any]

#: the one PodGroupTemplate of a gang's Workload
POD_GROUP_TEMPLATE = "workers"
WORKLOADS = "workloads"
POD_GROUPS = "podgroups"
_API_VERSION = f"{GANG_API_GROUP}/{GANG_API_VERSION}"


def group_name(job_name: str, generation: int) -> str:
    """The name of the Workload and PodGroup of a gang generation (the prefix of its pod names)."""
    return f"{job_name}-g{generation}"


def _gang_policy(min_count: int) -> Obj:
    if min_count < 1:
        raise ValueError(f"a gang needs at least 1 pod, got minCount={min_count}")
    return {"gang": {"minCount": int(min_count)}}


def _meta(tj: Mapping[str, Any], name: str, owner: Mapping[str, Any]) -> Obj:
    meta = tj["metadata"]
    return {
        "name": name,
        "namespace": meta.get("namespace", "default"),
        "labels": {"perfsched.dev/job-name": meta["name"]},
        "ownerReferences": [dict(owner)],
    }


def workload_body(tj: Mapping[str, Any], generation: int, min_count: int, owner: Mapping[str, Any]) -> Obj:
    """The Workload of generation ``generation``: one gang PodGroupTemplate of ``min_count`` pods."""
    name = group_name(tj["metadata"]["name"], generation)
    return {
        "apiVersion": _API_VERSION,
        "kind": "Workload",
        "metadata": _meta(tj, name, owner),
        "spec": {
            # the link back to the TrainingJob that tools (kubectl describe) follow; immutable
            "controllerRef": {"apiGroup": GROUP, "kind": TRAININGJOB_KIND, "name": tj["metadata"]["name"]},
            "podGroupTemplates": [{"name": POD_GROUP_TEMPLATE, "schedulingPolicy": _gang_policy(min_count)}],
        },
    }


def pod_group_body(tj: Mapping[str, Any], generation: int, min_count: int, owner: Mapping[str, Any]) -> Obj:
    """The PodGroup of generation ``generation``, made from its Workload's template."""
    name = group_name(tj["metadata"]["name"], generation)
    return {
        "apiVersion": _API_VERSION,
        "kind": "PodGroup",
        "metadata": _meta(tj, name, owner),
        "spec": {
            "workloadRef": {"workloadName": name, "templateName": POD_GROUP_TEMPLATE},
            "schedulingPolicy": _gang_policy(min_count),
        },
    }


def join_group(pod: Obj, pod_group: str) -> Obj:
    """``pod`` with ``spec.schedulingGroup.podGroupName`` set to ``pod_group`` (in place; returned)."""
    pod.setdefault("spec", {})["schedulingGroup"] = {"podGroupName": pod_group}
    return pod
