"""Run the demo: bring up a local control plane with perfsched, submit, watch, report, clean up.

Impure shell over public entry points: ``perfsched_dev.devcluster.DevCluster`` starts etcd, kube-apiserver,
the controller manager, kube-scheduler (profile ``perfsched`` calling the extender) and KWOK with the
demo's fake GPU nodes, plus ``perfsched extender``, ``perfsched operator`` and ``perfsched emulate`` as
processes (the same commands the container image runs). Every step has a name; a failing step raises
``DemoError`` naming it, and the control plane is always torn down (also on Ctrl-C) unless ``keep``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfsched_dev.demo import report as rep
from perfsched_dev.demo.job_mix import NAMESPACE, DemoShape, pick_jobs, trainingjob_manifest
from scheduler.core.errors import ConfigError, PerfschedError

if TYPE_CHECKING:
    from perfsched_dev.devcluster.cluster import DevCluster
    from scheduler.core.types import Job, Node
    from scheduler.sim.cluster import ClusterSpec

log = logging.getLogger(__name__)


class DemoError(PerfschedError):
    """A demo step failed; the message says which step and what to look at."""


@dataclass(frozen=True, slots=True)
class DemoOptions:
    """What ``perfsched demo`` runs."""

    duration_s: float = 180.0
    #: 40 jobs on one node per pool (4 K80 + 4 P100 + 4 V100): queues form for the V100s, and the jobs
    #: gain from 0.7x to 9x on a V100 over a K80, so which job gets the fast GPUs matters
    jobs: int = 40
    policy: str = ""
    cluster: str = "gavel-heterogeneous"
    nodes_per_pool: int = 1
    seed: int = 0
    time_scale: float = 1.0
    elastic: bool = False
    keep: bool = False
    state_dir: Path | None = None
    poll_s: float = 1.0

    def __post_init__(self) -> None:
        if self.duration_s <= 0:
            raise ConfigError(f"--duration must be > 0 seconds, got {self.duration_s:g}")
        if self.jobs < 1:
            raise ConfigError(f"--jobs must be >= 1, got {self.jobs}")
        if self.nodes_per_pool < 1:
            raise ConfigError(f"--nodes-per-pool must be >= 1, got {self.nodes_per_pool}")
        if self.time_scale <= 0:
            raise ConfigError(f"--time-scale must be > 0, got {self.time_scale:g}")

    def shape(self) -> DemoShape:
        # arrivals in the first third of the run, the median job a fifth of it (15 s .. half the run)
        half = max(15.0, self.duration_s / 2)
        return DemoShape(
            jobs=self.jobs,
            arrival_window_s=self.duration_s / 3,
            target_median_s=min(half, max(15.0, self.duration_s / 5)),
            min_run_s=min(10.0, half),
            max_run_s=half,
        )


@dataclass
class Watch:
    """What the runner saw while the jobs ran."""

    started: float = 0.0
    submitted: int = 0
    tjs: list[dict[str, Any]] = field(default_factory=list)
    events: list[tuple[str, str, str, str]] = field(default_factory=list)
    gpu_samples: list[tuple[float, float]] = field(default_factory=list)
    error_samples: list[float] = field(default_factory=list)


@contextmanager
def step(name: str, hint: str = "") -> Iterator[None]:
    """Run one named demo step; any error becomes a ``DemoError`` saying which step failed."""
    try:
        yield
    except (DemoError, ConfigError, KeyboardInterrupt):
        raise  # a user error (bad flag, spec or trace) keeps its own message and exits 2
    except Exception as exc:
        raise DemoError(f"{name} failed: {exc}" + (f"\n  {hint}" if hint else "")) from exc


def demo_state_dir(options: DemoOptions) -> Path:
    if options.state_dir is not None:
        return options.state_dir
    cache = os.environ.get("PERFSCHED_CACHE") or str(Path.home() / ".cache" / "perfsched")
    return Path(cache).expanduser() / "demo-cluster"


def build_jobs(options: DemoOptions) -> tuple[tuple[Job, ...], ClusterSpec]:
    """The demo's jobs (as the simulator would replay them) from the shipped Philly sample, and the cluster
    spec cut to ``nodes_per_pool`` nodes per pool. Durations are calibrated on the largest pool (the first
    of equals: K80 on ``gavel-heterogeneous``), so a job runs its rescaled traced duration there."""
    from perfmodel.gpus import canonical_gpu_type
    from perfmodel.truth import GroundTruth
    from scheduler.sim.cluster import load_cluster_spec
    from scheduler.sim.trace_jobs import WorkloadOptions, build_workload
    from scheduler.sim.traces import load_trace

    spec = load_cluster_spec(options.cluster)
    spec = replace(
        spec, pools=tuple(replace(p, nodes=min(p.nodes, options.nodes_per_pool)) for p in spec.pools)
    )
    biggest = max(p.gpus_per_node * p.nodes for p in spec.pools)
    shape = replace(options.shape(), max_gpus=min(8, biggest))
    trace = load_trace("philly-10k")
    picked = pick_jobs(trace.jobs, shape)
    ref = sorted(spec.pools, key=lambda p: -p.gpus_per_node * p.nodes)[0]
    ref_type = canonical_gpu_type(ref.gpu_product) or "V100"
    workload = build_workload(
        picked,
        GroundTruth.load(),
        WorkloadOptions(
            seed=options.seed,
            reference_gpu=ref_type,
            reference_node_gpus=ref.gpus_per_node,
            reference_network_gbps=ref.network_gbps,
            elastic=options.elastic,
        ),
        max_gpus=biggest,
    )
    return workload.jobs, spec


def build_manifests(options: DemoOptions) -> tuple[list[tuple[float, dict[str, Any]]], Any]:
    """(submit offset, TrainingJob manifest) pairs from the shipped Philly sample, and the cluster spec."""
    jobs, spec = build_jobs(options)
    return [(job.submit_time, trainingjob_manifest(job)) for job in jobs], spec


def _submitter(
    api: Any,
    manifests: Sequence[tuple[float, dict[str, Any]]],
    watch: Watch,
    stop: threading.Event,
    errors: list[str],
) -> None:
    for offset, body in manifests:
        if stop.wait(max(0.0, watch.started + offset - time.monotonic())):
            return
        try:
            api.create_trainingjob(body)
            watch.submitted += 1
        except PerfschedError as exc:
            errors.append(str(exc))
            stop.set()
            return


def run_demo(
    options: DemoOptions,
    render: Callable[[Watch, DemoOptions, int], None] | None = None,
    say: Callable[[str], None] = print,
) -> tuple[rep.DemoReport, dict[str, Any]]:
    """Run the whole demo; returns the report and where things are (kubeconfig, logs, metrics URLs)."""
    from perfsched_dev.devcluster.cluster import DevCluster
    from perfsched_dev.devcluster.tools import find_tools
    from scheduler.sim.cluster import spec_to_nodes

    with step("building the workload from the shipped Philly sample"):
        manifests, spec = build_manifests(options)
    nodes = spec_to_nodes(spec)
    total_gpus = sum(n.gpus for n in nodes)
    say(
        f"workload: {len(manifests)} TrainingJobs from the Philly sample on {len(nodes)} KWOK nodes "
        f"({total_gpus} GPUs: "
        + ", ".join(f"{p.nodes * p.gpus_per_node} x {p.gpu_product}" for p in spec.pools)
        + ")"
    )
    with step("finding the control-plane binaries", "run `make tools` (or `bash e2e/install-tools.sh`)"):
        tools = find_tools()
    dc = DevCluster(demo_state_dir(options), tools)
    stop = threading.Event()
    try:
        kubeconfig, where = _start_cluster(dc, options, spec, nodes, say)
        from perfsched_dev.k8s.demoapi import DemoApi

        with step("creating the demo namespace"):
            api = DemoApi(kubeconfig, NAMESPACE)
            api.ensure_namespace()
        watch = _run_jobs(api, dc, manifests, options, total_gpus, render, stop)
        stop.set()
        where["elapsed_s"] = round(time.monotonic() - watch.started, 1)
        with step("reading the final TrainingJob statuses"):
            watch.tjs = api.list_trainingjobs()
        where.update(save_metrics(where, dc.log_dir))
        return rep.build_report(watch.tjs, watch.gpu_samples, total_gpus, watch.error_samples), where
    finally:
        stop.set()
        _clean_up(dc, options, say)


def _start_cluster(
    dc: DevCluster, options: DemoOptions, spec: ClusterSpec, nodes: Sequence[Node], say: Callable[[str], None]
) -> tuple[str, dict[str, Any]]:
    """Bring up the control plane with the demo's nodes and perfsched's extender, operator and emulator;
    returns the kubeconfig and where things are (logs, metrics URLs)."""
    from perfsched_dev.devcluster.cluster import UpOptions, perfsched_components
    from perfsched_dev.devcluster.process import free_ports
    from perfsched_dev.devcluster.tools import DevClusterError
    from scheduler.sim.cluster import node_labels

    extender_port, operator_port = free_ports(2)
    kubeconfig = str(dc.kubeconfig_path)
    operator_args = [f"--policy={options.policy}"] if options.policy else []
    extras = perfsched_components(
        kubeconfig,
        extender_port,
        operator_port,
        operator_args=operator_args,
        operator_env={
            "PERFSCHED_OPERATOR_LEASE_NAMESPACE": "default",
            "PERFSCHED_OPERATOR_ROUND_PERIOD_SECONDS": "2",
        },
        emulator_env={"PERFSCHED_EMULATOR_TIME_SCALE": f"{options.time_scale:g}"},
    )
    say("starting the local control plane and perfsched (extender, operator, emulator) ...")
    with step("starting the local control plane", f"logs: {dc.log_dir}"):
        try:
            state = dc.up(
                UpOptions(
                    nodes=nodes, node_labels=node_labels(spec), extender_port=extender_port, extras=extras
                )
            )
        except DevClusterError as exc:
            raise DemoError(f"starting the local control plane failed: {exc}") from exc
    where = {
        "kubeconfig": state.kubeconfig,
        "logs": str(dc.log_dir),
        "extender_metrics": f"http://127.0.0.1:{extender_port}/metrics",
        "operator_metrics": f"http://127.0.0.1:{operator_port}/metrics",
    }
    say(f"control plane up in {state.ready_seconds or 0:.0f} s; kubeconfig {state.kubeconfig}")
    return str(state.kubeconfig), where


def _run_jobs(
    api: Any,
    dc: DevCluster,
    manifests: Sequence[tuple[float, dict[str, Any]]],
    options: DemoOptions,
    total_gpus: int,
    render: Callable[[Watch, DemoOptions, int], None] | None,
    stop: threading.Event,
) -> Watch:
    """Submit the manifests on their schedule (a thread) and watch until every job ended or the
    duration is up, sampling GPUs in use and prediction errors, and rendering each poll."""
    watch = Watch(started=time.monotonic())
    errors: list[str] = []
    submitter = threading.Thread(target=_submitter, args=(api, manifests, watch, stop, errors), daemon=True)
    submitter.start()
    deadline = watch.started + options.duration_s
    while time.monotonic() < deadline:
        if errors:
            raise DemoError(f"submitting TrainingJobs failed: {errors[0]}")
        with step("watching the TrainingJobs", f"logs: {dc.log_dir}"):
            watch.tjs = api.list_trainingjobs()
            watch.events = api.recent_events()
        now = time.monotonic() - watch.started
        watch.gpu_samples.append((now, float(rep.gpus_in_use(watch.tjs))))
        watch.error_samples.extend(rep.prediction_errors(watch.tjs))
        _check_processes(dc)
        if render is not None:
            render(watch, options, total_gpus)
        if (
            watch.submitted == len(manifests)
            and all(rep.phase_of(tj) in ("Succeeded", "Failed") for tj in watch.tjs)
            and len(watch.tjs) == len(manifests)
        ):
            break
        time.sleep(options.poll_s)
    return watch


def _clean_up(dc: DevCluster, options: DemoOptions, say: Callable[[str], None]) -> None:
    if options.keep:
        say(
            "--keep: the cluster keeps running (stop it with "
            f"`perfsched dev-cluster down --state-dir {dc.state_dir}`)"
        )
        return
    say("cleaning up: stopping the control plane and perfsched processes ...")
    try:
        dc.down()
    except Exception as exc:  # cleanup must not hide the real error
        say(f"cleanup problem: {exc} (state in {dc.state_dir})")


def save_metrics(where: dict[str, Any], log_dir: Path) -> dict[str, str]:
    """Save a last scrape of the extender's and the operator's /metrics next to the logs (they stop soon)."""
    import httpx

    saved = {}
    for name in ("extender", "operator"):
        url = where.get(f"{name}_metrics")
        if not url:
            continue
        path = log_dir / f"{name}-metrics.prom"
        try:
            path.write_text(httpx.get(url, timeout=5).text)
            saved[f"{name}_metrics_file"] = str(path)
        except (httpx.HTTPError, OSError) as exc:
            log.warning("could not save %s metrics: %s", name, exc)
    return saved


def _check_processes(dc: Any) -> None:
    state = dc.status()
    if state is None:
        raise DemoError("the local control plane disappeared (was `perfsched dev-cluster down` run?)")
    dead = [p for p in state.processes if p not in state.running()]
    if dead:
        names = ", ".join(f"{p.name} (log {p.log_path})" for p in dead)
        raise DemoError(f"a component stopped while the demo ran: {names}")
