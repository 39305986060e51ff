"""``perfsched demo --real``: TrainingJobs that really train (PyTorch on CPU), with a resize and a preemption.

Impure shell, like ``perfsched_dev.demo.emulated``: a local control plane (no KWOK nodes), ``perfsched
extender``, ``perfsched operator`` (policy ``srsf:heterogeneity=agnostic``: with one GPU type it differs
from aware ``srsf`` only in sizing elastic jobs by predicted gain, and the predictor gives resnet18 /
cifar10 at global batch 32 nothing from a second T4, so aware SRSF would start ``alpha`` on one GPU and
there would be no resize to show) and ``perfsched emulate --exec``, which runs the pods
of one exec node (2 "T4 GPUs"; the processes use this machine's CPU) as processes of the example
trainer (``examples/trainer/train.py``, ``resnet-tiny`` on synthetic data). The script:

1. ``alpha`` (elastic, 1..2 replicas, 1,000 steps: long enough to be mid-run when ``gamma`` comes, also on
   a fast machine) starts with 2 replicas, one per GPU;
2. ``beta`` (1 GPU, higher priority, 60 steps) arrives: ``alpha`` is resized to 1 replica through a
   checkpoint (world size 2 -> 1, the same global batch) and ``beta`` trains beside it;
3. ``gamma`` (one 2-GPU replica, highest priority, 60 steps) arrives: it needs the whole node, so
   ``alpha`` is preempted; it waits, then resumes from its checkpoint and finishes.

What the policy does is its own decision; the report says what happened: each job's phases, counts,
observed vs predicted throughput, and for every restart of a job the step it resumed from and the loss
just before and just after (from the trainer's ``metrics.jsonl``). ``build_real_report`` and
``restarts`` are pure.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scheduler.core.errors import PerfschedError
from scheduler.names import API_VERSION, TRAININGJOB_KIND

if TYPE_CHECKING:
    from perfsched_dev.devcluster.cluster import DevCluster
    from perfsched_dev.k8s.demoapi import DemoApi

log = logging.getLogger(__name__)

NAMESPACE = "perfsched-real"
REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "examples" / "trainer" / "train.py"
GPU_PRODUCT = "Tesla-T4"


class RealDemoError(PerfschedError):
    """The real-training demo could not run (the message says which step and what to do)."""


@dataclass(frozen=True, slots=True)
class JobScript:
    """One job of the script: when it is submitted and what it is."""

    name: str
    steps: int
    replicas: tuple[int, int]
    gpus_per_replica: int
    priority: int
    #: submit when this job has made this much progress ("" = at once)
    after_job: str = ""
    after_progress: float = 0.0


SCRIPT = (
    JobScript("alpha", steps=1000, replicas=(1, 2), gpus_per_replica=1, priority=0),
    JobScript("beta", steps=60, replicas=(1, 1), gpus_per_replica=1, priority=5, after_job="alpha",
              after_progress=60),
    JobScript("gamma", steps=60, replicas=(1, 1), gpus_per_replica=2, priority=10, after_job="alpha",
              after_progress=180),
)  # fmt: skip


def manifest(job: JobScript, python: str, ckpt_dir: Path, seed: int = 0) -> dict[str, Any]:
    """The TrainingJob of ``job``: the example trainer under ``python``, checkpoints in ``ckpt_dir``."""
    lo, hi = job.replicas
    return {
        "apiVersion": API_VERSION,
        "kind": TRAININGJOB_KIND,
        "metadata": {"name": job.name, "namespace": NAMESPACE},
        "spec": {
            "model": "resnet18",
            "dataset": "cifar10",
            "batchSize": 32,
            "work": {"iterations": job.steps},
            "elastic": hi > lo,
            "replicas": {"min": lo, "max": hi, "gpusPerReplica": job.gpus_per_replica},
            "allowedGPUTypes": ["T4"],
            "priority": job.priority,
            "preemptible": True,
            "checkpointGraceSeconds": 30,
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "worker",
                            "image": "registry.example.com/perfsched-trainer:0.1",
                            "command": [python, str(TRAIN)],
                            "args": [
                                "--model",
                                "resnet-tiny",
                                "--global-batch-size",
                                "32",
                                "--checkpoint-dir",
                                "/ckpt",
                                "--checkpoint-every",
                                "25",
                                "--log-every",
                                "25",
                                "--seed",
                                str(seed),
                            ],
                            "env": [{"name": "PERFSCHED_WORKER_REPORT_INTERVAL_SECONDS", "value": "1"}],
                            "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt"}],
                        }
                    ],
                    "volumes": [{"name": "ckpt", "hostPath": {"path": str(ckpt_dir), "type": "Directory"}}],
                }
            },
        },
    }


# --- the report (pure) ------------------------------------------------------------------------------------


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


@dataclass(frozen=True, slots=True)
class Restart:
    """A job's worker started again: from which step, at which world sizes, the loss around it."""

    resumed_from: int
    world_before: int
    world_after: int
    loss_before: float | None
    loss_after: float | None


def restarts(points: Sequence[Mapping[str, Any]], window: int = 5) -> list[Restart]:
    """The restarts in a trainer's ``metrics.jsonl`` lines (in file order; ``run`` changes at each).

    A new run resumes from the step before its first one (its checkpoint). The loss before is the mean
    over the ``window`` steps up to that checkpoint as the earlier runs logged them, the loss after the
    mean over the new run's first ``window`` steps (one step's loss is noisy: 32 samples). Steps an old
    run made after the checkpoint were lost and are trained again.
    """
    runs: list[list[Mapping[str, Any]]] = []
    for p in points:
        if not runs or p.get("run") != runs[-1][-1].get("run"):
            runs.append([])
        runs[-1].append(p)
    out: list[Restart] = []
    for i in range(1, len(runs)):
        first = runs[i][0]
        resumed = int(first["step"]) - 1
        # the latest record of each step up to the checkpoint, from the runs before this one
        latest: dict[int, Mapping[str, Any]] = {}
        for run in runs[:i]:
            for q in run:
                if int(q["step"]) <= resumed:
                    latest[int(q["step"])] = q
        before = [latest[s] for s in sorted(latest)[-window:]]
        after = runs[i][:window]
        out.append(
            Restart(
                resumed_from=resumed,
                world_before=int(before[-1]["world_size"]) if before else 0,
                world_after=int(first["world_size"]),
                loss_before=_mean([float(q["loss"]) for q in before]),
                loss_after=_mean([float(q["loss"]) for q in after]),
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class JobReport:
    name: str
    phase: str
    progress: float
    total: float
    preemptions: int
    resizes: int
    restarts: int
    lost_work: float
    first_loss: float | None
    final_loss: float | None
    restart_log: tuple[Restart, ...]
    predicted: float | None  # mean predicted iterations/s while running (T4, per the predictor)
    observed: float | None  # mean observed iterations/s while running (this machine's CPU)


@dataclass(frozen=True, slots=True)
class RealReport:
    jobs: tuple[JobReport, ...]
    elapsed_s: float

    @property
    def preemptions(self) -> int:
        return sum(j.preemptions for j in self.jobs)

    @property
    def resizes(self) -> int:
        return sum(j.resizes for j in self.jobs)


def build_real_report(
    tjs: Sequence[Mapping[str, Any]],
    curves: Mapping[str, Sequence[Mapping[str, Any]]],
    throughput: Mapping[str, Sequence[tuple[float, float]]],
    elapsed_s: float,
) -> RealReport:
    """The report from the final TrainingJobs, each job's loss curve and (predicted, observed) samples."""
    out = []
    for tj in sorted(tjs, key=lambda t: str(t["metadata"]["name"])):
        name = str(tj["metadata"]["name"])
        st = tj.get("status") or {}
        pts = list(curves.get(name, ()))
        samples = list(throughput.get(name, ()))
        out.append(
            JobReport(
                name=name,
                phase=str(st.get("phase", "")),
                progress=float(st.get("progress", 0)),
                total=float(((tj.get("spec") or {}).get("work") or {}).get("iterations", 0)),
                preemptions=int(st.get("preemptions", 0)),
                resizes=int(st.get("resizes", 0)),
                restarts=int(st.get("restarts", 0)),
                lost_work=float(st.get("lostWork", 0)),
                first_loss=float(pts[0]["loss"]) if pts else None,
                final_loss=float(pts[-1]["loss"]) if pts else None,
                restart_log=tuple(restarts(pts)),
                predicted=_mean([p for p, _ in samples]),
                observed=_mean([o for _, o in samples]),
            )
        )
    return RealReport(tuple(out), elapsed_s)


def read_curve(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a line cut short by a kill
    return out


# --- the run ---------------------------------------------------------------------------------------------


@dataclass
class RealDemoOptions:
    state_dir: Path
    keep: bool = False
    timeout_s: float = 290.0
    poll_s: float = 1.0
    python: str = ""
    events: list[str] = field(default_factory=list)


def run_real_demo(
    options: RealDemoOptions, say: Callable[[str], None] = print
) -> tuple[RealReport, dict[str, Any]]:
    """Run the script (see the module docstring); returns the report and where the files are."""
    from perfsched_dev.devcluster.cluster import DevCluster
    from perfsched_dev.devcluster.tools import DevClusterError, find_tools
    from perfsched_dev.emulator.exec import find_torch_python
    from perfsched_dev.k8s.demoapi import DemoApi
    from perfsched_dev.k8s.execapi import KubeExec, exec_node_manifest
    from scheduler.core.types import Node
    from scheduler.k8s import connect

    python = options.python or find_torch_python()
    if not python:
        raise RealDemoError(
            "no Python with PyTorch found: install Debian's python3-torch (`bash e2e/install-tools.sh` "
            "does) or set PERFSCHED_TRAINER_PYTHON"
        )
    try:
        tools = find_tools()
    except DevClusterError as exc:
        raise RealDemoError(f"finding the control-plane binaries failed: {exc} (run `make tools`)") from exc
    dc = DevCluster(options.state_dir, tools)
    work = options.state_dir.parent / f"{options.state_dir.name}-files"
    exec_dir, ckpt_root = work / "exec", work / "checkpoints"
    where: dict[str, Any] = {"exec_dir": str(exec_dir), "checkpoints": str(ckpt_root)}
    # a fresh start: checkpoints of an earlier run would be resumed (and finish the jobs at once)
    shutil.rmtree(work, ignore_errors=True)
    started = time.monotonic()
    try:
        kubeconfig = _start_real_cluster(dc, exec_dir, say)
        where.update(kubeconfig=kubeconfig, logs=str(dc.log_dir))
        client = connect.api_client(kubeconfig)
        nodes = [Node("exec-t4-0", "T4", 2, GPU_PRODUCT, rack="r0")]
        KubeExec(client).create_nodes([exec_node_manifest(n) for n in nodes])
        api = DemoApi(kubeconfig, NAMESPACE)
        api.ensure_namespace()
        say(
            "exec node exec-t4-0 (2 GPUs): its pods run as real processes of "
            f"examples/trainer/train.py under {python}"
        )
        tjs, throughput = _play_script(api, options, python, ckpt_root, started, say)
        curves = {job.name: read_curve(ckpt_root / job.name / "metrics.jsonl") for job in SCRIPT}
        report = build_real_report(tjs, curves, throughput, time.monotonic() - started)
        client.close()
        return report, where
    finally:
        if options.keep:
            say(
                f"--keep: the cluster keeps running (`perfsched dev-cluster down --state-dir {dc.state_dir}`)"
            )
        else:
            say("cleaning up: stopping the control plane, perfsched and the trainer processes ...")
            try:
                dc.down()
            except Exception as exc:  # cleanup must not hide the real error
                say(f"cleanup problem: {exc} (state in {dc.state_dir})")


def _start_real_cluster(dc: DevCluster, exec_dir: Path, say: Callable[[str], None]) -> str:
    """The control plane without KWOK nodes, perfsched's extender and operator (agnostic SRSF, short
    rounds and costs) and the exec emulator; returns the kubeconfig."""
    from perfsched_dev.devcluster.cluster import UpOptions, perfsched_components
    from perfsched_dev.devcluster.process import free_ports
    from perfsched_dev.devcluster.tools import DevClusterError

    extender_port, operator_port = free_ports(2)
    kubeconfig = str(dc.kubeconfig_path)
    extras = perfsched_components(
        kubeconfig,
        extender_port,
        operator_port,
        operator_env={
            "PERFSCHED_OPERATOR_POLICY": "srsf:heterogeneity=agnostic",
            "PERFSCHED_OPERATOR_LEASE_NAMESPACE": "default",
            "PERFSCHED_OPERATOR_ROUND_PERIOD_SECONDS": "1",
            "PERFSCHED_OPERATOR_MIN_ROUND_INTERVAL_SECONDS": "0.2",
            "PERFSCHED_OPERATOR_MIN_RESIZE_INTERVAL_SECONDS": "5",
            "PERFSCHED_OPERATOR_RESTART_COST_SECONDS": "2",
            "PERFSCHED_OPERATOR_RESIZE_COST_SECONDS": "2",
        },
        emulator_args=("--exec", "--exec-dir", str(exec_dir)),
        emulator_name="perfsched-exec",
    )
    say("starting the local control plane, perfsched and the exec emulator (no KWOK nodes) ...")
    try:
        state = dc.up(UpOptions(nodes=(), extender_port=extender_port, extras=extras))
    except DevClusterError as exc:
        raise RealDemoError(f"starting the local control plane failed: {exc}") from exc
    return str(state.kubeconfig)


def _play_script(
    api: DemoApi,
    options: RealDemoOptions,
    python: str,
    ckpt_root: Path,
    started: float,
    say: Callable[[str], None],
) -> tuple[list[dict[str, Any]], dict[str, list[tuple[float, float]]]]:
    """Submit each job of ``SCRIPT`` when its anchor job got far enough, and watch until all ended or the
    timeout; returns the last TrainingJobs seen and the (predicted, observed) throughput samples."""
    pending = list(SCRIPT)
    throughput: dict[str, list[tuple[float, float]]] = {}
    seen: dict[str, str] = {}
    deadline = started + options.timeout_s
    tjs: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        tjs = api.list_trainingjobs()
        by_name = {str(t["metadata"]["name"]): t for t in tjs}
        for job in list(pending):
            anchor = (by_name.get(job.after_job) or {}).get("status") or {}
            if job.after_job and float(anchor.get("progress", 0)) < job.after_progress:
                continue
            ckpt = ckpt_root / job.name
            ckpt.mkdir(parents=True, exist_ok=True)
            api.create_trainingjob(manifest(job, python, ckpt, seed=SCRIPT.index(job)))
            say(f"{time.monotonic() - started:5.0f} s  submitted {job.name} ({job.steps} steps, "
                f"{job.replicas[1]} x {job.gpus_per_replica} GPU, priority {job.priority})")  # fmt: skip
            pending.remove(job)
        for name, tj in by_name.items():
            st = tj.get("status") or {}
            line = f"{st.get('phase', '')}: {st.get('message', '')}"
            if seen.get(name) != line and st.get("phase"):
                seen[name] = line
                say(f"{time.monotonic() - started:5.0f} s  {name} {line}"[:200])
            pred, obs = st.get("predictedThroughput"), st.get("observedThroughput")
            if st.get("phase") == "Running" and pred and obs:
                throughput.setdefault(name, []).append((float(pred), float(obs)))
        if (
            not pending
            and tjs
            and all((t.get("status") or {}).get("phase") in ("Succeeded", "Failed") for t in tjs)
        ):
            break
        time.sleep(options.poll_s)
    return tjs, throughput


def default_state_dir() -> Path:
    cache = os.environ.get("PERFSCHED_CACHE") or str(Path.home() / ".cache" / "perfsched")
    return Path(cache).expanduser() / "demo-real-cluster"
