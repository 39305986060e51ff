"""``perfsched emulate``: run the workload emulator against a cluster (KWOK nodes stand in for GPUs).

CLI command module (I/O): reads ``PERFSCHED_EMULATOR_*`` settings (options override them), connects
with ``--kubeconfig``/``$KUBECONFIG`` or the in-cluster service account, and steps
``scheduler.emulator.runner.Emulator`` until interrupted. See ``docs/dev-cluster.md``.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading

import typer

log = logging.getLogger(__name__)


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
    ) -> None:
        """Play the training processes of TrainingJob pods: progress at the true throughput, then exit 0."""

        from scheduler.core.errors import ConfigError
        from scheduler.emulator.runner import Emulator, EmulatorConfig, ground_truth_throughput
        from scheduler.k8s.workload import KubeWorkload, load_client
        from scheduler.settings import configure_logging, load_settings

        settings = load_settings()
        configure_logging(settings)
        try:
            config = EmulatorConfig(
                time_scale=time_scale if time_scale is not None else settings.emulator_time_scale,
                checkpoint_interval_s=(
                    checkpoint_interval
                    if checkpoint_interval is not None
                    else settings.emulator_checkpoint_interval_seconds
                ),
                report_interval_s=report_interval
                if report_interval is not None
                else settings.emulator_report_interval_seconds,
                tick_s=settings.emulator_tick_seconds,
                namespace=namespace if namespace is not None else settings.namespace,
            )
        except ValueError as exc:
            raise ConfigError(f"perfsched emulate: {exc}") from None
        emulator = Emulator(KubeWorkload(load_client(kubeconfig)), ground_truth_throughput(), config)
        if once:
            emulator.step()
            return
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        log.info("workload emulator running (time scale %g)", config.time_scale)
        with contextlib.suppress(KeyboardInterrupt):
            emulator.run(stop)
