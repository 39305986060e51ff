"""The local control plane: start, describe and stop etcd, kube-apiserver, KCM, two kube-schedulers and KWOK.

``DevCluster(state_dir)`` owns one cluster's state directory (default ``~/.cache/perfsched/dev-cluster``):
``up`` starts every component in order, waits until each is healthy, creates the CRDs and fake GPU
nodes, and records ports, pids and log paths in ``state.json`` as it goes, so that ``down`` (from any
later process) stops exactly those pids and removes the temporary state. A failure during ``up`` stops
whatever had started and raises ``DevClusterError`` with the failing component's log tail. Two
kube-schedulers run: ``perfsched`` (profile ``perfsched``, calls the extender) and ``default-scheduler``
(no extender), because extenders apply to every profile of a process. ``restart(component)`` kills one
component (SIGKILL, as a crash; or SIGTERM) and starts it again with the command line, environment and
working directory recorded for it, then waits until it is healthy: what the chaos e2e test uses.
Impure: processes, files, HTTP.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import ssl
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from perfsched_dev.devcluster import configs
from perfsched_dev.devcluster.process import (
    ProcessRecord,
    free_ports,
    is_running,
    kill,
    spawn,
    stop,
    tail,
)
from perfsched_dev.devcluster.tools import DevClusterError, Tools, find_jobset_tools, find_tools
from scheduler.core.errors import PerfschedError
from scheduler.core.types import Node

log = logging.getLogger(__name__)

STATE_FILE = "state.json"
SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.244.0.0/16"


def default_state_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$PERFSCHED_DEV_CLUSTER_DIR`` or ``~/.cache/perfsched/dev-cluster``."""
    env = os.environ if env is None else env
    explicit = env.get("PERFSCHED_DEV_CLUSTER_DIR")
    if explicit:
        return Path(explicit).expanduser().resolve()
    cache = env.get("PERFSCHED_CACHE") or str(Path.home() / ".cache" / "perfsched")
    return Path(cache).expanduser().resolve() / "dev-cluster"


@dataclass(frozen=True, slots=True)
class ExtraComponent:
    """A process started after the control plane (extender, operator, emulator, ...).

    ``health_url``, when given, must answer 200 before ``up`` goes on. ``env`` is added to the
    component's environment, which always has ``KUBECONFIG`` pointing at the cluster.
    """

    name: str
    argv: tuple[str, ...]
    health_url: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    endpoint: str = ""


def perfsched_argv(command: str, *args: str) -> tuple[str, ...]:
    """``perfsched <command> <args>`` with this interpreter (the console script's entry point)."""
    import sys

    return (sys.executable, "-m", "scheduler.cli", command, *args)


def perfsched_components(
    kubeconfig: str,
    extender_port: int,
    operator_port: int,
    *,
    operator_args: Sequence[str] = (),
    operator_env: Mapping[str, str] | None = None,
    emulator_args: Sequence[str] = (),
    emulator_env: Mapping[str, str] | None = None,
    emulator_name: str = "perfsched-emulator",
) -> tuple[ExtraComponent, ...]:
    """perfsched's extender, operator and emulator as components of a local cluster (dev-cluster
    ``--with-perfsched``, ``perfsched demo`` and ``demo --real``): the extender on ``extender_port`` (the
    one the cluster's kube-scheduler calls), the operator's health and metrics on ``operator_port``."""
    operator_url = f"http://127.0.0.1:{operator_port}"
    return (
        ExtraComponent(
            "perfsched-extender",
            perfsched_argv(
                "extender", "--host", "127.0.0.1", "--port", str(extender_port), "--kubeconfig", kubeconfig
            ),
            health_url=f"http://127.0.0.1:{extender_port}/readyz",
        ),
        ExtraComponent(
            "perfsched-operator",
            perfsched_argv("operator", "--kubeconfig", kubeconfig, *operator_args),
            health_url=f"{operator_url}/healthz",
            env={
                "PERFSCHED_OPERATOR_METRICS_HOST": "127.0.0.1",
                "PERFSCHED_OPERATOR_METRICS_PORT": str(operator_port),
                **(operator_env or {}),
            },
            endpoint=operator_url,
        ),
        ExtraComponent(
            emulator_name,
            perfsched_argv("emulate", *emulator_args, "--kubeconfig", kubeconfig),
            env=dict(emulator_env or {}),
        ),
    )


@dataclass(frozen=True, slots=True)
class UpOptions:
    """What ``up`` starts. ``nodes`` become KWOK nodes (labels from the node, plus ``node_labels``)."""

    nodes: Sequence[Node] = ()
    node_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    extender_port: int | None = None
    tuning: configs.SchedulerTuning = field(default_factory=configs.SchedulerTuning)
    schedulers: tuple[str, ...] = ("perfsched", "default")
    extras: tuple[ExtraComponent, ...] = ()
    timeout_s: float = 90.0
    #: also run the batch Job controller, the JobSet and Kubeflow Trainer controllers with their CRDs and
    #: webhooks, and a ClusterTrainingRuntime (``perfsched dev-cluster up --with-jobsets``)
    with_jobsets: bool = False
    #: run kube-controller-manager's batch Job controller (implied by ``with_jobsets``)
    batch_jobs: bool = False
    #: the port perfsched's operator serves its adoption webhook on (registered when set)
    webhook_port: int | None = None
    #: how the nodes publish their GPUs: ``device-plugin``, ``dra`` or ``mixed`` (``perfsched_dev.k8s.dra``)
    gpu_api: str = "device-plugin"
    #: serve Kubernetes 1.37's gang API (``scheduling.k8s.io/v1beta1`` Workload / PodGroup) and turn on
    #: kube-scheduler's GangScheduling plugin (``perfsched dev-cluster up --workload-api``)
    workload_api: bool = False
    #: kube-scheduler's OpportunisticBatching feature gate (on by default since 1.35)
    opportunistic_batching: bool = True


def feature_gates(workload_api: bool, opportunistic_batching: bool) -> str:
    """The ``--feature-gates`` value of kube-apiserver and kube-scheduler; empty for the defaults."""
    gates = []
    if workload_api:
        gates.append("GenericWorkload=true")
    if not opportunistic_batching:
        gates.append("OpportunisticBatching=false")
    return ",".join(gates)


@dataclass
class ClusterState:
    """What ``status --json`` prints: where the cluster is and what runs. Stored as ``state.json``."""

    state_dir: str
    kubeconfig: str
    phase: str
    started_at: float
    ports: dict[str, int] = field(default_factory=dict)
    endpoints: dict[str, str] = field(default_factory=dict)
    processes: list[ProcessRecord] = field(default_factory=list)
    temp_dirs: list[str] = field(default_factory=list)
    nodes: int = 0
    extender_url: str = ""
    ready_seconds: float | None = None
    #: the URL each component answers 200 on when healthy (what ``up`` and ``restart`` wait for)
    health: dict[str, str] = field(default_factory=dict)
    gpu_api: str = "device-plugin"
    #: the Kubernetes version of the control plane's binaries
    k8s_version: str = ""
    #: ``--feature-gates`` of kube-apiserver and the kube-schedulers (``feature_gates``); empty: defaults
    feature_gates: str = ""

    @property
    def pids(self) -> dict[str, int]:
        return {p.name: p.pid for p in self.processes}

    @property
    def logs(self) -> dict[str, str]:
        return {p.name: p.log_path for p in self.processes}

    def to_json(self) -> dict[str, Any]:
        return {
            "state_dir": self.state_dir,
            "kubeconfig": self.kubeconfig,
            "phase": self.phase,
            "started_at": self.started_at,
            "ready_seconds": self.ready_seconds,
            "ports": self.ports,
            "endpoints": self.endpoints,
            "extender_url": self.extender_url,
            "nodes": self.nodes,
            "pids": self.pids,
            "logs": self.logs,
            "processes": [p.to_json() for p in self.processes],
            "temp_dirs": self.temp_dirs,
            "health": self.health,
            "gpu_api": self.gpu_api,
            "k8s_version": self.k8s_version,
            "feature_gates": self.feature_gates,
        }

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> ClusterState:
        return ClusterState(
            state_dir=str(data["state_dir"]),
            kubeconfig=str(data["kubeconfig"]),
            phase=str(data["phase"]),
            started_at=float(data["started_at"]),
            ready_seconds=data.get("ready_seconds"),
            ports={str(k): int(v) for k, v in data.get("ports", {}).items()},
            endpoints={str(k): str(v) for k, v in data.get("endpoints", {}).items()},
            extender_url=str(data.get("extender_url", "")),
            nodes=int(data.get("nodes", 0)),
            processes=[ProcessRecord.from_json(p) for p in data.get("processes", [])],
            temp_dirs=[str(d) for d in data.get("temp_dirs", [])],
            health={str(k): str(v) for k, v in (data.get("health") or {}).items()},
            gpu_api=str(data.get("gpu_api") or "device-plugin"),
            k8s_version=str(data.get("k8s_version") or ""),
            feature_gates=str(data.get("feature_gates") or ""),
        )

    def running(self) -> list[ProcessRecord]:
        return [p for p in self.processes if is_running(p)]


class ClusterRunningError(DevClusterError):
    """``up`` found a cluster already running in the state directory."""


class DevCluster:
    """One local control plane, identified by its state directory."""

    def __init__(self, state_dir: Path | None = None, tools: Tools | None = None) -> None:
        self.state_dir = (state_dir or default_state_dir()).resolve()
        self._tools = tools
        self._state: ClusterState | None = None
        self._children: dict[int, subprocess.Popen[bytes]] = {}

    # --- paths -------------------------------------------------------------------------------------
    @property
    def state_path(self) -> Path:
        return self.state_dir / STATE_FILE

    @property
    def kubeconfig_path(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "logs"

    # --- status ------------------------------------------------------------------------------------
    def load(self) -> ClusterState | None:
        """The recorded state, or None when no cluster was started here (or it was cleaned up)."""
        try:
            return ClusterState.from_json(json.loads(self.state_path.read_text()))
        except FileNotFoundError:
            return None
        except (ValueError, KeyError) as exc:
            raise DevClusterError(f"{self.state_path}: unreadable state ({exc}); delete the file") from None

    def status(self) -> ClusterState | None:
        """The recorded state with ``phase`` set to what the processes say now.

        ``running``: every process runs; ``degraded``: some died; ``stopped``: none runs;
        ``starting``: ``up`` is still at work (or was killed mid-way).
        """
        state = self.load()
        if state is None:
            return None
        alive = state.running()
        if not alive:
            state.phase = "stopped"
        elif len(alive) < len(state.processes) and state.phase == "running":
            state.phase = "degraded"
        return state

    # --- up ----------------------------------------------------------------------------------------
    def up(self, options: UpOptions = UpOptions()) -> ClusterState:
        """Start the control plane; see the module docstring. Raises ``ClusterRunningError`` when one runs."""
        current = self.status()
        if current is not None and current.phase != "stopped":
            raise ClusterRunningError(
                f"a dev cluster is already {current.phase} in {self.state_dir} "
                f"(kubeconfig {current.kubeconfig}); run `perfsched dev-cluster down` first"
            )
        if current is not None:
            log.info("removing stale state of a stopped cluster in %s", self.state_dir)
            self._remove_state(current)
        tools = self._tools or find_tools()
        t0 = time.monotonic()
        self._prepare_dirs()
        state = self._new_state(options)
        state.gpu_api = options.gpu_api
        state.k8s_version = tools.k8s_version
        state.feature_gates = feature_gates(options.workload_api, options.opportunistic_batching)
        self._state = state
        self._save()
        try:
            self._start_all(tools, state, options)
        except BaseException as exc:
            log.error("dev cluster start failed, stopping what was started: %s", exc)
            self._teardown(state, keep_logs=True)
            if isinstance(exc, PerfschedError | OSError):
                if isinstance(exc, DevClusterError):
                    raise
                raise DevClusterError(f"dev cluster failed to start: {exc}") from exc
            raise
        state.phase = "running"
        state.ready_seconds = round(time.monotonic() - t0, 2)
        self._save()
        return state

    def _prepare_dirs(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if self.log_dir.exists():
            shutil.rmtree(self.log_dir)
        self.log_dir.mkdir()
        run = self.state_dir / "run"
        if run.exists():
            shutil.rmtree(run)
        run.mkdir(mode=0o700)

    def _new_state(self, options: UpOptions) -> ClusterState:
        names = ["etcd", "etcd-peer", "apiserver", "kube-controller-manager", "kwok"]
        names += [f"kube-scheduler-{s}" for s in options.schedulers]
        # one call holds every socket at once, so the ports are distinct; a requested extender port is
        # kept out of the others (the kernel may hand it out when nothing listens on it yet)
        picked = [p for p in free_ports(len(names) + 2) if p != options.extender_port][: len(names) + 1]
        ports = dict(zip(names, picked, strict=False))
        ports["extender"] = options.extender_port or picked[len(names)]
        extender_port = ports["extender"]
        endpoints = {
            "etcd": f"http://127.0.0.1:{ports['etcd']}",
            "apiserver": f"https://127.0.0.1:{ports['apiserver']}",
            "kube-controller-manager": f"https://127.0.0.1:{ports['kube-controller-manager']}",
            "extender": f"http://127.0.0.1:{extender_port}",
            "kwok": f"http://127.0.0.1:{ports['kwok']}",
        }
        for s in options.schedulers:
            endpoints[f"kube-scheduler-{s}"] = f"https://127.0.0.1:{ports[f'kube-scheduler-{s}']}"
        return ClusterState(
            state_dir=str(self.state_dir),
            kubeconfig=str(self.kubeconfig_path),
            phase="starting",
            started_at=time.time(),
            ports=ports,
            endpoints=endpoints,
            extender_url=endpoints["extender"],
        )

    def _save(self) -> None:
        assert self._state is not None
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self._state.to_json(), indent=2))
        tmp.replace(self.state_path)

    def _spawn(
        self, state: ClusterState, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None
    ) -> None:
        # recorded with the process (for ``restart``): what ``env`` adds, plus the PERFSCHED_* settings
        # it inherits from whoever ran ``up``, which a later ``restart`` from another shell would lack
        inherited = {k: v for k, v in os.environ.items() if k.startswith("PERFSCHED_")}
        try:
            proc, record = spawn(
                name,
                argv,
                self.log_dir / f"{name}.log",
                env={**inherited, **(env or {})},
                cwd=self.state_dir / "run",
            )
        except OSError as exc:
            raise DevClusterError(f"cannot start {name} ({argv[0]}): {exc}") from exc
        self._children[proc.pid] = proc
        state.processes.append(record)
        self._save()

    def _start_all(self, tools: Tools, state: ClusterState, options: UpOptions) -> None:
        """Start every process of ``state`` in dependency order, waiting for each to be healthy."""
        token = self._write_credentials(tools, state)
        kubeconfig = str(self.kubeconfig_path)
        deadline = options.timeout_s
        self._start_etcd(tools, state, deadline)
        self._start_apiserver(tools, state, token, deadline)
        # CRDs before KCM: the garbage collector rescans discovery only every 30 s
        self._apply_crds(tools, kubeconfig, deadline)
        # KCM, the schedulers and kwok need only the API server: start them together, then wait for each
        self._spawn_controller_manager(
            tools, state, kubeconfig, with_jobs=options.with_jobsets or options.batch_jobs
        )
        for sched in options.schedulers:
            self._spawn_scheduler(tools, state, sched, options.tuning)
        self._spawn_kwok(tools, state, kubeconfig)
        self._wait_http(
            state,
            "kube-controller-manager",
            f"{state.endpoints['kube-controller-manager']}/healthz",
            deadline,
        )
        for sched in options.schedulers:
            name = f"kube-scheduler-{sched}"
            self._wait_http(state, name, f"{state.endpoints[name]}/healthz", deadline)
        self._wait_http(state, "kwok", f"{state.endpoints['kwok']}/healthz", deadline)
        self._wait_api(state, kubeconfig, options, deadline)
        if options.with_jobsets:
            self._start_jobsets(state, kubeconfig, options, deadline)
        self._start_extras(state, kubeconfig, options.extras, deadline)
        if options.webhook_port:
            from perfsched_dev.k8s import webhooks
            from scheduler.k8s import connect

            client = connect.api_client(kubeconfig)
            try:
                ca = (self.state_dir / "run" / "ca.crt").read_bytes()
                webhooks.apply_webhooks(client, [webhooks.perfsched_webhook(options.webhook_port, ca)])
            finally:
                client.close()

    def _start_jobsets(
        self, state: ClusterState, kubeconfig: str, options: UpOptions, deadline: float
    ) -> None:
        """The JobSet and Trainer controllers (their CRDs, webhooks on loopback with the API server's
        serving certificate, a ClusterTrainingRuntime); the batch Job controller runs in KCM."""
        from perfsched_dev.devcluster.process import free_ports
        from perfsched_dev.k8s import bootstrap, webhooks
        from scheduler.k8s import connect

        jt = find_jobset_tools()
        run = self.state_dir / "run"
        certs = run / "webhook-certs" / "k8s-webhook-server" / "serving-certs"
        certs.mkdir(parents=True)
        shutil.copyfile(run / "apiserver.crt", certs / "tls.crt")
        shutil.copyfile(run / "apiserver.key", certs / "tls.key")
        names = ("jobset-webhook", "jobset-health", "trainer-webhook", "trainer-health")
        state.ports.update(zip(names, free_ports(len(names)), strict=True))
        p = state.ports
        (run / "jobset-config.yaml").write_text(
            configs.jobset_config(p["jobset-webhook"], p["jobset-health"], str(certs))
        )
        (run / "trainer-config.yaml").write_text(
            configs.trainer_config(p["trainer-webhook"], p["trainer-health"])
        )
        client = connect.api_client(kubeconfig)
        try:
            bootstrap.apply_crds(
                client, bootstrap.load_crds([*jt.jobset_crds, *jt.trainer_crds]), timeout_s=deadline
            )
            ca = (run / "ca.crt").read_bytes()
            self._spawn(
                state,
                "jobset-controller",
                [str(jt.jobset), f"--config={run / 'jobset-config.yaml'}"],
                env={"KUBECONFIG": kubeconfig},
            )
            self._spawn(
                state,
                "trainer-controller",
                [str(jt.trainer), f"--config={run / 'trainer-config.yaml'}"],
                # controller-runtime finds the webhook's serving certificate under $TMPDIR
                env={"KUBECONFIG": kubeconfig, "TMPDIR": str(run / "webhook-certs")},
            )
            for name in ("jobset", "trainer"):
                state.endpoints[f"{name}-controller"] = f"http://127.0.0.1:{p[f'{name}-health']}"
                self._wait_http(
                    state, f"{name}-controller", f"http://127.0.0.1:{p[f'{name}-health']}/readyz", deadline
                )
            webhooks.apply_webhooks(
                client,
                [
                    *webhooks.url_webhooks(jt.jobset_webhooks, "jobset", p["jobset-webhook"], ca),
                    *webhooks.url_webhooks(jt.trainer_webhooks, "trainer", p["trainer-webhook"], ca),
                ],
            )
            webhooks.apply_objects(client, jt.runtime)
        finally:
            client.close()

    def _write_credentials(self, tools: Tools, state: ClusterState) -> str:
        """The PKI, the token file and the admin kubeconfig; returns the admin bearer token."""
        run = self.state_dir / "run"
        token = secrets.token_hex(16)
        ca_pem = _make_pki(tools.openssl, run)
        (run / "tokens.csv").write_text(configs.token_file_text(token))
        self.kubeconfig_path.write_text(configs.kubeconfig_text(state.endpoints["apiserver"], token, ca_pem))
        self.kubeconfig_path.chmod(0o600)
        return token

    def _start_etcd(self, tools: Tools, state: ClusterState, deadline: float) -> None:
        # on tmpfs when there is one: etcd 3.4 cannot skip fsync and the disk is slow
        run = self.state_dir / "run"
        shm = Path("/dev/shm")
        base = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else str(run)
        etcd_dir = tempfile.mkdtemp(prefix="perfsched-etcd-", dir=base)
        state.temp_dirs.append(etcd_dir)
        etcd_url, peer_url = state.endpoints["etcd"], f"http://127.0.0.1:{state.ports['etcd-peer']}"
        self._spawn(
            state,
            "etcd",
            [
                str(tools.etcd),
                "--name=perfsched",
                f"--data-dir={etcd_dir}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=perfsched={peer_url}",
                "--quota-backend-bytes=4294967296",
                "--log-level=warn",
            ],
            env={"ETCD_UNSUPPORTED_ARCH": ""},
        )
        self._wait_http(state, "etcd", f"{etcd_url}/health", deadline, check=_etcd_healthy)

    def _start_apiserver(self, tools: Tools, state: ClusterState, token: str, deadline: float) -> None:
        run = self.state_dir / "run"
        p = state.ports
        etcd_url = state.endpoints["etcd"]
        api = state.endpoints["apiserver"]
        self._spawn(
            state,
            "kube-apiserver",
            [
                str(tools.kube_apiserver),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={p['apiserver']}",
                f"--cert-dir={run / 'pki'}",
                f"--tls-cert-file={run / 'apiserver.crt'}",
                f"--tls-private-key-file={run / 'apiserver.key'}",
                f"--client-ca-file={run / 'ca.crt'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--service-account-issuer={api}",
                f"--service-account-key-file={run / 'sa.pub'}",
                f"--service-account-signing-key-file={run / 'sa.key'}",
                f"--token-auth-file={run / 'tokens.csv'}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                # TaintNodesByCondition taints new nodes not-ready and only the node-lifecycle
                # controller (not run: KWOK nodes send no heartbeats) would lift it
                "--disable-admission-plugins=TaintNodesByCondition",
                "--allow-privileged=true",
                "--endpoint-reconciler-type=none",
                "--profiling=false",
                "--v=1",
                *self._gate_args(state, apiserver=True),
            ],
        )
        self._wait_http(state, "kube-apiserver", f"{api}/readyz", deadline, token=token, ca=run / "ca.crt")

    @staticmethod
    def _apply_crds(tools: Tools, kubeconfig: str, deadline: float) -> None:
        crd_files = sorted(tools.crds_dir.glob("*.yaml")) if tools.crds_dir else []
        if not crd_files:
            return
        from perfsched_dev.k8s import bootstrap
        from scheduler.k8s import connect

        client = connect.api_client(kubeconfig)
        try:
            bootstrap.apply_crds(client, bootstrap.load_crds(crd_files), timeout_s=deadline)
        finally:
            client.close()

    def _spawn_controller_manager(
        self, tools: Tools, state: ClusterState, kubeconfig: str, with_jobs: bool = False
    ) -> None:
        run = self.state_dir / "run"
        p = state.ports
        self._spawn(
            state,
            "kube-controller-manager",
            [
                str(tools.kube_controller_manager),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={p['kube-controller-manager']}",
                f"--cert-dir={run / 'pki-kcm'}",
                # never node-lifecycle-controller: KWOK nodes have no heartbeats and would be evicted
                # resourceclaim-controller: releases the ResourceClaims of finished pods (DRA GPUs)
                "--controllers=garbage-collector-controller,namespace-controller,"
                "serviceaccount-controller,serviceaccount-token-controller,resourceclaim-controller"
                + (",job-controller" if with_jobs else "")
                # removes the finalizer of a deleted PodGroup once none of its pods is left
                + (
                    ",podgroup-protection-controller" if "GenericWorkload=true" in state.feature_gates else ""
                ),
                f"--service-account-private-key-file={run / 'sa.key'}",
                f"--root-ca-file={run / 'ca.crt'}",
                "--use-service-account-credentials=false",
                "--v=1",
                *self._gate_args(state, apiserver=False),
            ],
        )

    def _spawn_kwok(self, tools: Tools, state: ClusterState, kubeconfig: str) -> None:
        p = state.ports
        kwok_dir = self.state_dir / "run" / "kwok"
        kwok_dir.mkdir()
        self._spawn(
            state,
            "kwok",
            [
                str(tools.kwok),
                f"--kubeconfig={kubeconfig}",
                f"--config={tools.kwok_stages}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                f"--cidr={POD_CIDR}",
                "--node-lease-duration-seconds=0",
                f"--server-address=127.0.0.1:{p['kwok']}",
            ],
            # kwok's client-go (v0.36) watches with WatchList streams, which need etcd >= 3.5.13
            # (RequestWatchProgress): with Debian's etcd 3.4 pods change phase 10+ s late
            env={"KWOK_WORKDIR": str(kwok_dir)},
        )

    def _start_extras(
        self, state: ClusterState, kubeconfig: str, extras: Sequence[ExtraComponent], deadline: float
    ) -> None:
        """perfsched's own processes (``UpOptions.extras``): all started, then each waited for."""
        for extra in extras:
            env = {"KUBECONFIG": kubeconfig, **extra.env}
            if extra.endpoint:
                state.endpoints[extra.name] = extra.endpoint
            self._spawn(state, extra.name, list(extra.argv), env=env)
        for extra in extras:
            if extra.health_url:
                self._wait_http(state, extra.name, extra.health_url, deadline)

    def _spawn_scheduler(
        self, tools: Tools, state: ClusterState, sched: str, tuning: configs.SchedulerTuning
    ) -> str:
        name = f"kube-scheduler-{sched}"
        kubeconfig = state.kubeconfig
        if sched == "perfsched":
            cfg = configs.perfsched_scheduler_config(kubeconfig, state.extender_url, tuning)
        elif sched == "default":
            cfg = configs.default_scheduler_config(kubeconfig, tuning)
        else:
            raise DevClusterError(f"unknown scheduler {sched!r} (known: perfsched, default)")
        if name not in state.ports:
            (state.ports[name],) = free_ports(1)
            state.endpoints[name] = f"https://127.0.0.1:{state.ports[name]}"
        run = self.state_dir / "run"
        cfg_path = run / f"{name}.yaml"
        cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        self._spawn(
            state,
            name,
            [
                str(tools.kube_scheduler),
                f"--config={cfg_path}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={state.ports[name]}",
                f"--cert-dir={run / ('pki-' + name)}",
                "--v=2",
                *self._gate_args(state, apiserver=False),
            ],
        )
        return name

    @staticmethod
    def _gate_args(state: ClusterState, *, apiserver: bool) -> list[str]:
        if not state.feature_gates:
            return []
        args = [f"--feature-gates={state.feature_gates}"]
        if apiserver and "GenericWorkload=true" in state.feature_gates:
            args.append("--runtime-config=scheduling.k8s.io/v1beta1=true")
        return args

    def start_scheduler(
        self, sched: str, tuning: configs.SchedulerTuning | None = None, timeout_s: float = 60.0
    ) -> None:
        """Start a kube-scheduler (``perfsched`` or ``default``) on a running cluster, e.g. after its pods
        were created (benchmarks); ``down`` stops it with the rest."""
        state = self.load()
        if state is None or state.phase != "running":
            raise DevClusterError(f"no running dev cluster in {self.state_dir}")
        self._state = state
        tools = self._tools or find_tools()
        name = self._spawn_scheduler(tools, state, sched, tuning or configs.SchedulerTuning())
        self._wait_http(state, name, f"{state.endpoints[name]}/healthz", timeout_s)
        self._save()

    def _wait_api(self, state: ClusterState, kubeconfig: str, options: UpOptions, timeout_s: float) -> None:
        from perfsched_dev.k8s import bootstrap, dra
        from scheduler.k8s import connect

        client = connect.api_client(kubeconfig)
        try:
            self._guard(state, lambda: bootstrap.wait_service_account(client, "default", timeout_s=timeout_s))
            if options.nodes:
                on_dra = dra.gpu_api_of(options.nodes, options.gpu_api)
                dra_nodes = [name for name, yes in on_dra.items() if yes]
                self._guard(
                    state,
                    lambda: bootstrap.create_nodes(
                        client, options.nodes, options.node_labels, dra_nodes=dra_nodes
                    ),
                )
                names = [n.name for n in options.nodes]
                self._guard(state, lambda: bootstrap.wait_nodes_ready(client, names, timeout_s=timeout_s))
                state.nodes = len(names)
                self._save()
        finally:
            client.close()

    def _guard(self, state: ClusterState, step: Callable[[], None]) -> None:
        try:
            step()
        except PerfschedError as exc:
            dead = [p for p in state.processes if not is_running(p)]
            detail = "".join(
                f"\n--- {p.name} exited; last lines of {p.log_path}:\n{tail(p.log_path)}" for p in dead
            )
            raise DevClusterError(f"{exc}{detail}") from exc

    def _wait_http(
        self,
        state: ClusterState,
        name: str,
        url: str,
        timeout_s: float,
        token: str | None = None,
        ca: Path | None = None,
        check: Callable[[httpx.Response], bool] | None = None,
    ) -> None:
        """Poll ``url`` every 0.25 s until it answers 200; fail at once if the process has exited."""
        record = next(p for p in reversed(state.processes) if p.name == name)
        if state.health.get(name) != url:
            state.health[name] = url
            self._save()
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        deadline = time.monotonic() + timeout_s
        last = "no answer"
        verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=str(ca)) if ca else False
        with httpx.Client(verify=verify, timeout=2.0) as http:
            while True:
                if not is_running(record):
                    raise DevClusterError(
                        f"{name} exited during start-up; last lines of {record.log_path}:\n"
                        + tail(record.log_path)
                    )
                try:
                    resp = http.get(url, headers=headers)
                    if resp.status_code == 200 and (check is None or check(resp)):
                        return
                    last = f"HTTP {resp.status_code}: {resp.text[:200]}"
                except httpx.HTTPError as exc:
                    last = type(exc).__name__
                if time.monotonic() > deadline:
                    raise DevClusterError(
                        f"{name} not healthy after {timeout_s:g}s at {url} ({last}); last lines of "
                        f"{record.log_path}:\n{tail(record.log_path)}"
                    )
                time.sleep(0.25)

    # --- extra components after up (e2e fixtures) ----------------------------------------------------
    def add_process(self, record: ProcessRecord) -> None:
        """Record a process started against this cluster, so ``down`` stops it too."""
        state = self.load()
        if state is None:
            raise DevClusterError(f"no dev cluster in {self.state_dir}")
        state.processes.append(record)
        self._state = state
        self._save()

    # --- restart one component ----------------------------------------------------------------------
    def restart(
        self,
        component: str,
        *,
        graceful: bool = False,
        down_for_s: float = 0.0,
        timeout_s: float = 90.0,
    ) -> ProcessRecord:
        """Stop one component and start it again exactly as ``up`` did; wait until it is healthy.

        ``component`` is a process name of ``status`` (``kube-apiserver``, ``perfsched-operator``, ...) or
        a short alias (``apiserver``, ``kube-scheduler``, ``extender``, ``operator``, ``emulator``). The old
        process gets SIGKILL (a crash), or SIGTERM with ``graceful``; the new one starts ``down_for_s``
        seconds later with the recorded command line, environment and working directory, writes to the
        same log, and replaces the old one in the state. Returns the new process's record.
        """
        state = self.load()
        if state is None or not state.processes:
            raise DevClusterError(f"no dev cluster in {self.state_dir}")
        name = self._resolve(state, component)
        index = max(i for i, p in enumerate(state.processes) if p.name == name)
        old = state.processes[index]
        if graceful:
            stop(old)
        else:
            kill(old)
        child = self._children.pop(old.pid, None)
        if child is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=5)
        if down_for_s > 0:
            time.sleep(down_for_s)
        try:
            proc, record = spawn(
                old.name, old.argv, Path(old.log_path), env=old.env, cwd=Path(old.cwd) if old.cwd else None
            )
        except OSError as exc:
            raise DevClusterError(f"cannot start {name} again ({old.argv[0]}): {exc}") from exc
        self._children[proc.pid] = proc
        state.processes[index] = record
        self._state = state
        self._save()
        log.info("restarted %s", name, extra={"component": name, "pid": record.pid, "old_pid": old.pid})
        url = state.health.get(name)
        if url:
            token, ca, check = None, None, None
            if name == "kube-apiserver":
                token, ca = self.admin_token(), self.state_dir / "run" / "ca.crt"
            elif name == "etcd":
                check = _etcd_healthy
            self._wait_http(state, name, url, timeout_s, token=token, ca=ca, check=check)
        return record

    def _resolve(self, state: ClusterState, component: str) -> str:
        names = [p.name for p in state.processes]
        if component in names:
            return component
        aliases = {
            "apiserver": "kube-apiserver",
            "kube-scheduler": "kube-scheduler-perfsched",
            "scheduler": "kube-scheduler-perfsched",
            "kcm": "kube-controller-manager",
            "extender": "perfsched-extender",
            "operator": "perfsched-operator",
            "emulator": "perfsched-emulator",
            "emulate": "perfsched-emulator",
        }
        name = aliases.get(component, "")
        if name in names:
            return name
        raise DevClusterError(
            f"no component {component!r} in the dev cluster of {self.state_dir}; "
            f"known: {', '.join(dict.fromkeys(names))}"
        )

    def admin_token(self) -> str:
        """The API server's admin bearer token (also accepted by kube-scheduler's delegated auth)."""
        text = (self.state_dir / "run" / "tokens.csv").read_text()
        return text.split(",", 1)[0].strip()

    # --- down --------------------------------------------------------------------------------------
    def down(self) -> list[str]:
        """Stop every recorded process (newest first) and remove the temporary state. Idempotent.

        Returns the names of the processes that were still running and got stopped. Logs are kept
        in ``<state dir>/logs`` until the next ``up``.
        """
        state = self.load()
        if state is None:
            return []
        self._state = state
        return self._teardown(state, keep_logs=True)

    def _teardown(self, state: ClusterState, keep_logs: bool) -> list[str]:
        stopped: list[str] = []
        for record in reversed(state.processes):
            if stop(record):
                stopped.append(record.name)
            proc = self._children.pop(record.pid, None)
            if proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
        self._remove_state(state)
        if not keep_logs and self.log_dir.exists():
            shutil.rmtree(self.log_dir)
        return stopped

    def _remove_state(self, state: ClusterState) -> None:
        for d in state.temp_dirs:
            shutil.rmtree(d, ignore_errors=True)
        shutil.rmtree(self.state_dir / "run", ignore_errors=True)
        for path in (self.kubeconfig_path, self.state_path):
            path.unlink(missing_ok=True)


def _etcd_healthy(resp: httpx.Response) -> bool:
    return '"true"' in resp.text


def _make_pki(openssl: Path, run: Path) -> bytes:
    """A throw-away CA, an apiserver serving certificate for 127.0.0.1/localhost and the SA key pair."""

    def ssl(*args: str) -> None:
        done = subprocess.run([str(openssl), *args], cwd=run, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise DevClusterError(f"openssl {args[0]} failed: {done.stderr.strip()}")

    # P-256 keys: as good for a throw-away loopback cluster and ~50x faster to make than RSA-2048
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    ssl(
        "req",
        "-x509",
        *ec,
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "30",
        "-subj",
        "/CN=perfsched-dev-ca",
    )
    ssl("req", *ec, "-keyout", "apiserver.key", "-out", "apiserver.csr", "-subj", "/CN=kube-apiserver")
    (run / "apiserver.ext").write_text(
        configs.openssl_server_ext(
            ("127.0.0.1", "10.96.0.1"), ("localhost", "kubernetes", "kubernetes.default")
        )
    )
    ssl("x509", "-req", "-in", "apiserver.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "apiserver.crt", "-days", "30", "-extfile", "apiserver.ext")  # fmt: skip
    # service-account tokens are signed ES256 (the apiserver and KCM accept ECDSA keys)
    ssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "sa.key")
    ssl("ec", "-in", "sa.key", "-pubout", "-out", "sa.pub")
    return (run / "ca.crt").read_bytes()
