"""``perfsched demo``: the one-command tour (``make demo``).

CLI command module (I/O, rich output). Brings up the local control plane with perfsched's extender,
operator and workload emulator, submits TrainingJobs from the shipped Philly sample on a heterogeneous
KWOK cluster, shows jobs by phase, GPUs in use and the latest scheduling decisions live, and ends with a
report. ``--compare`` runs the same workload twice, under the default policy and then under a baseline
policy (``--baseline``), and prints both reports side by side with a verdict on the average JCT and a
JCT CDF picture. Cleans up on success, failure and Ctrl-C. Exit codes: 0 ok, 1 a step failed, 2 bad
arguments, 130 interrupted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from scheduler.core.errors import ConfigError

_STATE_DIR = typer.Option(
    None, "--state-dir", help="Cluster state directory [default: ~/.cache/perfsched/demo-cluster]."
)
#: the newest-GPU-first preference an admin without a performance model configures (``heterogeneity:
#: ordered``): what the default policy is compared with
DEFAULT_BASELINE = "las:heterogeneity=ordered"
_OUT = typer.Option(Path("out/demo"), "--out", help="Directory for --compare's jct_cdf.png and report.json.")


def register(app: typer.Typer) -> None:
    @app.command("demo")
    def demo(
        duration: float = typer.Option(180.0, "--duration", help="Seconds to run the workload (at most)."),
        jobs: int = typer.Option(40, "--jobs", help="TrainingJobs to submit from the Philly sample."),
        policy: str | None = typer.Option(
            None,
            "--policy",
            help="Policy spec NAME[:key=value;...] the operator runs, e.g. las:heterogeneity=agnostic "
            "[default: the operator's default, scheduler.policies.DEFAULT_POLICY_SPEC].",
        ),
        cluster: str = typer.Option(
            "gavel-heterogeneous", "--cluster", help="Cluster spec (shipped name or YAML file)."
        ),
        nodes_per_pool: int = typer.Option(
            1, "--nodes-per-pool", help="Nodes kept from each pool of the spec."
        ),
        seed: int = typer.Option(0, "--seed", help="Seed of the model assignment."),
        time_scale: float = typer.Option(1.0, "--time-scale", help="Emulated seconds per wall second."),
        elastic: bool = typer.Option(
            False,
            "--elastic",
            help="Make the jobs elastic (1 .. 2x their traced GPUs; try --policy elastic).",
        ),
        keep: bool = typer.Option(False, "--keep", help="Leave the cluster running at the end."),
        state_dir: Path = _STATE_DIR,
        real: bool = typer.Option(
            False,
            "--real",
            help="Instead: a few jobs that really train (PyTorch on CPU) with a resize and a preemption "
            "(policy srsf; the other workload options do not apply).",
        ),
        compare: bool = typer.Option(
            False,
            "--compare",
            help="Run the workload twice, under --policy and then under --baseline, and report both side "
            "by side (average and p99 JCT, utilisation, preemptions, predictor error) with a JCT CDF PNG.",
        ),
        baseline: str = typer.Option(
            DEFAULT_BASELINE,
            "--baseline",
            help="Policy spec of the --compare baseline (newest GPU type first, then most free GPUs).",
        ),
        out: Path = _OUT,
    ) -> None:
        """Run a TrainingJob workload through perfsched on a local control plane and report how it went."""
        import logging

        from rich.console import Console

        if compare and (real or keep):
            raise ConfigError(f"--compare: cannot be combined with {'--real' if real else '--keep'}")
        if real:
            from perfsched_dev.demo.real_cli import run_real

            logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
            code = run_real(Console(), keep=keep, state_dir=state_dir)
            if code:
                raise typer.Exit(code)
            return

        from perfsched_dev.demo.emulated import DemoError, DemoOptions, run_demo

        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
        console = Console()
        from scheduler.policies import DEFAULT_POLICY_SPEC, check_single_spec, make_policy_from_spec

        try:  # fail here, not after the control plane is up
            policy = check_single_spec(policy if policy is not None else DEFAULT_POLICY_SPEC).text
            make_policy_from_spec(policy)
        except ConfigError as exc:
            raise ConfigError(f"--policy: {exc}") from None
        if compare:
            try:
                baseline = check_single_spec(baseline).text
                make_policy_from_spec(baseline)
            except ConfigError as exc:
                raise ConfigError(f"--baseline: {exc}") from None
        options = DemoOptions(
            duration_s=duration,
            jobs=jobs,
            policy=policy,
            cluster=cluster,
            nodes_per_pool=nodes_per_pool,
            seed=seed,
            time_scale=time_scale,
            elastic=elastic,
            keep=keep,
            state_dir=state_dir,
        )
        live = _LiveView(console)
        if compare:
            _compare(console, live, options, baseline, out)
            return
        try:
            with live:
                report, where = run_demo(options, render=live.update, say=live.say)
        except DemoError as exc:
            console.print(f"\n[bold red]perfsched demo: {exc}[/]")
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            console.print("\n[yellow]perfsched demo: interrupted; the cluster was stopped.[/]")
            raise typer.Exit(130) from None
        _print_report(console, report, where, options)


def _compare(console: Any, live: _LiveView, options: Any, baseline: str, out: Path) -> None:
    """``--compare``: both runs, then the side-by-side report, the verdict and the JCT CDF PNG."""
    import json
    from dataclasses import asdict

    from rich.table import Table

    from perfsched_dev.demo.compare import run_compare, write_jct_cdf
    from perfsched_dev.demo.emulated import DemoError
    from perfsched_dev.demo.report import comparison_rows, verdict

    try:
        with live:
            runs = run_compare(options, baseline, render=live.update, say=live.say)
    except DemoError as exc:
        console.print(f"\n[bold red]perfsched demo --compare: {exc}[/]")
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        console.print("\n[yellow]perfsched demo --compare: interrupted; the cluster was stopped.[/]")
        raise typer.Exit(130) from None
    aware, base = runs
    console.print()
    table = Table(title="perfsched demo --compare: the same workload under two policies")
    table.add_column("", style="bold")
    table.add_column(f"default: {aware.policy}")
    table.add_column(f"baseline: {base.policy}")
    for label, a, b in comparison_rows(aware.report, base.report):
        table.add_row(label, a, b)
    table.add_row(
        "workload time (limit)",
        *(f"{r.where.get('elapsed_s', options.duration_s):.0f} s ({options.duration_s:.0f} s)" for r in runs),
    )
    table.add_row("whole run (control plane up and down)", *(f"{r.wall_s:.0f} s" for r in runs))
    table.add_row("logs", *(str(r.where.get("logs", "-")) for r in runs))
    console.print(table)
    console.print(verdict(aware.report, base.report, aware.policy, base.policy))
    png = write_jct_cdf(out / "jct_cdf.png", runs, title=f"({options.jobs} jobs, {options.cluster})")
    (out / "report.json").write_text(
        json.dumps(
            [{"role": r.role, "policy": r.policy, "wall_s": r.wall_s, **asdict(r.report)} for r in runs],
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    console.print(f"JCT CDF: {png}; both reports: {out / 'report.json'}")


class _LiveView:
    """A rich Live panel: jobs by phase, GPUs in use, recent decisions with their reasons."""

    def __init__(self, console: Any) -> None:
        from rich.live import Live

        self.console = console
        self.live = Live(console=console, refresh_per_second=4, transient=False)

    def __enter__(self) -> _LiveView:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.live.__exit__(*exc)  # type: ignore[arg-type]

    def say(self, text: str) -> None:
        self.live.console.print(text)

    def update(self, watch: Any, options: Any, total_gpus: int) -> None:
        import time

        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table

        from perfsched_dev.demo import report as rep

        elapsed = time.monotonic() - watch.started
        phases = rep.phase_counts(watch.tjs)
        used = rep.gpus_in_use(watch.tjs)
        head = Table.grid(padding=(0, 2))
        head.add_row(
            f"[bold]perfsched demo[/] {elapsed:5.0f}/{options.duration_s:.0f} s",
            f"policy [cyan]{options.policy or 'default'}[/]",
            f"submitted {watch.submitted}",
        )
        phase_line = "TrainingJobs by phase: " + (
            "  ".join(f"[bold]{name}[/] {count}" for name, count in phases.items()) or "none yet"
        )
        gpus = Table.grid(padding=(0, 1))
        gpus.add_row(
            "GPUs in use",
            ProgressBar(total=max(1, total_gpus), completed=used, width=40),
            f"{used}/{total_gpus}",
        )
        events = Table(title="recent decisions (Events)", show_edge=False, expand=True)
        events.add_column("time", no_wrap=True, min_width=8)
        events.add_column("job", no_wrap=True, min_width=12, max_width=28, overflow="ellipsis")
        events.add_column("reason", no_wrap=True, min_width=8, max_width=16, style="cyan")
        events.add_column("message", overflow="ellipsis", no_wrap=True, ratio=1)
        for row in watch.events:
            events.add_row(*row)
        self.live.update(Group(head, phase_line, gpus, events))


def _print_report(console: Any, report: Any, where: dict[str, Any], options: Any) -> None:
    from rich.table import Table

    console.print()
    table = Table(title="perfsched demo report", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row(
        "jobs",
        f"{report.submitted} submitted, {report.succeeded} succeeded, "
        f"{report.failed} failed, {report.unfinished} unfinished after "
        f"{where.get('elapsed_s', options.duration_s):.0f} s (limit {options.duration_s:.0f} s)",
    )
    table.add_row("avg JCT", "-" if report.avg_jct_s is None else f"{report.avg_jct_s:.1f} s")
    table.add_row("p99 JCT", "-" if report.p99_jct_s is None else f"{report.p99_jct_s:.1f} s")
    table.add_row("GPU utilisation", f"{report.utilisation:.0%}")
    table.add_row(
        "preemptions / resizes / restarts", f"{report.preemptions} / {report.resizes} / {report.restarts}"
    )
    table.add_row(
        "predictor error",
        "-"
        if report.predictor_error is None
        else f"{report.predictor_error:.1%} mean |predicted - observed| / observed "
        f"({report.predictor_samples} samples)",
    )
    for key, label in (
        ("logs", "logs"),
        ("extender_metrics_file", "extender metrics"),
        ("operator_metrics_file", "operator metrics"),
    ):
        if where.get(key):
            table.add_row(label, str(where[key]))
    console.print(table)
    if options.keep and where.get("kubeconfig"):
        console.print(
            f"cluster kept: export KUBECONFIG={where['kubeconfig']}; kubectl get tj -n perfsched-demo; "
            f"metrics at {where['extender_metrics']} and {where['operator_metrics']}"
        )
