"""Adopted workloads: batch/v1 Jobs, JobSets and Kubeflow TrainJobs that perfsched schedules unmodified.

Adapter module. The conversion half is pure: ``decode`` turns one API object of a supported kind into a
``Workload`` (what the round needs: GPUs per pod, gang size, elastic bounds, predictor inputs, whether it is
suspended, finished or refused, and why), and ``admit_patches`` / ``suspend_patch`` / ``status_patch``
return the merge patches that admit it on a GPU type and size, re-suspend it, or record perfsched's view
of it in the ``perfsched.dev/status`` annotation. The I/O half is the ``WorkloadApi`` seam (list and
merge-patch the three kinds) with ``RealWorkloadApi`` over the official client; the in-memory fake is
``scheduler.k8s.fakeworkloads.FakeWorkloadApi``.

Each kind is described once, as Kueue's ``jobframework.GenericJob`` describes its integrations: where its
suspend flag is, where its pod templates are, how many pods its gang has and how its size is written
(``parallelism`` of a Job, the replicas of a JobSet's GPU replicated job, ``spec.trainer.numNodes`` of a
TrainJob), how its pods are labelled, and which conditions say it finished. A TrainJob's placement is
written as a ``spec.runtimePatches`` entry with perfsched's manager name, the way Trainer v2.3 lets
schedulers patch the runtime's template.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from scheduler.k8s import crd
from scheduler.k8s.actuator import event_body
from scheduler.k8s.errors import NotFound
from scheduler.k8s.kubeapi import RealKubeApi
from scheduler.names import (
    ANNOTATION_ADMISSION,
    ANNOTATION_BATCH_SIZE,
    ANNOTATION_DATASET,
    ANNOTATION_GPU_TYPE,
    ANNOTATION_MAX_REPLICAS,
    ANNOTATION_MIN_REPLICAS,
    ANNOTATION_MODEL,
    ANNOTATION_PLANNED_NODE,
    ANNOTATION_PRECISION,
    ANNOTATION_START_TIMEOUT,
    ANNOTATION_STATUS,
    ANNOTATION_TOTAL_WORK,
    ANNOTATION_TRAINER_JOB,
    ANNOTATION_WORLD_SIZE,
    GPU_RESOURCE,
    KUEUE_QUEUE_LABEL,
    LABEL_GPU_PRODUCT,
    LABEL_QUEUE,
    OPERATOR_COMPONENT,
)

Obj = dict[str, Any]

#: The scheduler profile adopted pods are sent to (``docs/job-kinds.md``).
SCHEDULER_NAME = "perfsched"
#: The replicated job of a Trainer runtime that runs the trainer nodes (Trainer's built-in runtimes name it
#: so); a TrainJob may name another one with this annotation.
TRAINJOB_NODE_JOB = "node"
PRECISIONS = ("fp32", "fp16", "bf16", "amp", "tf32", "fp8")


@dataclass(frozen=True, slots=True)
class WorkloadKind:
    """One supported kind: its API coordinates and the pod label that names a workload's pods."""

    kind: str
    group: str
    version: str
    plural: str
    pod_label: str  # the label its pods carry, whose value is ``pod_label_value`` of the workload

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group != "batch" or self.version != "v1" else "batch/v1"

    @property
    def short(self) -> str:
        return self.kind.lower()


JOB = WorkloadKind("Job", "batch", "v1", "jobs", "batch.kubernetes.io/controller-uid")
JOBSET = WorkloadKind("JobSet", "jobset.x-k8s.io", "v1alpha2", "jobsets", "jobset.sigs.k8s.io/jobset-name")
TRAINJOB = WorkloadKind(
    "TrainJob", "trainer.kubeflow.org", "v1alpha1", "trainjobs", "jobset.sigs.k8s.io/jobset-name"
)
WORKLOAD_KINDS: dict[str, WorkloadKind] = {k.kind: k for k in (JOB, JOBSET, TRAINJOB)}
#: API groups whose kinds perfsched does not adopt, named in the refusal of a labelled object of them.
SUPPORTED = ", ".join(f"{k.api_version} {k.kind}" for k in WORKLOAD_KINDS.values())


@dataclass(frozen=True, slots=True)
class Workload:
    """One adopted-kind object as the round sees it (see the module docstring).

    ``queue`` is the label's value ("" when only a namespace selector makes it perfsched's); ``kueue`` is
    true when it carries Kueue's queue label. ``finished`` is "Succeeded", "Failed" or "". ``problem`` is
    why perfsched refuses to run it ("" when it can). ``replicas`` is its gang size as written now;
    ``min_replicas``/``max_replicas`` its elastic bounds (equal for a rigid job). ``agnostic`` says why the
    predictor cannot describe it ("" when ``model`` and ``batch_size`` are given). ``status`` is the parsed
    ``perfsched.dev/status`` annotation ({} when absent).
    """

    kind: WorkloadKind
    namespace: str
    name: str
    uid: str
    obj: Obj
    labelled: bool
    queue: str
    kueue: bool
    suspended: bool
    finished: str
    finish_message: str
    replicas: int
    min_replicas: int
    max_replicas: int
    gpus_per_replica: int
    model: str
    batch_size: int
    precision: str
    total_work: float
    created: float | None
    priority_class: str
    progress_fraction: float | None
    eta_seconds: float | None
    problem: str
    agnostic: str
    status: Mapping[str, Any] = field(default_factory=dict)
    dataset: str = ""
    #: ``perfsched.dev/start-timeout-seconds`` (None: the operator's default)
    start_timeout_s: int | None = None

    @property
    def key(self) -> str:
        """Name in the round (unique across kinds): ``<kind>/<namespace>/<name>``."""
        return f"{self.kind.short}/{self.namespace}/{self.name}"

    @property
    def elastic(self) -> bool:
        return self.min_replicas < self.max_replicas

    @property
    def pod_label_value(self) -> str:
        return self.uid if self.kind is JOB else self.name

    @property
    def admitted(self) -> bool:
        """Whether perfsched admitted it (and has not re-suspended it since)."""
        return bool(self.status.get("gpuType")) and self.status.get("phase") in ("Admitted", "Running")


# --- decoding (pure) ---------------------------------------------------------------------------------


def parse_status(raw: Any) -> dict[str, Any]:
    """The ``perfsched.dev/status`` annotation as a dict ({} when absent or not a JSON object)."""
    if not isinstance(raw, str) or not raw:
        return {}
    try:
        parsed = json.loads(raw)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def pod_gpus(pod_spec: Mapping[str, Any]) -> int:
    """GPUs one pod of this spec asks for: the sum over its containers (limits, else requests)."""
    total = 0
    for c in pod_spec.get("containers") or []:
        res = c.get("resources") or {}
        value = (res.get("limits") or {}).get(GPU_RESOURCE, (res.get("requests") or {}).get(GPU_RESOURCE, 0))
        total += _int(value)
    return total


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return default


def _condition(obj: Mapping[str, Any], *types: str) -> Mapping[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") in types and c.get("status") == "True":
            return c
    return None


def _finished(obj: Mapping[str, Any], done: str, failed: str) -> tuple[str, str]:
    c = _condition(obj, failed)
    if c is not None:
        return "Failed", str(c.get("message") or c.get("reason") or "failed")
    c = _condition(obj, done)
    if c is not None:
        return "Succeeded", str(c.get("message") or c.get("reason") or "completed")
    return "", ""


@dataclass(frozen=True, slots=True)
class _Shape:
    replicas: int
    gpus: int
    priority_class: str
    problem: str = ""
    resizable: bool = True


def _job_shape(obj: Mapping[str, Any]) -> _Shape:
    spec = obj.get("spec") or {}
    pod = ((spec.get("template") or {}).get("spec")) or {}
    return _Shape(
        replicas=_int(spec.get("parallelism", 1), 1),
        gpus=pod_gpus(pod),
        priority_class=str(pod.get("priorityClassName") or ""),
    )


def _jobset_gpu_jobs(obj: Mapping[str, Any]) -> list[tuple[int, Mapping[str, Any]]]:
    out = []
    for i, rj in enumerate((obj.get("spec") or {}).get("replicatedJobs") or []):
        pod = (((rj.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
        if pod_gpus(pod) > 0:
            out.append((i, rj))
    return out


def _jobset_shape(obj: Mapping[str, Any]) -> _Shape:
    gpu_jobs = _jobset_gpu_jobs(obj)
    if not gpu_jobs:
        return _Shape(0, 0, "")
    replicas, sizes, classes = 0, set(), set()
    for _, rj in gpu_jobs:
        job_spec = (rj.get("template") or {}).get("spec") or {}
        pod = (job_spec.get("template") or {}).get("spec") or {}
        sizes.add(pod_gpus(pod))
        classes.add(str(pod.get("priorityClassName") or ""))
        replicas += _int(rj.get("replicas", 1), 1) * _int(job_spec.get("parallelism", 1), 1)
    if len(sizes) > 1:
        return _Shape(
            replicas,
            max(sizes),
            "",
            problem=f"its replicated jobs ask different GPUs per pod ({sorted(sizes)}): perfsched schedules "
            "gangs of equal pods",
        )
    return _Shape(replicas, sizes.pop(), sorted(classes)[-1], resizable=False)


def _trainjob_shape(obj: Mapping[str, Any]) -> _Shape:
    trainer = (obj.get("spec") or {}).get("trainer") or {}
    res = trainer.get("resourcesPerNode") or {}
    gpus = _int((res.get("limits") or {}).get(GPU_RESOURCE, (res.get("requests") or {}).get(GPU_RESOURCE, 0)))
    return _Shape(replicas=_int(trainer.get("numNodes", 1), 1), gpus=gpus, priority_class="")


_SHAPES: dict[str, Callable[[Mapping[str, Any]], _Shape]] = {
    "Job": _job_shape,
    "JobSet": _jobset_shape,
    "TrainJob": _trainjob_shape,
}
_FINISH: dict[str, tuple[str, str]] = {
    "Job": ("Complete", "Failed"),
    "JobSet": ("Completed", "Failed"),
    "TrainJob": ("Complete", "Failed"),
}


def _suspended(kind: WorkloadKind, obj: Mapping[str, Any]) -> bool:
    return bool((obj.get("spec") or {}).get("suspend"))


def decode(
    kind: WorkloadKind, obj: Mapping[str, Any], *, known_queues: Collection[str] | None = None
) -> Workload:
    """One API object of ``kind`` as a ``Workload`` (pure; never raises on bad input: ``problem`` says it).

    ``known_queues``: the TrainingQueues that exist (None: do not check the label's queue)."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    ann = meta.get("annotations") or {}
    shape = _SHAPES[kind.kind](obj)
    done, failed = _FINISH[kind.kind]
    finished, finish_message = _finished(obj, done, failed)
    queue = str(labels.get(LABEL_QUEUE) or "")
    labelled = LABEL_QUEUE in labels
    kueue = KUEUE_QUEUE_LABEL in labels

    problems: list[str] = []
    if labelled and kueue:
        problems.append(
            f"it carries both {LABEL_QUEUE} and Kueue's {KUEUE_QUEUE_LABEL}: one scheduler must own it; "
            "remove one of the labels"
        )
    if shape.gpus <= 0:
        where = {
            "Job": "spec.template",
            "JobSet": "any replicated job's pod template",
            "TrainJob": "spec.trainer.resourcesPerNode",
        }[kind.kind]
        problems.append(f"{where} asks for no {GPU_RESOURCE}: perfsched schedules GPU jobs only")
    if shape.problem:
        problems.append(shape.problem)
    if labelled and not queue:
        problems.append(f"label {LABEL_QUEUE} is empty: name a TrainingQueue")
    elif queue and known_queues is not None and queue not in known_queues:
        problems.append(
            f"TrainingQueue {queue!r} named by label {LABEL_QUEUE} does not exist "
            f"(queues: {', '.join(sorted(known_queues)) or 'none'})"
        )

    lo_raw, hi_raw = ann.get(ANNOTATION_MIN_REPLICAS), ann.get(ANNOTATION_MAX_REPLICAS)
    lo = hi = shape.replicas
    if lo_raw is not None or hi_raw is not None:
        lo, hi = _int(lo_raw, shape.replicas), _int(hi_raw, shape.replicas)
        if lo < 1 or hi < lo:
            problems.append(
                f"annotations {ANNOTATION_MIN_REPLICAS}={lo_raw!r} / {ANNOTATION_MAX_REPLICAS}={hi_raw!r} "
                "must be whole numbers with 1 <= min <= max"
            )
            lo = hi = shape.replicas
        elif not shape.resizable and lo != hi:
            problems.append(
                f"a {kind.kind} cannot be resized while suspended: drop {ANNOTATION_MIN_REPLICAS} and "
                f"{ANNOTATION_MAX_REPLICAS}"
            )
            lo = hi = shape.replicas

    model = str(ann.get(ANNOTATION_MODEL) or "")
    batch_raw = ann.get(ANNOTATION_BATCH_SIZE)
    batch = _int(batch_raw, 0)
    if batch_raw is not None and batch <= 0:
        problems.append(f"annotation {ANNOTATION_BATCH_SIZE}={batch_raw!r} is not a positive whole number")
    precision = str(ann.get(ANNOTATION_PRECISION) or "fp32")
    if precision not in PRECISIONS:
        problems.append(
            f"annotation {ANNOTATION_PRECISION}={precision!r}: use one of {', '.join(PRECISIONS)}"
        )
    missing = [a for a, v in ((ANNOTATION_MODEL, model), (ANNOTATION_BATCH_SIZE, batch)) if not v]
    agnostic = (
        f"no {' and '.join(missing)} annotation: the predictor cannot describe it, so its GPU type is chosen "
        "without a throughput prediction"
        if missing
        else ""
    )
    work_raw = ann.get(ANNOTATION_TOTAL_WORK)
    total = 1.0
    if work_raw is not None:
        try:
            total = float(work_raw)
        except (TypeError, ValueError):
            total = math.nan
        if not math.isfinite(total) or total <= 0:
            problems.append(f"annotation {ANNOTATION_TOTAL_WORK}={work_raw!r} is not a positive number")
            total = 1.0

    timeout_raw = ann.get(ANNOTATION_START_TIMEOUT)
    start_timeout: int | None = None
    if timeout_raw is not None:
        start_timeout = _int(timeout_raw, 0)
        if not 1 <= start_timeout <= crd.MAX_START_TIMEOUT_S:
            problems.append(
                f"annotation {ANNOTATION_START_TIMEOUT}={timeout_raw!r} is not a whole number of seconds "
                f"from 1 to {crd.MAX_START_TIMEOUT_S}"
            )
            start_timeout = None

    progress: float | None = None
    eta: float | None = None
    trainer_status = (obj.get("status") or {}).get("trainerStatus") or {}
    if isinstance(trainer_status, dict):
        if trainer_status.get("progressPercentage") is not None:
            progress = min(1.0, max(0.0, _int(trainer_status["progressPercentage"]) / 100.0))
        if trainer_status.get("estimatedRemainingSeconds") is not None:
            eta = float(_int(trainer_status["estimatedRemainingSeconds"]))

    return Workload(
        kind=kind,
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        obj=dict(obj),
        labelled=labelled,
        queue=queue,
        kueue=kueue,
        suspended=_suspended(kind, obj),
        finished=finished,
        finish_message=finish_message,
        replicas=shape.replicas,
        min_replicas=lo,
        max_replicas=hi,
        gpus_per_replica=shape.gpus,
        model=model,
        batch_size=batch,
        precision=precision,
        total_work=total,
        created=crd.parse_time(meta.get("creationTimestamp")),
        priority_class=shape.priority_class,
        progress_fraction=progress,
        eta_seconds=eta,
        problem="; ".join(problems),
        agnostic=agnostic,
        status=parse_status(ann.get(ANNOTATION_STATUS)),
        dataset=str(ann.get(ANNOTATION_DATASET) or ""),
        start_timeout_s=start_timeout,
    )


# --- patches (pure) ----------------------------------------------------------------------------------


def _placement(gpu_type: str, products: Sequence[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The pod-spec fields and pod annotations that pin a pod to ``gpu_type`` (nodes labelled with one of
    ``products``): a nodeSelector on the product label, or node affinity when the type spans several."""
    annotations = {ANNOTATION_GPU_TYPE: gpu_type}
    if len(products) == 1:
        return {"nodeSelector": {LABEL_GPU_PRODUCT: products[0]}}, annotations
    term = {"matchExpressions": [{"key": LABEL_GPU_PRODUCT, "operator": "In", "values": sorted(products)}]}
    return {
        "affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
        }
    }, annotations


def worker_annotations(w: Workload, admission: int, replicas: int) -> dict[str, str]:
    """What the workers of ``w``'s pods are told, as a TrainingJob's pods are: which admission they run
    (a new one is a new run, which resumes from the job's checkpoint), the gang's size (``replicas``
    pods: the extender sizes the job's memory and placement by it), the job's predictor inputs, and its
    total work when the job declares it."""
    out = {ANNOTATION_ADMISSION: str(admission), ANNOTATION_WORLD_SIZE: str(replicas)}
    if w.model:
        out[ANNOTATION_MODEL] = w.model
    if w.dataset:
        out[ANNOTATION_DATASET] = w.dataset
    if w.batch_size:
        out[ANNOTATION_BATCH_SIZE] = str(w.batch_size)
    out[ANNOTATION_PRECISION] = w.precision
    if ANNOTATION_TOTAL_WORK in ((w.obj.get("metadata") or {}).get("annotations") or {}):
        out[ANNOTATION_TOTAL_WORK] = f"{w.total_work:g}"
    return out


def admit_patches(
    w: Workload,
    gpu_type: str,
    products: Sequence[str],
    replicas: int,
    *,
    admission: int = 1,
    planned_node: str = "",
) -> list[Obj]:
    """The merge patches that admit ``w`` on ``gpu_type`` with ``replicas`` pods, in order: first the
    placement, the workers' annotations (``worker_annotations``, ``admission`` counting from 1) and the size
    (written while it is still suspended, as the API requires), then the unsuspend.

    ``planned_node``: the node the policy put most of the gang on, written as the pods'
    ``perfsched.dev/planned-node``: the extender scores the pods' locality to it, so they gather there
    while it has room (a preference: a pod that does not fit there still lands on another node of the
    type, as a TrainingJob's replica does when its planned node fills)."""
    if not products:
        raise ValueError(f"no node product for GPU type {gpu_type!r}")
    pod_fields, pod_ann = _placement(gpu_type, products)
    pod_ann = {**pod_ann, **worker_annotations(w, admission, replicas)}
    if planned_node:
        pod_ann[ANNOTATION_PLANNED_NODE] = planned_node
    tmpl_patch = {"metadata": {"annotations": pod_ann}, "spec": pod_fields}
    first: Obj
    if w.kind is JOB:
        spec: Obj = {"template": tmpl_patch}
        if w.elastic or replicas != w.replicas:
            spec["parallelism"] = replicas
            job_spec = w.obj.get("spec") or {}
            if job_spec.get("completionMode") == "Indexed" and job_spec.get("completions") == job_spec.get(
                "parallelism"
            ):
                spec["completions"] = replicas  # an elastic Indexed Job scales both together
        first = {"spec": spec}
    elif w.kind is JOBSET:
        rjs = copy.deepcopy((w.obj.get("spec") or {}).get("replicatedJobs") or [])
        for i, _ in _jobset_gpu_jobs(w.obj):
            pod_tmpl = rjs[i].setdefault("template", {}).setdefault("spec", {}).setdefault("template", {})
            pod_tmpl.setdefault("metadata", {}).setdefault("annotations", {}).update(pod_ann)
            pod_spec = pod_tmpl.setdefault("spec", {})
            pod_spec.pop("affinity", None) if "affinity" in pod_fields else None
            for k, v in pod_fields.items():
                pod_spec[k] = {**(pod_spec.get(k) or {}), **v} if k == "nodeSelector" else v
        first = {"spec": {"replicatedJobs": rjs}}
    else:
        node_job = str(
            ((w.obj.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_TRAINER_JOB) or ""
        )
        ours = {
            "manager": OPERATOR_COMPONENT,
            "trainingRuntimeSpec": {
                "template": {
                    "spec": {
                        "replicatedJobs": [
                            {
                                "name": node_job or TRAINJOB_NODE_JOB,
                                "template": {"spec": {"template": tmpl_patch}},
                            }
                        ]
                    }
                }
            },
        }
        others = [
            p
            for p in (w.obj.get("spec") or {}).get("runtimePatches") or []
            if isinstance(p, dict) and p.get("manager") != OPERATOR_COMPONENT
        ]
        spec = {"runtimePatches": [*others, ours]}
        if replicas != w.replicas:
            spec["trainer"] = {"numNodes": replicas}
        first = {"spec": spec}
    return [first, {"spec": {"suspend": False}}]


def suspend_patch() -> Obj:
    """Re-suspend (preemption): the controller deletes the pods, each with its termination grace period."""
    return {"spec": {"suspend": True}}


def release_patch(w: Workload) -> Obj:
    """Give the workload back (its label was removed): drop perfsched's status, unsuspend it if perfsched
    held it suspended."""
    patch: Obj = {"metadata": {"annotations": {ANNOTATION_STATUS: None}}}
    if w.suspended and w.status:
        patch["spec"] = {"suspend": False}
    return patch


def status_patch(status: Mapping[str, Any]) -> Obj:
    """Write ``status`` as the ``perfsched.dev/status`` annotation (compact JSON, keys sorted)."""
    text = json.dumps(
        {k: v for k, v in status.items() if v is not None}, sort_keys=True, separators=(",", ":")
    )
    return {"metadata": {"annotations": {ANNOTATION_STATUS: text}}}


def workload_event(
    w: Workload, *, type_: str, reason: str, message: str, now: float, instance: str = ""
) -> Obj:
    """A core/v1 Event about the workload (pure)."""
    body = event_body(w.obj, type_=type_, reason=reason, message=message, now=now, instance=instance)
    body["involvedObject"] = {
        "apiVersion": w.kind.api_version,
        "kind": w.kind.kind,
        "name": w.name,
        "namespace": w.namespace,
        "uid": w.uid,
    }
    return body


# --- the API seam ------------------------------------------------------------------------------------


class WorkloadApi(Protocol):
    """List and merge-patch the adopted kinds, and record Events about them."""

    def list_workloads(self, kind: WorkloadKind) -> list[Obj]:
        """Every object of ``kind`` in the cluster ([] when its CRD is not installed)."""
        ...

    def patch_workload(
        self, kind: WorkloadKind, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> Obj: ...

    def create_event(self, namespace: str, body: Mapping[str, Any]) -> None: ...


class RealWorkloadApi:
    """``WorkloadApi`` over the official client, sharing a ``RealKubeApi``'s retries and health."""

    def __init__(self, kube: RealKubeApi) -> None:
        from kubernetes import client

        self._kube = kube
        self._custom = client.CustomObjectsApi(kube._client)
        self._batch = client.BatchV1Api(kube._client)
        self._timeout = kube._timeout

    def list_workloads(self, kind: WorkloadKind) -> list[Obj]:
        kw: dict[str, Any] = {"_preload_content": False, "_request_timeout": self._timeout}
        try:
            if kind is JOB:
                items = self._kube._items("list jobs", lambda: self._batch.list_job_for_all_namespaces(**kw))
            else:
                items = self._kube._items(
                    f"list {kind.plural}",
                    lambda: self._custom.list_cluster_custom_object(
                        kind.group, kind.version, kind.plural, **kw
                    ),
                )
        except NotFound:  # its CRD is not installed: nothing of that kind to adopt
            return []
        for item in items:  # list items carry no kind: the Events and patches need it
            item.setdefault("apiVersion", kind.api_version)
            item.setdefault("kind", kind.kind)
        return list(items)

    def patch_workload(self, kind: WorkloadKind, namespace: str, name: str, patch: Mapping[str, Any]) -> Obj:
        body = dict(patch)
        if kind is JOB:
            # the generated patch_namespaced_job sends a JSON patch for a dict body: call it as a merge patch
            return self._kube._json(
                f"patch job {namespace}/{name}",
                lambda: self._batch.api_client.call_api(
                    "/apis/batch/v1/namespaces/{namespace}/jobs/{name}",
                    "PATCH",
                    path_params={"namespace": namespace, "name": name},
                    header_params={
                        "Content-Type": "application/merge-patch+json",
                        "Accept": "application/json",
                    },
                    body=body,
                    auth_settings=["BearerToken"],
                    _return_http_data_only=True,
                    _preload_content=False,
                    _request_timeout=self._timeout,
                ),
            )
        return self._kube._json(
            f"patch {kind.plural} {namespace}/{name}",
            lambda: self._custom.patch_namespaced_custom_object(
                kind.group,
                kind.version,
                namespace,
                kind.plural,
                name,
                body,
                _preload_content=False,
                _request_timeout=self._timeout,
            ),
        )

    def create_event(self, namespace: str, body: Mapping[str, Any]) -> None:
        self._kube.create_event(namespace, body)


# --- the list users see (``perfsched jobs``) ------------------------------------------------------------

#: Columns of ``perfsched jobs``, in order.
LIST_COLUMNS = (
    "KIND",
    "NAMESPACE",
    "NAME",
    "PHASE",
    "QUEUE",
    "GPU",
    "REPLICAS",
    "PREDICTED/S",
    "ETA",
    "MESSAGE",
)


def list_rows(kind: WorkloadKind, objs: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """One row per adopted object of ``kind`` (those labelled ``perfsched.dev/queue`` or carrying
    perfsched's status), from its ``perfsched.dev/status`` annotation; pure."""
    rows = []
    for obj in objs:
        meta = obj.get("metadata") or {}
        labels, ann = meta.get("labels") or {}, meta.get("annotations") or {}
        st = parse_status(ann.get(ANNOTATION_STATUS))
        if LABEL_QUEUE not in labels and not st:
            continue
        predicted = st.get("predictedThroughput")
        eta = st.get("etaSeconds")
        rows.append(
            {
                "KIND": kind.kind,
                "NAMESPACE": str(meta.get("namespace") or ""),
                "NAME": str(meta.get("name") or ""),
                "PHASE": str(st.get("phase") or "Pending"),
                "QUEUE": str(st.get("queue") or labels.get(LABEL_QUEUE) or ""),
                "GPU": str(st.get("gpuType") or ""),
                "REPLICAS": str(st.get("replicas") or ""),
                "PREDICTED/S": f"{float(predicted):.3g}" if isinstance(predicted, int | float) else "",
                "ETA": f"{float(eta):.0f}s" if isinstance(eta, int | float) else "",
                "MESSAGE": str(st.get("message") or ("not seen by the operator yet" if not st else "")),
            }
        )
    return sorted(rows, key=lambda r: (r["NAMESPACE"], r["KIND"], r["NAME"]))
