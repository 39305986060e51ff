"""The TrainingJob custom resource as typed models, and its conversion into the core ``Job``.

Edge module (pydantic, no I/O, no clock: ``now`` is passed in). ``TrainingJobSpec`` and
``TrainingJobStatus`` mirror ``crds/trainingjob.yaml`` field for field (camelCase on the wire,
snake_case in Python). ``trainingjob_to_job`` turns a TrainingJob object as the API returns it into a
``scheduler.core.types.Job``, or into an ``Unschedulable`` value naming the problem when the object was
admitted by the API server but cannot be scheduled as written: a model the predictor does not know and no
``modelParams``, a template without containers, GPU types no node has, an unknown PriorityClass, or a
spec that does not parse (a CRD installed without its schema). Such a job stays Pending with that reason;
it is never an exception that could stop the operator.

``TrainingQueueSpec`` / ``TrainingQueueStatus`` mirror ``crds/trainingqueue.yaml``;
``trainingqueue_to_spec`` turns a TrainingQueue into the core's ``QueueSpec`` (or a message naming the
field when its spec does not parse) and ``queue_spec_to_wire`` goes back.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from perfmodel.gpus import CANONICAL_TYPES
from perfmodel.profile import OperatorProfile
from perfmodel.sharding import SHARDING_PATTERN
from scheduler.core.decisions import Unschedulable
from scheduler.core.errors import ConfigError
from scheduler.core.queues import FairShare, QueueSpec, Quota
from scheduler.core.types import Job, WorkUnit

#: The phases of ``status.phase``, in the order a job usually goes through them.
PHASES = ("Pending", "Admitted", "Running", "Resizing", "Preempted", "Succeeded", "Failed")
Phase = Literal["Pending", "Admitted", "Running", "Resizing", "Preempted", "Succeeded", "Failed"]
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})

#: Upper bounds of ``spec.startTimeoutSeconds`` (one day) and ``spec.backoffLimit`` (the CRD's CEL rules).
MAX_START_TIMEOUT_S = 86400
MAX_BACKOFF_LIMIT = 100

#: Canonical GPU type names (the schema's enum for ``allowedGPUTypes``): perfmodel's catalogue.
CANONICAL_GPU_TYPES = frozenset(CANONICAL_TYPES)


class _Wire(BaseModel):
    """Base of the CRD models: camelCase aliases, population by either name, unknown keys kept out."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)


class ModelParams(_Wire):
    parameters: float = Field(gt=0)
    #: may be left out for an LLM that sets ``spec.sequenceLength`` (checked by ``TrainingJobSpec``)
    flops_per_sample: float | None = Field(default=None, gt=0)


class ModelProfileRef(_Wire):
    """``spec.modelProfile``: where the job's operator profile is (a key of a ConfigMap in its namespace)."""

    config_map_name: str = Field(
        min_length=1,
        max_length=253,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
    )
    key: str = Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$")


class Work(_Wire):
    """Declared work: exactly one of iterations, samples, or epochs x datasetSize."""

    iterations: int | None = Field(default=None, ge=1)
    samples: int | None = Field(default=None, ge=1)
    epochs: float | None = Field(default=None, gt=0)
    dataset_size: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _one_kind(self) -> Work:
        kinds = [k for k in ("iterations", "samples", "epochs") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError("must set exactly one of iterations, samples, epochs")
        if (self.epochs is None) != (self.dataset_size is None):
            raise ValueError("epochs and datasetSize go together")
        return self

    @property
    def unit(self) -> WorkUnit:
        return WorkUnit.ITERATIONS if self.iterations is not None else WorkUnit.SAMPLES

    @property
    def total(self) -> float:
        """Total work in ``unit`` (epochs are converted to samples: epochs x datasetSize)."""
        if self.iterations is not None:
            return float(self.iterations)
        if self.samples is not None:
            return float(self.samples)
        assert self.epochs is not None and self.dataset_size is not None
        return float(self.epochs) * float(self.dataset_size)


class Replicas(_Wire):
    min: int = Field(default=1, ge=1)
    max: int = Field(ge=1)
    gpus_per_replica: int = Field(default=1, ge=1)

    @model_validator(mode="after")
    def _ordered(self) -> Replicas:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must be <= max ({self.max})")
        return self


class TrainingJobSpec(_Wire):
    """``spec`` of a TrainingJob (see ``docs/trainingjob.md``)."""

    model: str | None = Field(default=None, min_length=1)
    model_params: ModelParams | None = None
    model_profile: ModelProfileRef | None = None
    dataset: str = ""
    batch_size: int = Field(ge=1)
    precision: Literal["fp32", "amp", "bf16", "fp16"] = "fp32"
    sequence_length: int | None = Field(default=None, ge=1, le=1_048_576)
    sharding: str = Field(default="", max_length=32, pattern=SHARDING_PATTERN)
    micro_batch_size: int | None = Field(default=None, ge=1)
    activation_checkpointing: bool = False
    work: Work
    replicas: Replicas
    elastic: bool = False
    allowed_gpu_types: tuple[str, ...] = Field(default=(), alias="allowedGPUTypes")
    priority: int | None = None
    priority_class_name: str | None = None
    queue: str = ""
    preemptible: bool = True
    deadline: datetime | None = None
    checkpoint_grace_seconds: int = Field(default=30, ge=0)
    #: seconds a started gang has to get every replica Running (None: the operator's default)
    start_timeout_seconds: int | None = Field(default=None, gt=0, le=MAX_START_TIMEOUT_S)
    #: start timeouts (and worker crashes) before the job Fails (None: the operator's default)
    backoff_limit: int | None = Field(default=None, ge=0, le=MAX_BACKOFF_LIMIT)
    template: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _exclusive(self) -> TrainingJobSpec:
        if self.model is None and self.model_params is None and self.model_profile is None:
            raise ValueError("one of model, modelParams and modelProfile must be set")
        if self.model is not None and self.model_params is not None:
            raise ValueError("set at most one of model and modelParams")
        if self.priority is not None and self.priority_class_name is not None:
            raise ValueError("set at most one of priority and priorityClassName")
        params = self.model_params
        if params is not None and params.flops_per_sample is None and self.sequence_length is None:
            raise ValueError("spec.modelParams.flopsPerSample is required unless spec.sequenceLength is set")
        if self.micro_batch_size is not None and self.micro_batch_size > self.batch_size:
            raise ValueError("spec.microBatchSize must be <= spec.batchSize")
        return self


class Condition(_Wire):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = None
    observed_generation: int | None = None


class AllocationStatus(_Wire):
    replicas: int = 0
    gpu_type: str = ""
    gpus_per_replica: int = 0
    nodes: tuple[str, ...] = ()
    replicas_per_node: dict[str, int] = Field(default_factory=dict)


class TrainingJobStatus(_Wire):
    """``status`` of a TrainingJob. Everything the operator needs to rebuild its state after a restart."""

    phase: Phase | None = None
    reason: str | None = None
    message: str | None = None
    conditions: tuple[Condition, ...] = ()
    allocation: AllocationStatus | None = None
    selector: str | None = None
    gang_generation: int = 0
    predicted_throughput: float | None = None
    observed_throughput: float | None = None
    work_unit: str | None = None
    total_work: float | None = None
    progress: float = 0.0
    checkpoint_progress: float = 0.0
    progress_percent: float | None = None
    progress_percent_text: str | None = None
    lost_work: float = 0.0
    attained_service: float = 0.0
    accounted_time: float | None = None
    estimated_completion: str | None = None
    admitted_time: str | None = None
    start_time: str | None = None
    last_change_time: str | None = None
    completion_time: str | None = None
    restarts: int = 0
    resizes: int = 0
    preemptions: int = 0
    failures: int = 0
    requeue_count: int = 0
    next_attempt_time: str | None = None
    observed_generation: int | None = None
    placement: dict[str, str] = Field(default_factory=dict)

    def condition(self, type_: str) -> Condition | None:
        for c in self.conditions:
            if c.type == type_:
                return c
        return None

    def to_wire(self) -> dict[str, Any]:
        """The status as API JSON (camelCase), leaving out unset optional fields."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def rfc3339(t: float) -> str:
    """Unix seconds -> RFC 3339 UTC string with a ``Z`` suffix (what the API server writes)."""
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: str | datetime | None) -> float | None:
    """RFC 3339 string (or datetime) -> Unix seconds; None or an unparsable value -> None."""
    if value is None:
        return None
    if isinstance(value, datetime):
        dt = value
    else:
        try:
            dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def job_key(obj: Mapping[str, Any]) -> str:
    """``namespace/name`` of an API object: the core ``Job.name`` of a TrainingJob."""
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def parse_spec(obj: Mapping[str, Any]) -> TrainingJobSpec | Unschedulable:
    """Validate ``obj['spec']``; a spec that does not parse becomes an unresolvable ``Unschedulable``."""
    try:
        return TrainingJobSpec.model_validate(obj.get("spec") or {})
    except ValidationError as exc:
        return Unschedulable(f"invalid spec: {_describe(exc)}", resolvable=False)


def parse_status(obj: Mapping[str, Any]) -> TrainingJobStatus:
    """Validate ``obj['status']``; a status that does not parse (hand-edited) counts as empty."""
    try:
        return TrainingJobStatus.model_validate(obj.get("status") or {})
    except ValidationError:
        return TrainingJobStatus()


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:3]:
        loc = ".".join(str(p) for p in err["loc"])
        where = f"spec.{loc}" if loc else "spec"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def template_problem(template: Mapping[str, Any]) -> str | None:
    """What is wrong with a worker PodTemplateSpec that the schema admitted, or None if it is usable."""
    spec = template.get("spec")
    if not isinstance(spec, Mapping):
        return "spec.template.spec is missing"
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        return "spec.template.spec.containers is empty: the worker template needs at least one container"
    for i, c in enumerate(containers):
        if not isinstance(c, Mapping) or not c.get("name") or not c.get("image"):
            return f"spec.template.spec.containers[{i}] needs a name and an image"
        claims = (c.get("resources") or {}).get("claims") if isinstance(c.get("resources"), Mapping) else None
        if claims:
            return f"spec.template.spec.containers[{i}].resources.claims: {_NO_CLAIMS}"
    if spec.get("resourceClaims"):
        return f"spec.template.spec.resourceClaims: {_NO_CLAIMS}"
    return None


#: why a worker template may not bring its own ResourceClaims (DRA-only pods)
_NO_CLAIMS = (
    "ResourceClaims (and ResourceClaimTemplates) in the worker template are not supported: perfsched "
    "counts, places and resizes GPUs as nvidia.com/gpu (spec.replicas.gpusPerReplica), which "
    "kube-scheduler allocates as DRA devices where a DeviceClass sets extendedResourceName: "
    "nvidia.com/gpu; remove them and set gpusPerReplica"
)


def trainingjob_to_job(
    obj: Mapping[str, Any],
    *,
    now: float,
    known_model: Callable[[str], bool] | None = None,
    cluster_gpu_types: Collection[str] | None = None,
    priority_classes: Mapping[str, int] | None = None,
    model_profile: OperatorProfile | str | None = None,
) -> Job | Unschedulable:
    """Convert a TrainingJob API object into a core ``Job``, or say why it cannot be scheduled.

    ``known_model`` answers whether the predictor knows a zoo model name (None: do not check);
    ``cluster_gpu_types`` are the GPU types some node has (None: do not check); ``priority_classes`` maps
    PriorityClass names to values (None: an unknown class is an error only when a name is given).
    ``model_profile`` is the profile ``spec.modelProfile`` points to as the caller read it
    (``scheduler.k8s.profiles``), or the problem that kept it from being read: a job with a profile gets
    its parameters and training FLOPs per sample from it and carries it to the predictor; a job whose
    profile is unusable falls back to ``spec.model`` / ``spec.modelParams``, or, with neither, waits
    with the problem as its reason. None (a caller that does not read profiles, like the extender's
    cache) converts the job without one.
    Progress, checkpoint, attained service, restarts and the last change come from ``status``; the
    operator refreshes progress from the workers' reports before a round.
    """
    spec = parse_spec(obj)
    if isinstance(spec, Unschedulable):
        return spec
    status = parse_status(obj)
    meta = obj.get("metadata") or {}

    profile = model_profile if spec.model_profile is not None and not isinstance(model_profile, str) else None
    if isinstance(model_profile, str) and spec.model is None and spec.model_params is None:
        return Unschedulable(model_profile, resolvable=True)
    if profile is None and spec.model is not None and known_model is not None and not known_model(spec.model):
        return Unschedulable(
            f"unknown model {spec.model!r} in spec.model: the predictor does not know it; "
            "use a zoo model name or give spec.modelParams {parameters, flopsPerSample}",
            resolvable=False,
        )
    problem = template_problem(spec.template)
    if problem is not None:
        return Unschedulable(problem, resolvable=False)

    unknown_types = sorted(set(spec.allowed_gpu_types) - CANONICAL_GPU_TYPES)
    if unknown_types:
        return Unschedulable(
            f"spec.allowedGPUTypes names unknown GPU types {unknown_types}; "
            f"known types: {sorted(CANONICAL_GPU_TYPES)}",
            resolvable=False,
        )
    if spec.allowed_gpu_types and cluster_gpu_types is not None:
        present = set(cluster_gpu_types)
        if not present.intersection(spec.allowed_gpu_types):
            return Unschedulable(
                f"no node has any of the GPU types in spec.allowedGPUTypes {list(spec.allowed_gpu_types)}; "
                f"the cluster has {sorted(present) or 'no GPU nodes'}",
                resolvable=True,
            )

    priority = spec.priority or 0
    if spec.priority_class_name is not None:
        value = (priority_classes or {}).get(spec.priority_class_name)
        if value is None:
            return Unschedulable(
                f"PriorityClass {spec.priority_class_name!r} named in spec.priorityClassName does not exist",
                resolvable=True,
            )
        priority = value

    submit = parse_time(meta.get("creationTimestamp"))
    total = spec.work.total
    progress = min(max(0.0, status.progress), total)
    checkpoint = min(max(0.0, status.checkpoint_progress), progress)
    deadline = parse_time(spec.deadline) if spec.deadline is not None else None
    return Job(
        name=job_key(obj),
        submit_time=submit if submit is not None else now,
        total_work=total,
        gpus_per_replica=spec.replicas.gpus_per_replica,
        min_replicas=spec.replicas.min if spec.elastic else spec.replicas.max,
        max_replicas=spec.replicas.max,
        elastic=spec.elastic,
        model=spec.model or "",
        dataset=spec.dataset,
        batch_size=spec.batch_size,
        precision=spec.precision,
        params=(
            float(profile.model.parameters)
            if profile is not None
            else spec.model_params.parameters
            if spec.model_params
            else None
        ),
        flops_per_sample=(
            profile.train_flops_per_sample
            if profile is not None
            else spec.model_params.flops_per_sample
            if spec.model_params
            else None
        ),
        model_profile=profile,
        sequence_length=spec.sequence_length,
        sharding=spec.sharding,
        micro_batch_size=spec.micro_batch_size,
        activation_checkpointing=spec.activation_checkpointing,
        work_unit=spec.work.unit,
        progress=progress,
        checkpoint_progress=checkpoint,
        priority=priority,
        deadline=deadline,
        allowed_gpu_types=frozenset(spec.allowed_gpu_types),
        preemptible=spec.preemptible,
        queue=spec.queue,
        attained_service=max(0.0, status.attained_service),
        restarts=status.restarts,
        last_change_time=parse_time(status.last_change_time),
        user=str(meta.get("namespace", "")),
        # measured where it runs now (reset on every start/move); a waiting job has none
        observed_throughput=(
            status.observed_throughput
            if status.allocation is not None and status.observed_throughput and status.observed_throughput > 0
            else None
        ),
    )


def progress_percent(progress: float, total: float) -> float:
    """Percentage of ``total`` done, rounded down to 0.1 so 100 % means really finished."""
    if total <= 0 or not math.isfinite(progress):
        return 0.0
    return math.floor(1000.0 * min(1.0, max(0.0, progress / total))) / 10.0


# --- TrainingQueue (crds/trainingqueue.yaml) -------------------------------------------------------------


class QueueQuota(_Wire):
    """One entry of ``spec.quotas``: GPUs of ``gpuType`` (or ``*``) the queue owns, borrows and lends."""

    gpu_type: str = Field(min_length=1, max_length=63, pattern=r"^(\*|[A-Za-z0-9][A-Za-z0-9._-]*)$")
    nominal: int = Field(ge=0)
    borrowing_limit: int | None = Field(default=None, ge=0)
    lending_limit: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _lends_own(self) -> QueueQuota:
        if self.lending_limit is not None and self.lending_limit > self.nominal:
            raise ValueError("lendingLimit must be <= nominal")
        return self


class LabelSelectorRequirement(_Wire):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: tuple[str, ...] = ()


class LabelSelector(_Wire):
    """A Kubernetes label selector (``matchLabels`` and ``matchExpressions``, ANDed)."""

    match_labels: dict[str, str] = Field(default_factory=dict)
    match_expressions: tuple[LabelSelectorRequirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfy the selector (an empty selector matches everything)."""
        if any(labels.get(k) != v for k, v in self.match_labels.items()):
            return False
        for r in self.match_expressions:
            has = r.key in labels
            if r.operator == "Exists" and not has:
                return False
            if r.operator == "DoesNotExist" and has:
                return False
            if r.operator == "In" and (not has or labels[r.key] not in r.values):
                return False
            if r.operator == "NotIn" and has and labels[r.key] in r.values:
                return False
        return True


class TrainingQueueSpec(_Wire):
    """``spec`` of a TrainingQueue (see ``crds/trainingqueue.yaml``)."""

    quotas: tuple[QueueQuota, ...] = ()
    cohort: str = Field(default="", max_length=63)
    weight: float = Field(default=1.0, gt=0, allow_inf_nan=False)
    fair_share: Literal["throughput", "gpus"] = "throughput"
    namespaces: LabelSelector | None = None

    @model_validator(mode="after")
    def _consistent(self) -> TrainingQueueSpec:
        types = [q.gpu_type for q in self.quotas]
        dup = sorted({t for t in types if types.count(t) > 1})
        if dup:
            raise ValueError(f"quotas list GPU type {dup[0]} twice")
        if not self.cohort and any(q.borrowing_limit for q in self.quotas):
            raise ValueError("quotas[].borrowingLimit needs spec.cohort")
        return self


class TrainingQueueStatus(_Wire):
    """``status`` of a TrainingQueue, written by the operator each round."""

    usage: dict[str, int] = Field(default_factory=dict)
    borrowed: dict[str, int] = Field(default_factory=dict)
    usage_text: str = ""
    pending_jobs: int = 0
    admitted_jobs: int = 0
    fair_share_ratio: float | None = None
    observed_generation: int | None = None
    conditions: tuple[Condition, ...] = ()


def trainingqueue_to_spec(obj: Mapping[str, Any]) -> QueueSpec | str:
    """A TrainingQueue object as the API returns it, as the core's ``QueueSpec``; or, when its spec does not
    parse (a CRD installed without its schema), a message naming the field, for a condition."""
    name = str((obj.get("metadata") or {}).get("name") or "")
    try:
        spec = TrainingQueueSpec.model_validate(obj.get("spec") or {})
        return QueueSpec(
            name=name,
            quotas=tuple(
                Quota(q.gpu_type, q.nominal, q.borrowing_limit, q.lending_limit) for q in spec.quotas
            ),
            cohort=spec.cohort,
            weight=spec.weight,
            fair_share=FairShare(spec.fair_share),
        )
    except ValidationError as exc:
        return f"invalid spec: {_describe(exc)}"
    except ConfigError as exc:
        return f"invalid spec: {exc}"


def queue_spec_to_wire(spec: QueueSpec) -> dict[str, Any]:
    """The core ``QueueSpec`` as a TrainingQueue ``spec`` (camelCase, unset limits left out)."""
    return TrainingQueueSpec(
        quotas=tuple(
            QueueQuota(
                gpu_type=q.gpu_type,
                nominal=q.nominal,
                borrowing_limit=q.borrowing_limit,
                lending_limit=q.lending_limit,
            )
            for q in spec.quotas
        ),
        cohort=spec.cohort,
        weight=spec.weight,
        fair_share=spec.fair_share.value,
    ).model_dump(by_alias=True, exclude_none=True)
