"""API access for ``perfsched emulate --exec``: the nodes it serves, their TrainingJob pods, pod status.

``KubeExec`` lists the nodes labelled ``perfsched.dev/exec-node=true`` (the nodes whose pods
``perfsched_dev.emulator.exec`` runs as local processes, as a kubelet would) and the pods of TrainingJobs,
as API JSON; marks nodes Ready; writes a pod's status (Running, then Succeeded or Failed with the exit
code); and finishes a graceful deletion once the process is gone (delete with grace 0, as the kubelet
does). ``exec_node_manifest`` is the pure builder of such a node. Impure (HTTP to the API) apart from
that builder.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import orjson
from kubernetes import client as k8s

from perfsched_dev.k8s import bootstrap
from scheduler.core.types import Node
from scheduler.k8s.errors import AlreadyExists, Conflict, NotFound, api_call
from scheduler.names import LABEL_EXEC_NODE, LABEL_JOB_NAME

log = logging.getLogger(__name__)


def exec_node_manifest(node: Node, extra_labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The Node object of an exec node: the fake GPU node's labels and capacity, without KWOK's annotation.

    Pure. Its GPUs are bookkeeping only: the pods bound to it run on this machine's CPUs.
    """
    body = bootstrap.node_manifest(node, extra_labels)
    body["metadata"]["annotations"] = {}
    body["metadata"]["labels"].update({"type": "perfsched-exec", LABEL_EXEC_NODE: "true"})
    return body


class KubeExec:
    """The exec emulator's view of the API (one client)."""

    def __init__(self, api: k8s.ApiClient) -> None:
        self._core = k8s.CoreV1Api(api)

    def create_nodes(self, nodes: list[dict[str, Any]]) -> None:
        """Create exec nodes (existing ones of the same name are left alone)."""
        for body in nodes:
            try:
                with api_call(f"create node {body['metadata']['name']}"):
                    self._core.create_node(body)
            except AlreadyExists:
                pass

    def exec_nodes(self) -> list[str]:
        """Names of the nodes labelled ``perfsched.dev/exec-node=true``."""
        with api_call("list exec nodes"):
            resp = self._core.list_node(label_selector=f"{LABEL_EXEC_NODE}=true", _preload_content=False)
            items = orjson.loads(resp.data).get("items") or []
        return [str((obj.get("metadata") or {}).get("name", "")) for obj in items]

    def mark_node_ready(self, name: str, now_rfc3339: str) -> None:
        """Set the node's Ready condition (there is no kubelet heartbeat; nothing takes it away)."""
        cond = {
            "type": "Ready",
            "status": "True",
            "reason": "PerfschedExecReady",
            "message": "perfsched emulate --exec runs this node's pods as local processes",
            "lastHeartbeatTime": now_rfc3339,
            "lastTransitionTime": now_rfc3339,
        }
        with api_call(f"mark node {name} Ready"):
            self._core.patch_node_status(name, {"status": {"conditions": [cond]}})

    def job_pods(self, namespace: str = "") -> list[dict[str, Any]]:
        """Every pod labelled ``perfsched.dev/job-name`` (all namespaces when ``namespace`` is empty)."""
        with api_call("list TrainingJob pods"):
            if namespace:
                resp = self._core.list_namespaced_pod(
                    namespace, label_selector=LABEL_JOB_NAME, _preload_content=False
                )
            else:
                resp = self._core.list_pod_for_all_namespaces(
                    label_selector=LABEL_JOB_NAME, _preload_content=False
                )
            return list(orjson.loads(resp.data).get("items") or [])

    def set_pod_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """Merge-patch the pod's status (a pod that is gone is ignored)."""
        try:
            with api_call(f"write the status of pod {namespace}/{name}"):
                self._core.patch_namespaced_pod_status(name, namespace, {"status": dict(status)})
        except NotFound:
            return

    def finish_deletion(self, namespace: str, name: str, uid: str) -> None:
        """Delete the pod with grace 0 (its process is gone), only if it is still the same pod."""
        body = k8s.V1DeleteOptions(grace_period_seconds=0, preconditions=k8s.V1Preconditions(uid=uid))
        try:
            with api_call(f"delete pod {namespace}/{name}"):
                self._core.delete_namespaced_pod(name, namespace, body=body)
        except (NotFound, Conflict):
            return
