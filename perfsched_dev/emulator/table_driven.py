"""The workload emulator loop: plays the training processes of TrainingJob pods on KWOK nodes.

It plays the workers of adopted Jobs, JobSets and TrainJobs too, where perfsched admitted them and they
declare their work (``perfsched.dev/total-work``): their pods carry the job's predictor inputs and its
admission number (``scheduler.k8s.adopt.worker_annotations``), a new admission is a new generation, and
with no operator start progress for them they resume from the checkpoint the emulator saved (their
"volume").

Each step lists the pods labelled ``perfsched.dev/job-name``, groups them into gangs (one job, its newest
``perfsched.dev/generation``), and for every gang whose pods all run: looks up the job's *true*
throughput for the GPU type and placement the gang actually got (``perfmodel.truth``, not the
predictor; the analytic scaling model for jobs the measured table cannot answer; times the node's
``perfsched.dev/emulated-speed`` label on a node that plays a slow one), advances its
progress by the emulated time that passed (wall time x ``time_scale``),
checkpoints every ``checkpoint_interval_s`` emulated seconds, and reports on every pod of the gang in the
``perfsched.dev/progress`` annotation, as a real worker would. When the work is done it writes the final
report plus ``perfsched.dev/kwok-run-duration: 0s``, so KWOK ends the pods Succeeded (exit 0).
The workers keep the worker contract: a running gang whose pods are deleted with a grace period (resize,
preemption, migration) saves a checkpoint where it stands (SIGTERM), one whose pods fail or are killed
without one (grace 0) saves nothing. A new generation (restart or resize) starts from the newest
checkpoint: ``perfsched.dev/start-progress`` on replica 0 (written by the operator from the last
checkpoint it saw) or the last checkpoint the emulator saved, whichever is further; the progress since
that checkpoint is lost. After an emulator restart, gangs resume from their own annotations.

Impure shell around the pure ``perfsched_dev.emulator.accounting``; the API is a ``WorkloadApi`` so tests
pass a fake.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from perfsched_dev.emulator import accounting
from perfsched_dev.emulator.accounting import GangProgress
from scheduler.core.errors import PerfschedError
from scheduler.core.types import WorkUnit
from scheduler.k8s import crd
from scheduler.k8s.codec import gpu_type_of_product
from scheduler.k8s.errors import ApiHealth
from scheduler.k8s.progress import ProgressReport
from scheduler.k8s.workload import WorkerPod
from scheduler.names import (
    ANNOTATION_BATCH_SIZE,
    ANNOTATION_DATASET,
    ANNOTATION_KWOK_RUN_DURATION,
    ANNOTATION_MODEL,
    ANNOTATION_PRECISION,
    ANNOTATION_PROGRESS,
    ANNOTATION_TOTAL_WORK,
    LABEL_EMULATED_SPEED,
    LABEL_EXEC_NODE,
    LABEL_GPU_PRODUCT,
    LABEL_INTERCONNECT,
    LABEL_NETWORK_GBPS,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ThroughputQuery:
    """One gang's job and placement: what its true throughput depends on.

    ``interconnect``/``network_gbps`` describe the slowest link (PCIe if any node is PCIe-only, the
    smallest network bandwidth); the measured truth's cross-node answers scale with ``network_gbps``, the
    analytic fallback uses both.
    """

    model: str
    dataset: str
    batch_size: int
    precision: str
    params: float | None
    flops_per_sample: float | None
    gpu_type: str
    num_gpus: int
    num_nodes: int
    unit: WorkUnit
    interconnect: str = "nvlink"
    network_gbps: float = 100.0


#: A query -> work units per second of the whole gang, or None when unknown.
ThroughputFn = Callable[[ThroughputQuery], float | None]


class WorkloadApi(Protocol):
    """What the emulator needs from the API (``scheduler.k8s.workload.KubeWorkload`` in production)."""

    def list_job_pods(self, namespace: str = "") -> list[WorkerPod]: ...

    def list_adopted_pods(self, namespace: str = "") -> list[WorkerPod]: ...

    def training_job(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def node_labels(self, name: str) -> Mapping[str, str]: ...

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None: ...


@dataclass(frozen=True, slots=True)
class EmulatorConfig:
    """Emulator knobs (``perfsched emulate`` options / ``PERFSCHED_EMULATOR_*`` settings).

    ``time_scale``: emulated seconds per wall-clock second (60 = one hour of training per minute).
    ``checkpoint_interval_s``: emulated seconds between checkpoints. ``report_interval_s``: wall seconds
    between annotation updates of a running gang. ``tick_s``: wall seconds between steps.
    """

    time_scale: float = 1.0
    checkpoint_interval_s: float = 300.0
    report_interval_s: float = 2.0
    tick_s: float = 1.0
    namespace: str = ""

    def __post_init__(self) -> None:
        for name in ("time_scale", "report_interval_s", "tick_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.checkpoint_interval_s < 0:
            raise ValueError(f"checkpoint_interval_s must be >= 0, got {self.checkpoint_interval_s}")


def ground_truth_throughput() -> ThroughputFn:
    """The real ``ThroughputFn``: measured ``perfmodel.truth.GroundTruth``, else the analytic model.

    GroundTruth answers for the models and datasets of its measured table. A job it cannot answer
    (``modelParams`` only, or a zoo model never measured) runs at the analytic scaling model's pace
    (``perfmodel.features.scaling_time``: FLOPs, weight traffic and ring all-reduce on the placement),
    so every admitted job finishes; such jobs are logged once.
    """
    from perfmodel.features import HardwareFeatures, JobFeatures, resolve, scaling_time
    from perfmodel.truth import GroundTruth

    truth = GroundTruth.load()

    def measured(q: ThroughputQuery) -> float | None:
        if not q.model:
            return None
        gbps = q.network_gbps if q.num_nodes > 1 else None
        if q.unit is WorkUnit.SAMPLES:
            return truth.samples_per_s(
                q.model, q.batch_size, q.gpu_type, q.num_gpus, q.num_nodes, q.dataset, network_gbps=gbps
            )
        return truth.throughput(
            q.model, q.batch_size, q.gpu_type, q.num_gpus, q.num_nodes, q.dataset, network_gbps=gbps
        )

    def analytic(q: ThroughputQuery) -> float | None:
        job = JobFeatures(
            model=q.model,
            dataset=q.dataset,
            batch_size=q.batch_size,
            precision=q.precision,
            params=q.params,
            flops_per_sample=q.flops_per_sample,
        )
        hw = HardwareFeatures(
            gpu_type=q.gpu_type,
            num_gpus=q.num_gpus,
            num_nodes=q.num_nodes,
            interconnect=q.interconnect,
            network_gbps=q.network_gbps,
        )
        seconds = scaling_time(resolve(job, hw))
        if seconds <= 0:
            return None
        its = 1.0 / seconds
        return its * q.batch_size if q.unit is WorkUnit.SAMPLES else its

    def fn(q: ThroughputQuery) -> float | None:
        try:
            rate = measured(q)
        except ValueError as exc:  # InvalidInputError: a shape GroundTruth refuses
            log.warning("no measured throughput for %s on %d x %s: %s", q.model, q.num_gpus, q.gpu_type, exc)
            rate = None
        if rate is not None:
            return rate
        try:
            return analytic(q)
        except ValueError as exc:
            log.warning("no analytic throughput for %r on %d x %s: %s", q.model, q.num_gpus, q.gpu_type, exc)
            return None

    return fn


@dataclass(frozen=True, slots=True)
class _Inputs:
    """What a gang's workers train (a TrainingJob's spec, or an adopted job's worker annotations)."""

    model: str
    dataset: str
    batch_size: int
    precision: str
    params: float | None
    flops_per_sample: float | None
    total_work: float
    unit: WorkUnit
    gpus_per_replica: int


@dataclass
class _Tracked:
    state: GangProgress
    last_wall: float | None
    last_report: float = 0.0
    reported_checkpoint: float = -1.0
    finished_reported: bool = False
    last_seen: float = 0.0
    #: the generation got SIGTERM (or failed): it makes no more progress
    terminated: bool = False


@dataclass
class StepResult:
    """What one step did, by job key (``namespace/name``): for logs and tests."""

    advanced: dict[str, GangProgress] = field(default_factory=dict)
    finished: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    unknown_throughput: list[str] = field(default_factory=list)
    #: gangs that got SIGTERM and saved a checkpoint in this step
    checkpointed: list[str] = field(default_factory=list)


def _float(raw: str | None, default: float = 100.0) -> float:
    try:
        value = float(raw) if raw else default
    except ValueError:
        return default
    return value if value > 0 else default


def _generation_key(gen: str) -> tuple[int, str]:
    try:
        return (int(gen), gen)
    except ValueError:
        return (-1, gen)


class Emulator:
    """Runs the step loop; ``step()`` is one pass (tests call it with a fake clock)."""

    def __init__(
        self,
        api: WorkloadApi,
        throughput: ThroughputFn,
        config: EmulatorConfig = EmulatorConfig(),
        clock: Callable[[], float] = time.time,
        health: ApiHealth | None = None,
    ) -> None:
        self.api = api
        self.throughput = throughput
        self.config = config
        self.clock = clock
        self._jobs: dict[str, _Tracked] = {}
        self._warned: set[str] = set()
        #: whether the API server answers, as this emulator sees it (outage log and metric)
        self.health = health or ApiHealth("emulator")

    def run(self, stop: threading.Event) -> None:
        """Step every ``tick_s`` until ``stop`` is set; API errors are logged and retried next tick.

        An API server outage of any length is survived: the gangs' progress is kept in memory, the
        outage is logged once (``self.health``) and counted in ``perfsched_api_unavailable_seconds_total``,
        and when the server is back the next step lists the pods afresh and reports the progress the
        gangs made meanwhile (the emulated workers kept training, as real ones would).
        """
        while not stop.is_set():
            try:
                self.step()
            except PerfschedError as exc:
                if not self.health.failed(exc):
                    log.warning("emulator step failed, retrying: %s", exc)
            else:
                self.health.ok()
            stop.wait(self.config.tick_s)

    def step(self) -> StepResult:
        now = self.clock()
        result = StepResult()
        gangs: dict[str, list[WorkerPod]] = defaultdict(list)
        listed: dict[str, list[WorkerPod]] = defaultdict(list)
        ns = self.config.namespace
        pods = [*self.api.list_job_pods(ns), *self.api.list_adopted_pods(ns)]
        for pod in pods:
            if not pod.info.job or self._on_exec_node(pod):
                continue
            listed[pod.info.job].append(pod)
            if not pod.deleting and not pod.info.terminal:
                gangs[pod.info.job].append(pod)
        for job, tracked in self._jobs.items():
            self._maybe_terminated(job, tracked, listed.get(job, []), result)
        for job, pods in gangs.items():
            newest = max((p.info.generation for p in pods), key=_generation_key)
            gang = sorted(
                (p for p in pods if p.info.generation == newest),
                key=lambda p: (
                    p.info.replica_index if p.info.replica_index is not None else 1 << 30,
                    p.info.name,
                ),
            )
            self._step_gang(job, newest, gang, now, result)
        # forget jobs not seen for an hour (their checkpoints are on the TrainingJob by then)
        for job in [j for j, t in self._jobs.items() if now - t.last_seen > 3600]:
            del self._jobs[job]
        return result

    def _maybe_terminated(
        self, job: str, tracked: _Tracked, pods: Sequence[WorkerPod], out: StepResult
    ) -> None:
        """Play the workers' SIGTERM handler: a running gang whose pods are being deleted with a grace
        period (or were removed before this step saw them: KWOK removes a deleted pod at once) saves a
        checkpoint where it stands and reports it on the pods that are still there. A gang whose pods
        failed, or were deleted with no grace period (SIGKILL), saves nothing."""
        state = tracked.state
        if tracked.last_wall is None or state.done or tracked.terminated:
            return
        gen = [p for p in pods if p.info.generation == state.generation]
        if any(not p.deleting and not p.info.terminal for p in gen):
            return  # still running (or a replica is not running yet: the gang is not training)
        if any(p.info.phase == "Failed" for p in gen):
            tracked.terminated = True
            return
        deleting = [p for p in gen if p.deleting and not p.info.terminal]
        if gen and not deleting:
            return  # ended by itself (Succeeded): nothing to stop
        if any(p.deletion_grace_s == 0 for p in deleting):
            tracked.terminated = True  # SIGKILL: no checkpoint
            return
        tracked.state = accounting.terminate(state)
        tracked.terminated = True
        tracked.last_wall = None
        out.checkpointed.append(job)
        log.info(
            "gang %s generation %s got SIGTERM: checkpoint at %.1f", job, state.generation, state.progress,
            extra={"job": job, "generation": state.generation},
        )  # fmt: skip
        report = ProgressReport(tracked.state.progress, tracked.state.checkpoint, 0.0, self.clock())
        for pod in deleting:
            try:  # best effort: the pod may be gone already (its checkpoint is in the "volume" anyway)
                self.api.annotate_pod(
                    pod.info.namespace, pod.info.name, {ANNOTATION_PROGRESS: report.to_annotation()}
                )
            except PerfschedError as exc:
                log.debug("could not report the SIGTERM checkpoint: %s", exc)

    def _on_exec_node(self, pod: WorkerPod) -> bool:
        # pods of exec nodes are real processes (perfsched_dev.emulator.exec): they report for themselves
        node = pod.info.node_name
        return bool(node) and self.api.node_labels(node).get(LABEL_EXEC_NODE) == "true"

    def _step_gang(
        self, job: str, generation: str, gang: Sequence[WorkerPod], now: float, out: StepResult
    ) -> None:
        tracked = self._jobs.get(job)
        if tracked is not None:
            tracked.last_seen = now
        if any(p.info.phase != "Running" or not p.info.node_name for p in gang):
            # a gang trains only when every worker runs (collective init blocks until all join)
            out.waiting.append(job)
            if tracked is not None and tracked.state.generation == generation:
                tracked.last_wall = None
            return
        spec = self._inputs(job, gang)
        if spec is None:
            return
        total = spec.total_work
        if tracked is None or tracked.state.generation != generation:
            tracked = self._begin(job, generation, gang, total, tracked, now)
        else:
            rate = self._gang_throughput(job, spec, gang, out)
            if tracked.last_wall is not None:
                dt = (now - tracked.last_wall) * self.config.time_scale
                tracked.state = accounting.advance(tracked.state, rate, dt, self.config.checkpoint_interval_s)
            tracked.last_wall = now
        out.advanced[job] = tracked.state
        self._report(job, tracked, gang, now, out)

    def _begin(
        self,
        job: str,
        generation: str,
        gang: Sequence[WorkerPod],
        total: float,
        previous: _Tracked | None,
        now: float,
    ) -> _Tracked:
        leader = gang[0]
        if leader.report is not None:
            # the workers of this generation already report: the emulator restarted, they did not
            state = accounting.resume(generation, total, leader.report.progress, leader.report.checkpoint)
        else:
            start_at = accounting.restart_point(previous.state if previous else None, leader.start_progress)
            state = accounting.start(generation, total, start_at)
        log.info(
            "gang %s generation %s starts at %.1f of %.1f", job, generation, state.progress, total,
            extra={"job": job, "generation": generation},
        )  # fmt: skip
        tracked = _Tracked(state=state, last_wall=now, last_seen=now)
        self._jobs[job] = tracked
        return tracked

    def _inputs(self, job: str, gang: Sequence[WorkerPod]) -> _Inputs | None:
        """What the gang's workers train: from the TrainingJob, or, for an adopted job's pods, from the
        annotations perfsched wrote on them (``scheduler.k8s.adopt.worker_annotations``); None (logged
        once) when there is nothing to emulate."""
        namespace, name = job.split("/", 1)
        if ":" in name:  # an adopted job (``scheduler.k8s.workload.adopted_worker``)
            ann = gang[0].annotations
            total = _float(ann.get(ANNOTATION_TOTAL_WORK), 0.0)
            if total <= 0:
                return None  # it declares no work: its pods run as their own spec says
            return _Inputs(
                model=ann.get(ANNOTATION_MODEL, ""),
                dataset=ann.get(ANNOTATION_DATASET, ""),
                batch_size=int(_float(ann.get(ANNOTATION_BATCH_SIZE), 1.0)),
                precision=ann.get(ANNOTATION_PRECISION, "fp32"),
                params=None,
                flops_per_sample=None,
                total_work=total,
                unit=WorkUnit.ITERATIONS,
                gpus_per_replica=max(1, gang[0].info.gpus),
            )
        obj = self.api.training_job(namespace, name)
        if obj is None:
            self._warn_once(job, "no TrainingJob %s for running pods; not emulating them", job)
            return None
        spec = crd.parse_spec(obj)
        if not isinstance(spec, crd.TrainingJobSpec):
            self._warn_once(job, "TrainingJob %s has an invalid spec (%s); not emulating it", job, spec)
            return None
        return _Inputs(
            model=spec.model or "",
            dataset=spec.dataset,
            batch_size=spec.batch_size,
            precision=spec.precision,
            params=spec.model_params.parameters if spec.model_params else None,
            flops_per_sample=spec.model_params.flops_per_sample if spec.model_params else None,
            total_work=spec.work.total,
            unit=spec.work.unit,
            gpus_per_replica=spec.replicas.gpus_per_replica,
        )

    def _gang_throughput(self, job: str, spec: _Inputs, gang: Sequence[WorkerPod], out: StepResult) -> float:
        nodes = {p.info.node_name for p in gang}
        gpus = sum(p.info.gpus for p in gang) or len(gang) * spec.gpus_per_replica
        labels = {n: self.api.node_labels(n) for n in nodes}
        # a node whose GPUs are DRA devices has no product label: the type the operator decided, which
        # it wrote on the pods, is the type of the devices kube-scheduler allocated there
        decided = {p.info.node_name: p.info.gpu_type for p in gang if p.info.gpu_type}
        types = {
            gpu_type_of_product(lab.get(LABEL_GPU_PRODUCT, "")) or decided.get(n, "")
            for n, lab in labels.items()
        }
        pcie = any(lab.get(LABEL_INTERCONNECT) == "pcie" for lab in labels.values())
        gbps = min((_float(lab.get(LABEL_NETWORK_GBPS)) for lab in labels.values()), default=100.0)
        rates: list[float] = []
        for gpu_type in sorted(types):
            query = ThroughputQuery(
                model=spec.model,
                dataset=spec.dataset,
                batch_size=spec.batch_size,
                precision=spec.precision,
                params=spec.params,
                flops_per_sample=spec.flops_per_sample,
                gpu_type=gpu_type,
                num_gpus=gpus,
                num_nodes=min(len(nodes), gpus),
                unit=spec.unit,
                interconnect="pcie" if pcie else "nvlink",
                network_gbps=gbps,
            )
            rate = self.throughput(query) if gpu_type else None
            if rate is None or rate <= 0:
                out.unknown_throughput.append(job)
                self._warn_once(
                    f"{job}/{gpu_type}",
                    "no true throughput for %s (model %r, batch %d) on %d x %s over %d nodes: no progress",
                    job, spec.model, spec.batch_size, gpus, gpu_type or "<unlabelled node>", len(nodes),
                )  # fmt: skip
                return 0.0
            rates.append(rate)
        # synchronous data parallelism runs at the pace of the slowest GPU type, and of the slowest node
        # (``perfsched.dev/emulated-speed``: a slow node played on purpose)
        return min(rates) * min(self._speed(n, lab) for n, lab in labels.items())

    def _speed(self, node: str, labels: Mapping[str, str]) -> float:
        raw = labels.get(LABEL_EMULATED_SPEED)
        if raw is None:
            return 1.0
        try:
            speed = float(raw)
        except ValueError:
            speed = 0.0
        if not 0.0 < speed <= 1.0:
            self._warn_once(
                f"speed/{node}", "node %s: %s=%r is not a number in (0, 1]; running it at full speed",
                node, LABEL_EMULATED_SPEED, raw,
            )  # fmt: skip
            return 1.0
        return speed

    def _report(
        self, job: str, tracked: _Tracked, gang: Sequence[WorkerPod], now: float, out: StepResult
    ) -> None:
        state = tracked.state
        due = now - tracked.last_report >= self.config.report_interval_s
        if state.done and tracked.finished_reported:
            return
        if not (due or state.done or state.checkpoint != tracked.reported_checkpoint):
            return
        report = ProgressReport(state.progress, state.checkpoint, state.throughput, now)
        annotations: dict[str, str | None] = {ANNOTATION_PROGRESS: report.to_annotation()}
        if state.done:
            annotations[ANNOTATION_KWOK_RUN_DURATION] = "0s"
            out.finished.append(job)
            log.info("gang %s finished its %.1f work units", job, state.total_work, extra={"job": job})
        for pod in gang:
            self.api.annotate_pod(pod.info.namespace, pod.info.name, annotations)
        tracked.last_report = now
        tracked.reported_checkpoint = state.checkpoint
        tracked.finished_reported = state.done

    def _warn_once(self, key: str, msg: str, *args: object) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(msg, *args)
