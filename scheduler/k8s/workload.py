"""API access for the workload emulator and the worker progress helper: job pods, TrainingJobs, nodes.

``KubeWorkload`` lists the pods of TrainingJobs (label ``perfsched.dev/job-name``) with their progress
annotations, and the worker pods of adopted Jobs, JobSets and TrainJobs (those perfsched admitted, which
carry ``perfsched.dev/admission``: ``adopted_worker``), reads TrainingJob objects and node labels, and
patches pod annotations. It converts the API's JSON once, with ``scheduler.k8s.codec``; callers get
plain values. Every failure of the client arrives as a ``scheduler.k8s.errors`` error (``ApiUnavailable``
while the server cannot be reached). Impure (HTTP to the API).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import orjson
from kubernetes import client as k8s

from scheduler.k8s.codec import PodInfo, decode_pod
from scheduler.k8s.errors import NotFound, api_call
from scheduler.k8s.progress import ProgressReport, parse_progress, parse_start_progress
from scheduler.names import (
    ANNOTATION_ADMISSION,
    ANNOTATION_PROGRESS,
    ANNOTATION_START_PROGRESS,
    GROUP,
    LABEL_JOB_NAME,
    TRAININGJOB_PLURAL,
    VERSION,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class WorkerPod:
    """A TrainingJob pod as the emulator sees it."""

    info: PodInfo
    deleting: bool
    report: ProgressReport | None
    start_progress: float | None
    annotations: Mapping[str, str]
    #: the grace period of a pod being deleted (``metadata.deletionGracePeriodSeconds``; None: not given)
    deletion_grace_s: float | None = None
    labels: Mapping[str, str] = field(default_factory=dict)


#: The label the batch Job controller puts on its pods (the pods of a JobSet's child Jobs carry it too).
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
#: The label the JobSet controller puts on its pods (a TrainJob's JobSet is named after the TrainJob).
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
_INDEX_LABELS = ("batch.kubernetes.io/job-completion-index", "jobset.sigs.k8s.io/job-index")


def adopted_worker(pod: WorkerPod) -> WorkerPod | None:
    """A pod of an adopted Job, JobSet or TrainJob that perfsched admitted (it carries
    ``perfsched.dev/admission``) as a worker of a gang: its job ``<namespace>/jobset:<name>`` or
    ``<namespace>/job:<name>`` (never a TrainingJob's ``namespace/name``: ``:`` is not in a name), its
    generation the admission; None for any other pod (pure)."""
    labels = pod.labels
    admission = pod.annotations.get(ANNOTATION_ADMISSION)
    if not admission or pod.info.job:
        return None
    if labels.get(JOBSET_NAME_LABEL):
        owner = f"jobset:{labels[JOBSET_NAME_LABEL]}"
    elif labels.get(JOB_NAME_LABEL):
        owner = f"job:{labels[JOB_NAME_LABEL]}"
    else:
        return None
    index = next((labels[k] for k in _INDEX_LABELS if labels.get(k, "").isdigit()), None)
    info = replace(
        pod.info,
        job=f"{pod.info.namespace}/{owner}",
        generation=admission,
        replica_index=int(index) if index is not None else None,
    )
    return replace(pod, info=info)


class KubeWorkload:
    """The emulator's and worker helper's view of the API (one client, node products cached).

    Every failure of the client is raised as a ``scheduler.k8s.errors`` error (``ApiUnavailable`` while
    the API server is unreachable, see ``scheduler.k8s.errors``). Each connection attempt gives up after
    3 s and each reply after ``request_timeout_s``, so a hung or unreachable server never blocks the
    caller (a training loop, for ``scheduler.worker``) for long.
    """

    def __init__(self, api: k8s.ApiClient, request_timeout_s: float = 10.0) -> None:
        self._api = api
        self._core = k8s.CoreV1Api(api)
        self._custom = k8s.CustomObjectsApi(api)
        self._labels: dict[str, dict[str, str]] = {}
        # (connect, read): urllib3 retries a failed connect a few times, so keep each attempt short
        self._timeout = (min(3.0, request_timeout_s), request_timeout_s)

    def list_job_pods(self, namespace: str = "") -> list[WorkerPod]:
        """Every pod carrying ``perfsched.dev/job-name`` (all namespaces when ``namespace`` is empty)."""
        return self._list_pods(namespace, LABEL_JOB_NAME)

    def list_adopted_pods(self, namespace: str = "") -> list[WorkerPod]:
        """The worker pods of the Jobs, JobSets and TrainJobs perfsched admitted (``adopted_worker``),
        each named by its job as ``adopted_worker`` says (all namespaces when ``namespace`` is empty)."""
        out = []
        for pod in self._list_pods(namespace, JOB_NAME_LABEL):
            adopted = adopted_worker(pod)
            if adopted is not None:
                out.append(adopted)
        return out

    def _list_pods(self, namespace: str, selector: str) -> list[WorkerPod]:
        kw: dict[str, Any] = {
            "label_selector": selector,
            "_preload_content": False,
            "_request_timeout": self._timeout,
        }
        with api_call("listing TrainingJob pods"):
            if namespace:
                resp = self._core.list_namespaced_pod(namespace, **kw)
            else:
                resp = self._core.list_pod_for_all_namespaces(**kw)
            items = orjson.loads(resp.data).get("items") or []
        out: list[WorkerPod] = []
        for obj in items:
            meta = obj.get("metadata") or {}
            ann = meta.get("annotations") or {}
            out.append(
                WorkerPod(
                    info=decode_pod(obj),
                    deleting=meta.get("deletionTimestamp") is not None,
                    report=parse_progress(ann.get(ANNOTATION_PROGRESS)),
                    start_progress=parse_start_progress(ann.get(ANNOTATION_START_PROGRESS)),
                    annotations={str(k): str(v) for k, v in ann.items()},
                    deletion_grace_s=_seconds(meta.get("deletionGracePeriodSeconds")),
                    labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
                )
            )
        return out

    def training_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The TrainingJob object as JSON, or None when it does not exist."""
        try:
            with api_call(f"reading TrainingJob {namespace}/{name}"):
                resp = self._custom.get_namespaced_custom_object(
                    GROUP,
                    VERSION,
                    namespace,
                    TRAININGJOB_PLURAL,
                    name,
                    _preload_content=False,
                    _request_timeout=self._timeout,
                )
                obj = orjson.loads(resp.data)
        except NotFound:
            return None
        return dict(obj) if isinstance(obj, dict) else None

    def node_labels(self, name: str) -> dict[str, str]:
        """The node's labels ({} when it does not exist); cached, as GPU nodes do not change hardware."""
        if name not in self._labels:
            try:
                with api_call(f"reading node {name}"):
                    resp = self._core.read_node(name, _preload_content=False, _request_timeout=self._timeout)
                    node = orjson.loads(resp.data)
            except NotFound:
                return {}
            labels = (node.get("metadata") or {}).get("labels") or {}
            self._labels[name] = {str(k): str(v) for k, v in labels.items()}
        return self._labels[name]

    def pod_annotations(self, namespace: str, name: str) -> dict[str, str]:
        """The annotations of one pod."""
        with api_call(f"reading pod {namespace}/{name}"):
            resp = self._core.read_namespaced_pod(
                name, namespace, _preload_content=False, _request_timeout=self._timeout
            )
            pod = orjson.loads(resp.data)
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        return {str(k): str(v) for k, v in annotations.items()}

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None:
        """Merge-patch the pod's annotations (a None value removes the key); a pod already gone is skipped."""
        try:
            with api_call(f"annotating pod {namespace}/{name}"):
                resp = self._core.patch_namespaced_pod(
                    name,
                    namespace,
                    {"metadata": {"annotations": dict(annotations)}},
                    _preload_content=False,
                    _request_timeout=self._timeout,
                )
                try:
                    resp.read()
                finally:
                    resp.release_conn()
        except NotFound:
            log.debug("pod %s/%s is gone; report dropped", namespace, name)


def _seconds(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
