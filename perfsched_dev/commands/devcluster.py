"""``perfsched dev-cluster up|down|status|restart|nodes``: the local Kubernetes control plane (dev, e2e).

CLI command module (I/O). ``up`` builds the fake GPU nodes from a cluster spec (the simulator's YAML,
``scheduler.sim.cluster``) and hands them to ``perfsched_dev.devcluster.DevCluster``; ``--with-perfsched``
also starts ``perfsched extender``, ``perfsched operator`` and ``perfsched emulate`` as local processes;
``--with-jobsets`` also runs the batch Job, JobSet and Kubeflow Trainer controllers (``docs/job-kinds.md``);
``restart COMPONENT`` kills one of them (or of the control plane) and starts it again as ``up`` did.
Exit codes: 0 ok; 1 the cluster could not be started (message says why and how to fix it) or one is
already running; 2 bad arguments; ``status`` exits 3 when no cluster runs. See ``docs/dev-cluster.md``.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from perfsched_dev.devcluster.cluster import ExtraComponent

DEFAULT_SPEC = "modern-mix"
_VERSION = re.compile(r"v\d+\.\d+\.\d+")
#: the command each ``--with-perfsched`` component runs, and the module that provides it
_COMPONENTS = {
    "extender": "scheduler.commands.extender",
    "operator": "scheduler.commands.operator",
    "emulate": "perfsched_dev.commands.emulate",
}


def _perfsched_components(
    extender_port: int,
    kubeconfig: str,
    time_scale: float | None,
    webhook: tuple[int, str, str] | None = None,
) -> tuple[ExtraComponent, ...]:
    from perfsched_dev.devcluster.cluster import perfsched_components
    from perfsched_dev.devcluster.process import free_ports
    from perfsched_dev.devcluster.tools import DevClusterError

    missing = [c for c, module in _COMPONENTS.items() if importlib.util.find_spec(module) is None]
    if missing:
        raise DevClusterError(
            "--with-perfsched: this installation has no `perfsched "
            + "`, `perfsched ".join(missing)
            + "` command yet; start the cluster without --with-perfsched"
        )
    emulator_env = {"PERFSCHED_EMULATOR_TIME_SCALE": f"{time_scale:g}"} if time_scale else {}
    (operator_port,) = free_ports(1)
    operator_env = {}
    if webhook is not None:  # the adoption webhook, with the API server's loopback serving certificate
        port, cert, key = webhook
        operator_env = {
            "PERFSCHED_OPERATOR_WEBHOOK_HOST": "127.0.0.1",
            "PERFSCHED_OPERATOR_WEBHOOK_PORT": str(port),
            "PERFSCHED_OPERATOR_WEBHOOK_CERT_FILE": cert,
            "PERFSCHED_OPERATOR_WEBHOOK_KEY_FILE": key,
        }
    return perfsched_components(
        kubeconfig, extender_port, operator_port, operator_env=operator_env, emulator_env=emulator_env
    )


def _print_state(state: object, as_json: bool, header: str) -> None:
    from perfsched_dev.devcluster.cluster import ClusterState

    assert isinstance(state, ClusterState)
    if as_json:
        typer.echo(json.dumps(state.to_json(), indent=2))
        return
    typer.echo(header)
    typer.echo(f"  kubeconfig: {state.kubeconfig}    (export KUBECONFIG={state.kubeconfig})")
    typer.echo(f"  nodes:      {state.nodes} KWOK GPU nodes, GPUs through {state.gpu_api}")
    if state.k8s_version:
        typer.echo(f"  kubernetes: {state.k8s_version}")
    typer.echo(f"  extender:   {state.extender_url} (kube-scheduler profile 'perfsched' calls it)")
    for name, url in state.endpoints.items():
        if name != "extender":
            typer.echo(f"  {name + ':':<26}{url}")
    typer.echo(f"  logs:       {Path(state.state_dir) / 'logs'}")
    for record in state.processes:
        typer.echo(f"    {record.name:<26} pid {record.pid:<8} {record.log_path}")


_STATE_DIR = typer.Option(
    None,
    "--state-dir",
    help="State directory [default: $PERFSCHED_DEV_CLUSTER_DIR or ~/.cache/perfsched/dev-cluster].",
)


def register(app: typer.Typer) -> None:
    dev = typer.Typer(help="Local Kubernetes control plane (etcd, apiserver, KCM, kube-scheduler, KWOK).")
    app.add_typer(dev, name="dev-cluster")
    _register_up(dev)
    _register_down_and_status(dev)
    _register_restart(dev)
    _register_nodes(dev)


def _register_up(dev: typer.Typer) -> None:
    @dev.command("up")
    def up(
        cluster: str = typer.Option(
            DEFAULT_SPEC, "--cluster", help="Cluster spec: a shipped name or a YAML file."
        ),
        with_perfsched: bool = typer.Option(
            False, "--with-perfsched", help="Also start perfsched extender, operator and emulate."
        ),
        extender_port: int = typer.Option(
            None, "--extender-port", help="Port of the extender URL [default: a free one]."
        ),
        time_scale: float = typer.Option(
            None, "--time-scale", help="Emulator time scale (with --with-perfsched)."
        ),
        with_jobsets: bool = typer.Option(
            False,
            "--with-jobsets",
            help="Also run the batch Job, JobSet and Kubeflow Trainer controllers (and, with "
            "--with-perfsched, the operator's webhook that adopts their jobs).",
        ),
        timeout: float = typer.Option(
            90.0, "--timeout", help="Seconds each component may take to become healthy."
        ),
        gpu_api: str = typer.Option(
            "device-plugin",
            "--gpu-api",
            help="How nodes publish GPUs: device-plugin (allocatable nvidia.com/gpu), dra (ResourceSlices "
            "of a DeviceClass backing nvidia.com/gpu) or mixed (every second GPU pool on DRA).",
        ),
        k8s_version: str = typer.Option(
            None,
            "--k8s-version",
            help="Kubernetes version of the control plane [default: $PERFSCHED_K8S_VERSION or "
            "the tested one]; build it with PERFSCHED_K8S_VERSION=<v> e2e/install-tools.sh.",
        ),
        workload_api: bool = typer.Option(
            False,
            "--workload-api",
            help="Serve the gang API (scheduling.k8s.io/v1beta1 Workload / PodGroup, feature gate "
            "GenericWorkload; Kubernetes 1.37) and run kube-scheduler's GangScheduling plugin.",
        ),
        opportunistic_batching: bool = typer.Option(
            True,
            "--opportunistic-batching/--no-opportunistic-batching",
            help="kube-scheduler's OpportunisticBatching feature gate.",
        ),
        state_dir: Path = _STATE_DIR,
        as_json: bool = typer.Option(False, "--json", help="Print the cluster state as JSON."),
    ) -> None:
        """Start the control plane with fake GPU nodes from a cluster spec; wait until it is healthy."""
        from perfsched_dev.devcluster.cluster import DevCluster, UpOptions
        from perfsched_dev.devcluster.process import free_ports, port_is_free
        from perfsched_dev.devcluster.tools import DevClusterError, find_jobset_tools, find_tools
        from perfsched_dev.k8s.dra import GPU_APIS
        from scheduler.core.errors import ConfigError
        from scheduler.sim.cluster import load_cluster_spec, node_labels, spec_to_nodes

        if extender_port is not None and not 1 <= extender_port <= 65535:
            raise ConfigError(f"--extender-port: must be 1..65535, got {extender_port}")
        if time_scale is not None and time_scale <= 0:
            raise ConfigError(f"--time-scale: must be > 0, got {time_scale}")
        if gpu_api not in GPU_APIS:
            raise ConfigError(f"--gpu-api: expected one of {', '.join(GPU_APIS)}, got {gpu_api!r}")
        if k8s_version is not None and not _VERSION.fullmatch(k8s_version):
            raise ConfigError(f"--k8s-version: expected a version like v1.37.2, got {k8s_version!r}")
        spec = load_cluster_spec(cluster)
        dc = DevCluster(state_dir)
        try:
            if with_jobsets:  # before anything starts: say every missing piece at once
                find_jobset_tools()
            port = extender_port or free_ports(1)[0]
            extras: tuple[ExtraComponent, ...] = ()
            webhook_port = None
            if with_perfsched:
                if not port_is_free(port):
                    raise DevClusterError(
                        f"--extender-port {port} is in use: pick another port or stop what uses it"
                    )
                webhook = None
                if with_jobsets:
                    run = dc.state_dir / "run"
                    webhook_port = next(p for p in free_ports(2) if p != port)
                    webhook = (webhook_port, str(run / "apiserver.crt"), str(run / "apiserver.key"))
                extras = _perfsched_components(port, str(dc.kubeconfig_path), time_scale, webhook)
            options = UpOptions(
                nodes=spec_to_nodes(spec),
                node_labels=node_labels(spec),
                extender_port=port,
                extras=extras,
                timeout_s=timeout,
                with_jobsets=with_jobsets,
                webhook_port=webhook_port,
                gpu_api=gpu_api,
                workload_api=workload_api,
                opportunistic_batching=opportunistic_batching,
            )
            if k8s_version is not None:
                dc = DevCluster(state_dir, tools=find_tools(k8s_version=k8s_version))
            state = dc.up(options)
        except DevClusterError as exc:
            typer.echo(f"perfsched dev-cluster up: {exc}", err=True)
            raise typer.Exit(1) from None
        _print_state(
            state, as_json, f"dev cluster '{spec.name}' is up (healthy after {state.ready_seconds:.1f} s)"
        )


def _register_down_and_status(dev: typer.Typer) -> None:
    @dev.command("down")
    def down(state_dir: Path = _STATE_DIR, as_json: bool = typer.Option(False, "--json")) -> None:
        """Stop exactly the processes `up` started (by pid) and remove the temporary state."""
        from perfsched_dev.devcluster.cluster import DevCluster
        from perfsched_dev.devcluster.tools import DevClusterError

        dc = DevCluster(state_dir)
        try:
            stopped = dc.down()
        except DevClusterError as exc:
            typer.echo(f"perfsched dev-cluster down: {exc}", err=True)
            raise typer.Exit(1) from None
        if as_json:
            typer.echo(json.dumps({"stopped": stopped, "state_dir": str(dc.state_dir)}))
        elif stopped:
            typer.echo(
                f"stopped {', '.join(stopped)}; removed {dc.state_dir / 'run'} (logs kept in {dc.log_dir})"
            )
        else:
            typer.echo(f"no dev cluster running in {dc.state_dir}")

    @dev.command("status")
    def status(state_dir: Path = _STATE_DIR, as_json: bool = typer.Option(False, "--json")) -> None:
        """Show kubeconfig, endpoints, pids and logs; exit 3 when no cluster is running."""
        from perfsched_dev.devcluster.cluster import DevCluster
        from perfsched_dev.devcluster.tools import DevClusterError

        dc = DevCluster(state_dir)
        try:
            state = dc.status()
        except DevClusterError as exc:
            typer.echo(f"perfsched dev-cluster status: {exc}", err=True)
            raise typer.Exit(1) from None
        if state is None:
            if as_json:
                typer.echo(json.dumps({"phase": "absent", "state_dir": str(dc.state_dir)}))
            else:
                typer.echo(f"no dev cluster in {dc.state_dir}")
            raise typer.Exit(3)
        _print_state(state, as_json, f"dev cluster is {state.phase}")
        if state.phase != "running":
            raise typer.Exit(3)


def _register_restart(dev: typer.Typer) -> None:
    @dev.command("restart")
    def restart(
        component: str = typer.Argument(
            ...,
            help="A process of `status` (kube-apiserver, etcd, kube-scheduler-perfsched, perfsched-operator, "
            "...) or an alias: apiserver, kube-scheduler, extender, operator, emulator.",
        ),
        graceful: bool = typer.Option(
            False, "--graceful", help="SIGTERM and wait (default: SIGKILL, as a crash would)."
        ),
        down_for: float = typer.Option(
            0.0, "--down-for", help="Seconds to leave the component down before starting it again."
        ),
        timeout: float = typer.Option(90.0, "--timeout", help="Seconds it may take to become healthy again."),
        state_dir: Path = _STATE_DIR,
        as_json: bool = typer.Option(False, "--json", help="Print the new process as JSON."),
    ) -> None:
        """Kill one component and start it again with its original command line; wait until healthy."""
        from perfsched_dev.devcluster.cluster import DevCluster
        from perfsched_dev.devcluster.tools import DevClusterError
        from scheduler.core.errors import ConfigError

        if down_for < 0 or timeout <= 0:
            raise ConfigError("--down-for must be >= 0 and --timeout > 0")
        dc = DevCluster(state_dir)
        try:
            record = dc.restart(component, graceful=graceful, down_for_s=down_for, timeout_s=timeout)
        except DevClusterError as exc:
            typer.echo(f"perfsched dev-cluster restart: {exc}", err=True)
            raise typer.Exit(1) from None
        if as_json:
            typer.echo(json.dumps(record.to_json()))
        else:
            typer.echo(f"restarted {record.name} (pid {record.pid}); log {record.log_path}")


def _register_nodes(dev: typer.Typer) -> None:
    @dev.command("nodes")
    def nodes(
        cluster: str = typer.Option(
            DEFAULT_SPEC, "--cluster", help="Cluster spec: a shipped name or a YAML file."
        ),
        kubeconfig: str = typer.Option(None, "--kubeconfig", help="Kubeconfig [default: $KUBECONFIG]."),
    ) -> None:
        """Create the spec's fake GPU nodes (for KWOK) on any cluster, e.g. kind (see e2e/kind/)."""
        from perfsched_dev.k8s import bootstrap
        from scheduler.k8s.connect import api_client
        from scheduler.sim.cluster import load_cluster_spec, node_labels, spec_to_nodes

        spec = load_cluster_spec(cluster)
        api = api_client(kubeconfig)
        node_list = spec_to_nodes(spec)
        bootstrap.create_nodes(api, node_list, node_labels(spec))
        bootstrap.wait_nodes_ready(api, [n.name for n in node_list])
        typer.echo(f"{len(node_list)} KWOK GPU nodes of '{spec.name}' are Ready")
