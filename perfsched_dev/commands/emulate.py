"""``perfsched emulate``: run the workload emulator against a cluster (KWOK nodes stand in for GPUs).

CLI command module (I/O): reads ``PERFSCHED_EMULATOR_*`` settings (options override them), connects
with ``--kubeconfig``/``$KUBECONFIG`` or the in-cluster service account, and steps
``perfsched_dev.emulator.table_driven.Emulator`` until interrupted. With ``--exec`` it runs the pods
bound to exec nodes as real local processes instead (``perfsched_dev.emulator.exec``;
``docs/real-training.md``).
See ``docs/dev-cluster.md``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from pathlib import Path

import typer

log = logging.getLogger(__name__)

_EXEC_DIR = typer.Option(
    None,
    "--exec-dir",
    help="With --exec: working directories, volumes and logs of the pods (default ~/.cache/perfsched/exec).",
)


def register(app: typer.Typer) -> None:
    @app.command("emulate")
    def emulate(
        kubeconfig: str = typer.Option(
            None, "--kubeconfig", help="Kubeconfig [default: $KUBECONFIG, else in-cluster]."
        ),
        time_scale: float = typer.Option(
            None,
            "--time-scale",
            help="Emulated seconds per wall second [default: PERFSCHED_EMULATOR_TIME_SCALE or 1].",
        ),
        checkpoint_interval: float = typer.Option(
            None, "--checkpoint-interval", help="Emulated seconds between checkpoints [default: 300]."
        ),
        report_interval: float = typer.Option(
            None, "--report-interval", help="Wall seconds between progress annotations [default: 2]."
        ),
        namespace: str = typer.Option(None, "--namespace", help="Only this namespace [default: all]."),
        once: bool = typer.Option(False, "--once", help="Run one step and exit (for scripts)."),
        exec_: bool = typer.Option(
            False,
            "--exec",
            help="Run the pods bound to exec nodes (label perfsched.dev/exec-node=true) as local processes "
            "instead of playing them from the throughput table.",
        ),
        exec_dir: Path = _EXEC_DIR,
        exec_nodes: str = typer.Option(
            None,
            "--exec-nodes",
            help="With --exec: first create the nodes of this cluster spec (shipped name or YAML file) as "
            "exec nodes, named exec-<pool>-<i>.",
        ),
    ) -> None:
        """Play the training processes of TrainingJob pods: progress at the true throughput, then exit 0."""

        from perfsched_dev.emulator.settings import load_emulator_settings
        from perfsched_dev.emulator.table_driven import Emulator, EmulatorConfig, ground_truth_throughput
        from scheduler.core.errors import ConfigError
        from scheduler.k8s.connect import api_client
        from scheduler.k8s.workload import KubeWorkload
        from scheduler.settings import configure_logging, load_settings

        settings = load_settings()
        configure_logging(settings)
        own = load_emulator_settings()
        try:
            config = EmulatorConfig(
                time_scale=time_scale if time_scale is not None else own.time_scale,
                checkpoint_interval_s=(
                    checkpoint_interval
                    if checkpoint_interval is not None
                    else own.checkpoint_interval_seconds
                ),
                report_interval_s=report_interval
                if report_interval is not None
                else own.report_interval_seconds,
                tick_s=own.tick_seconds,
                namespace=namespace if namespace is not None else settings.namespace,
            )
        except ValueError as exc:
            raise ConfigError(f"perfsched emulate: {exc}") from None
        if exec_:
            _run_exec(kubeconfig, exec_dir, exec_nodes, config.namespace, once)
            return
        if exec_dir is not None or exec_nodes is not None:
            raise ConfigError("perfsched emulate: --exec-dir and --exec-nodes need --exec")
        emulator = Emulator(KubeWorkload(api_client(kubeconfig)), ground_truth_throughput(), config)
        if once:
            emulator.step()
            return
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        log.info("workload emulator running (time scale %g)", config.time_scale)
        with contextlib.suppress(KeyboardInterrupt):
            emulator.run(stop)


def _run_exec(
    kubeconfig: str | None, exec_dir: Path | None, spec_name: str | None, namespace: str, once: bool
) -> None:
    from perfsched_dev.emulator.exec import ExecConfig, ExecEmulator, worker_site
    from perfsched_dev.k8s.execapi import KubeExec, exec_node_manifest
    from scheduler.core.errors import ConfigError
    from scheduler.k8s.connect import api_client

    path = kubeconfig or os.environ.get("KUBECONFIG", "")
    if not path:
        raise ConfigError(
            "perfsched emulate --exec: needs --kubeconfig or $KUBECONFIG "
            "(the workers report progress with it)"
        )
    cache = os.environ.get("PERFSCHED_CACHE") or str(Path.home() / ".cache" / "perfsched")
    root = (exec_dir or Path(cache).expanduser() / "exec").resolve()
    api = KubeExec(api_client(path))
    if spec_name:
        from scheduler.sim.cluster import load_cluster_spec, node_labels, spec_to_nodes

        spec = load_cluster_spec(spec_name)
        labels = node_labels(spec)
        bodies = []
        for node in spec_to_nodes(spec):
            body = exec_node_manifest(node, labels.get(node.name))
            body["metadata"]["name"] = body["metadata"]["labels"]["kubernetes.io/hostname"] = (
                f"exec-{node.name}"
            )
            bodies.append(body)
        api.create_nodes(bodies)
    site = worker_site(root / "pylib")
    emulator = ExecEmulator(
        api,
        ExecConfig(
            root=root, namespace=namespace, kubeconfig=str(Path(path).resolve()), pythonpath=str(site)
        ),
    )
    if once:
        emulator.step()
        return
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    log.info("exec emulator running (pods of exec nodes run as processes; files in %s)", root)
    with contextlib.suppress(KeyboardInterrupt):
        emulator.run(stop)
