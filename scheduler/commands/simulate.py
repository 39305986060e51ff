"""``perfsched simulate`` and ``perfsched experiment survey-mre|gavel-las``: simulation from the CLI.

Parses and checks the options, runs ``scheduler.sim.simulations.run_simulations`` (``gavel-las``:
``scheduler.sim.gavel.run_gavel_las``), prints a table (or the report as JSON on stdout with ``--json``),
and writes the JSON/CSV report and PNG plots under ``--out``.
A ``rich`` progress bar goes to stderr on long runs when it is a terminal (never with ``--json``). User
errors raise ``ConfigError`` (exit 2, one line, no traceback).
"""

from __future__ import annotations

import contextlib
import gc
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from scheduler.core.errors import ConfigError

_PROGRESS_MIN_JOBS = 2000


def _ints(text: str, option: str) -> tuple[int, ...]:
    try:
        out = tuple(int(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise ConfigError(f"{option}: not a list of integers: {text!r}") from None
    if not out:
        raise ConfigError(f"{option}: give at least one value")
    return out


def _floats(text: str, option: str) -> tuple[float, ...]:
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        pct = part.endswith("%")
        try:
            value = float(part[:-1] if pct else part)
        except ValueError:
            raise ConfigError(f"{option}: not a number: {part!r}") from None
        out.append(value / 100.0 if pct else value)
    if not out:
        raise ConfigError(f"{option}: give at least one value")
    return tuple(out)


def _policy_configs(path: Path | None) -> dict[str, dict[str, Any]]:
    if path is None:
        return {}
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read policy config: {exc}") from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise ConfigError(f"{path}: must map policy names to config mappings")
    return {str(k): dict(v) for k, v in data.items()}


def _policy_specs(text: str, configs: dict[str, dict[str, Any]], option: str = "--policy") -> tuple[str, ...]:
    """The canonical spec strings of ``text``, each built once so a bad spec fails before any run."""
    from scheduler.policies import make_policy_from_spec, parse_policy_specs

    try:
        specs = parse_policy_specs(text)
        for spec in specs:
            make_policy_from_spec(spec, configs.get(spec.name))
    except ConfigError as exc:
        raise ConfigError(f"{option}: {exc}") from None
    return tuple(s.text for s in specs)


def _fmt(v: Any, kind: str = "") -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if kind == "h":
        return f"{v / 3600.0:.2f}"
    if kind == "pct":
        return f"{100 * v:.1f}%"
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def _print_table(report: dict[str, Any], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    cols = [
        ("policy", "policy", ""),
        ("mre", "MRE", "pct"),
        ("jobs", "jobs", ""),
        ("avg JCT h", "avg_jct_s", "h"),
        ("p50 JCT h", "p50_jct_s", "h"),
        ("p99 JCT h", "p99_jct_s", "h"),
        ("avg queue h", "avg_queueing_s", "h"),
        ("makespan h", "makespan_s", "h"),
        ("util", "utilization", "pct"),
        ("preempt/job", "preemptions_per_job", ""),
        ("restarts/job", "restarts_per_job", ""),
        ("FTF rho avg", "ftf_rho_avg", ""),
        ("wall s", "wall_s", ""),
    ]
    # the policy column shows each full spec string, however narrow the terminal
    widest = max((len(str(r.get("policy", ""))) for r in report["results"]), default=6)
    for header, _, _ in cols:
        if header == "policy":
            table.add_column(header, no_wrap=True, min_width=widest)
        else:
            table.add_column(header, justify="right")
    for row in report["results"]:
        table.add_row(*[_fmt(row.get(key), kind) for _, key, kind in cols])
    console = Console()
    console.print(table)
    load = report["load"]
    if load["mode"] == "raw":
        console.print(f"load: raw trace times (offered load {load['raw_offered_load']:.2f} of the cluster)")
    else:
        console.print(
            f"load: {load['target']:g} of {report['cluster_gpus']} GPUs (raw trace offers "
            f"{load['raw_offered_load']:.2f}; inter-arrival times x {load['interarrival_factor']:.2f})"
        )
    console.print(f"models: {report['model_assignment']}")
    if report.get("jobs_dropped_too_large"):
        console.print(
            f"dropped {report['jobs_dropped_too_large']} jobs asking for more GPUs than the cluster has"
        )


@contextlib.contextmanager
def _fewer_collections(young: int = 20_000) -> Iterator[None]:
    """Run the cyclic garbage collector less often while simulating, then as before.

    A replay allocates millions of short-lived tuples and records beside some 10^5 long-lived objects
    (jobs, their records, the trace, the truth table); at the default thresholds (700, 10, 10) the
    collector walks the young ones every 700 allocations and the old ones again and again, about 5% of
    the process' CPU on the Philly 10k replay. Reference counting frees nearly all of it anyway; larger
    thresholds only let the few cycles wait longer.
    """
    old = gc.get_threshold()
    gc.set_threshold(young, 20, 100)
    try:
        yield
    finally:
        gc.set_threshold(*old)


def _run(
    req: Any, *, as_json: bool, out: Path | None, title: str, emit: bool = True, plot_format: str = "svg"
) -> dict[str, Any]:
    from scheduler.sim.reports import to_json, write_plots, write_reports
    from scheduler.sim.simulations import run_simulations

    # a bar only where someone watches it: on a terminal (rich draws nothing elsewhere, and its import
    # is about 2% of a 10k replay's process)
    show_progress = (
        not as_json and (req.max_jobs or _PROGRESS_MIN_JOBS) >= _PROGRESS_MIN_JOBS and sys.stderr.isatty()
    )
    if show_progress:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        tasks: dict[str, Any] = {}

        def on_progress(label: str, done: int, total: int) -> None:
            if label not in tasks:
                tasks[label] = progress.add_task(f"simulating {label}", total=total)
            progress.update(tasks[label], completed=done)

        with progress, _fewer_collections():
            outcome = run_simulations(req, on_progress=on_progress)
    else:
        with _fewer_collections():
            outcome = run_simulations(req)
    report = outcome.report
    if out is not None:
        files = write_reports(out, report, outcome.runs)
        files += write_plots(
            out, outcome.runs, title=f"({report['trace']}, {report['cluster']})", fmt=plot_format
        )
        report["files"] = [str(f) for f in files]
        (out / "report.json").write_text(to_json(report) + "\n", encoding="utf-8")
    if not emit:
        return report
    if as_json:
        typer.echo(to_json(report))
    else:
        _print_table(report, title)
        if out is not None:
            typer.echo(f"report and plots written to {out}/")
    return report


def register(app: typer.Typer) -> None:
    """Add ``simulate`` and the ``experiment`` group to the CLI."""
    app.command("simulate")(simulate)
    experiment = typer.Typer(help="Reproduce published experiments with the simulator.", no_args_is_help=True)
    app.add_typer(experiment, name="experiment")
    experiment.command("survey-mre")(survey_mre)
    experiment.command("gavel-las")(gavel_las)


# default sweep: sized for a 2-core box (about two minutes); Gavel swept 0.4 .. 6 jobs/hour, 5,000 jobs
_GAVEL_RATES = (1.0, 3.0, 4.4, 5.2, 5.6)
_GAVEL_RATES_TEXT = ",".join(f"{r:g}" for r in _GAVEL_RATES)
_GAVEL_JOBS = 600
_GAVEL_WINDOW = (200, 450)


def simulate(
    policy: str | None = typer.Option(
        None,
        "--policy",
        help="Policy spec(s) NAME[:key=value;...], comma-separated, e.g. "
        "las,las:heterogeneity=agnostic,fifo:backfill=true (a [list] value keeps its commas) "
        "[default: the operator's default, scheduler.policies.DEFAULT_POLICY_SPEC].",
    ),
    trace: str = typer.Option(
        "philly-10k", "--trace", help="Trace CSV file, or a name: philly-10k, philly-full."
    ),
    cluster: str | None = typer.Option(
        None, "--cluster", help="Cluster spec YAML, or a shipped name (default homogeneous-64xV100)."
    ),
    gpus: int | None = typer.Option(None, "--gpus", help="Homogeneous V100 cluster of N GPUs (8 per node)."),
    load: str = typer.Option("0.8", "--load", help="Offered load as a fraction of the cluster, or 'raw'."),
    mre: str = typer.Option(
        "0", "--mre", help="Injected mean relative error(s) of the policy's oracle, e.g. 0,0.1,25%."
    ),
    round_seconds: float = typer.Option(
        360.0, "--round-seconds", help="Round period while jobs wait (0 = rounds on events only)."
    ),
    restart_cost: float = typer.Option(30.0, "--restart-cost", help="Seconds a restart or resize costs."),
    seed: int = typer.Option(0, "--seed", help="Seed for model assignment and injected errors."),
    out: str = typer.Option(
        "out/simulate", "--out", help="Directory for report.json, summary.csv, jobs-*.csv and the plots."
    ),
    plot_format: str = typer.Option(
        "svg",
        "--plot-format",
        help="Plots in --out: svg (drawn directly, fast) or png (matplotlib, slower to start).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON on stdout."),
    jobs: int | None = typer.Option(None, "--jobs", help="Replay only the first N jobs of the trace."),
    elastic: bool = typer.Option(False, "--elastic", help="Make jobs elastic (1 .. 2x their traced GPUs)."),
    deadline_slack: float | None = typer.Option(
        None, "--deadline-slack", help="Give each job the deadline submit + X x its traced duration."
    ),
    oracle: str = typer.Option(
        "table",
        "--oracle",
        help=(
            "What the policy is told: table (the true table, with --mre's error), predictor (the operator's "
            "oracle: the shipped predictor corrected online by each running job's measured throughput) or "
            "predictor-cold (the shipped predictor alone, never corrected)."
        ),
    ),
    policy_config: str = typer.Option(
        "",
        "--policy-config",
        help="YAML mapping policy name -> config fields (a base that each spec's keys override).",
    ),
) -> None:
    """Replay a job trace through the scheduling policies on a simulated cluster."""
    from scheduler.policies import DEFAULT_POLICY_SPEC
    from scheduler.sim.reports import PLOT_FORMATS
    from scheduler.sim.simulations import SimulationRequest
    from scheduler.sim.traces import parse_load

    if plot_format not in PLOT_FORMATS:
        raise ConfigError(f"--plot-format: expected one of {', '.join(PLOT_FORMATS)}, got {plot_format!r}")
    configs = _policy_configs(Path(policy_config) if policy_config else None)
    specs = _policy_specs(DEFAULT_POLICY_SPEC if policy is None else policy, configs)
    req = SimulationRequest(
        policies=specs,
        trace=trace,
        cluster=cluster,
        gpus=gpus,
        load=parse_load(load),
        mres=_floats(mre, "--mre"),
        round_seconds=round_seconds,
        restart_cost_s=restart_cost,
        seed=seed,
        max_jobs=jobs,
        elastic=elastic,
        deadline_slack=deadline_slack,
        oracle=oracle,
        policy_configs=configs,
    )
    _run(
        req,
        as_json=as_json,
        out=Path(out) if out else None,
        title="perfsched simulate",
        plot_format=plot_format,
    )


def survey_mre(
    trace: str = typer.Option(
        "philly-10k", "--trace", help="Trace CSV file or name (10,000 consecutive jobs)."
    ),
    gpus: int = typer.Option(64, "--gpus", help="Homogeneous GPUs (8 per node)."),
    load: str = typer.Option("1.0", "--load", help="Offered load as a fraction of the cluster, or 'raw'."),
    mre: str = typer.Option("0,0.1,0.25,0.5,0.75", "--mre", help="SRSF execution-time MREs."),
    seed: int = typer.Option(0, "--seed", help="Seed for model assignment and injected errors."),
    jobs: int = typer.Option(10_000, "--jobs", help="Consecutive jobs from the start of the trace."),
    baselines: str = typer.Option("las,fifo", "--baselines", help="Performance-unaware policies to compare."),
    out: str = typer.Option("out/survey-mre", "--out", help="Directory for the report and plot."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON on stdout."),
) -> None:
    """SRSF with execution-time error MRE 0..75% vs LAS and FIFO on 64 GPUs (the survey's Figure 4)."""
    from scheduler.sim.reports import to_json
    from scheduler.sim.simulations import SimulationRequest
    from scheduler.sim.traces import parse_load

    mres = _floats(mre, "--mre")
    base = tuple(b.strip() for b in baselines.split(",") if b.strip())
    plan = tuple(("srsf", m) for m in mres) + tuple((b, 0.0) for b in base)
    req = SimulationRequest(
        policies=("srsf", *base),
        trace=trace,
        gpus=gpus,
        load=parse_load(load),
        mres=mres,
        seed=seed,
        max_jobs=jobs,
        survey=True,
        plan=plan,
        policy_configs={"fifo": {"backfill": True}},
    )
    out_dir = Path(out) if out else None
    report = _run(req, as_json=as_json, out=None, title="survey-mre", emit=False)
    _survey_outputs(report, out_dir)
    if as_json:
        typer.echo(to_json(report))
    else:
        _print_table(report, "survey-mre (avg JCT by setting)")
        _print_survey(report, out_dir)


def gavel_las(
    rates: str = typer.Option(_GAVEL_RATES_TEXT, "--rates", help="Input job rates (jobs/hour) to sweep."),
    aware: str = typer.Option(
        "las", "--aware", help="Policy spec of heterogeneity-aware LAS (Gavel's curve)."
    ),
    agnostic: str = typer.Option(
        "las:heterogeneity=agnostic", "--agnostic", help="Policy spec of agnostic LAS (the LAS curve)."
    ),
    ordered: str = typer.Option(
        "las:heterogeneity=ordered",
        "--ordered",
        help="Policy spec of the newest-GPU-first baseline the aware curve is compared with first "
        "('' to leave it out).",
    ),
    jobs: int = typer.Option(_GAVEL_JOBS, "--jobs", help="Jobs generated per trace."),
    window: str = typer.Option(
        f"{_GAVEL_WINDOW[0]}:{_GAVEL_WINDOW[1]}",
        "--window",
        help="Job ids START:END whose JCTs are averaged (Gavel: 4000:5000 of each trace).",
    ),
    seeds: str = typer.Option(
        "0",
        "--seeds",
        help="Generator seeds, comma-separated; averaged (the paper: 0,1,2; its printed values: 0).",
    ),
    restart_cost: float = typer.Option(
        0.0, "--restart-cost", help="Seconds a preemption or migration costs (Gavel's simulator: 0)."
    ),
    quick: bool = typer.Option(
        False,
        "--quick",
        help="A few seconds' sweep for tests and smoke checks: rates 2,5.6, 120 jobs, window 30:90 "
        "(replaces --rates, --jobs, --window).",
    ),
    out: str = typer.Option("out/gavel-las", "--out", help="Directory for report.json and the plot."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON on stdout."),
) -> None:
    """LAS vs heterogeneity-aware LAS on Gavel's cluster and workload, beside Gavel's Figure 8."""
    from scheduler.sim.gavel import GavelLasRequest, run_gavel_las
    from scheduler.sim.reports import to_json

    if quick:
        rates, jobs, window = "2,5.6", 120, "30:90"
    start_end = window.split(":")
    try:
        win = (int(start_end[0]), int(start_end[1]))
    except (ValueError, IndexError):
        raise ConfigError(f"--window: must be START:END job ids, got {window!r}") from None
    if len(start_end) != 2:
        raise ConfigError(f"--window: must be START:END job ids, got {window!r}")
    req = GavelLasRequest(
        rates=_floats(rates, "--rates"),
        aware=aware,
        agnostic=agnostic,
        ordered=ordered,
        jobs=jobs,
        window=win,
        seeds=_ints(seeds, "--seeds"),
        restart_cost_s=restart_cost,
    )
    say = (lambda *_: None) if as_json else _gavel_progress
    report = run_gavel_las(req, on_run=say)
    out_dir = Path(out) if out else None
    if out_dir is not None:
        report["files"] = _gavel_outputs(report, out_dir)
    if as_json:
        typer.echo(to_json(report))
    else:
        _print_gavel(report)


def _gavel_progress(spec: str, rate: float, row: dict[str, Any]) -> None:
    typer.echo(
        f"  rate {rate:g}/h  {spec}: avg JCT {row['avg_jct_h']:.1f} h ({row['wall_s']:.0f} s)", err=True
    )


def _gavel_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per rate: our agnostic and aware averages and the paper's LAS and Gavel at that rate."""
    from scheduler.sim.gavel import paper_figure, paper_value

    paper = paper_figure()
    by_rate: dict[float, dict[str, Any]] = {}
    for r in report["results"]:
        row = by_rate.setdefault(r["input_job_rate_per_h"], {"rate": r["input_job_rate_per_h"]})
        row.setdefault(f"{r['role']}_runs", []).append(r["avg_jct_h"])
        row[f"{r['role']}_policy"] = r["policy"]
        row[f"{r['role']}_unfinished"] = row.get(f"{r['role']}_unfinished", 0) + r["unfinished"]
    for row in by_rate.values():
        for role in ("agnostic", "aware", "ordered"):
            runs = row.get(f"{role}_runs", [])
            row[role] = sum(runs) / len(runs) if runs else None  # mean over seeds
    out = []
    for rate, row in sorted(by_rate.items()):
        row["paper_las"] = paper_value(paper, "LAS", rate)
        row["paper_gavel"] = paper_value(paper, "Gavel", rate)
        out.append(row)
    return out


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or not (a > 0 and b > 0) or math.isnan(a) or math.isnan(b):
        return "-"
    return f"{a / b:.2f}x"


def _hours(v: float | None) -> str:
    return "-" if v is None or math.isnan(v) else f"{v:.1f}"


def _print_gavel(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    rows = _gavel_rows(report)
    aware = next((r["policy"] for r in report["results"] if r["role"] == "aware"), "aware")
    agnostic = next((r["policy"] for r in report["results"] if r["role"] == "agnostic"), "agnostic")
    table = Table(
        title="gavel-las: average JCT (hours) of the window's jobs (mean over seeds), by input job rate"
    )
    for header in ("jobs/h", "ours\naware", "ours\nordered", "gain vs\nordered", "ours\nagnostic",
                   "gain vs\nagnostic", "paper\nLAS", "paper\nGavel", "paper\ngain"):  # fmt: skip
        table.add_column(header, justify="right", no_wrap=True)
    for r in rows:
        table.add_row(
            f"{r['rate']:g}",
            _hours(r.get("aware")),
            _hours(r.get("ordered")),
            _ratio(r.get("ordered"), r.get("aware")),
            _hours(r.get("agnostic")),
            _ratio(r.get("agnostic"), r.get("aware")),
            _hours(r["paper_las"]),
            _hours(r["paper_gavel"]),
            _ratio(r["paper_las"], r["paper_gavel"]),
        )
    console = Console()
    console.print(table)
    ordered = next((r["policy"] for r in report["results"] if r["role"] == "ordered"), "")
    console.print(f"ours aware: {aware}")
    if ordered:
        console.print(f"ours ordered: {ordered}")
    console.print(f"ours agnostic: {agnostic}")
    console.print(
        "gain = baseline / aware average JCT (ordered: newest GPU first, the baseline an admin "
        f"configures). Paper: {report['paper']} (seed-0 values as printed by Gavel's "
        "notebook; interpolated between its rates). Ours: "
        f"{report['jobs_per_trace']} jobs per trace, window {report['window'][0]}:{report['window'][1]}, "
        f"seeds {','.join(map(str, report['seeds']))}, {report['cluster_gpus']} GPUs, "
        f"restart cost {report['restart_cost_s']:g} s. "
        "Our LAS is Tiresias 2D-LAS, Gavel's is max-min fair time sharing: see docs/gavel-las.md."
    )
    unfinished = sum(r["unfinished"] for r in report["results"])
    if unfinished:
        console.print(f"{unfinished} window jobs did not finish (counted out of the averages)")
    for f in report.get("files", []):
        if f.endswith(".png"):
            console.print(f"plot: {f}")


def _gavel_outputs(report: dict[str, Any], out: Path) -> list[str]:
    """``report.json`` and ``gavel_las.png`` (our two curves beside the paper's) under ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from scheduler.sim.reports import to_json

    out.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4))
    rows = _gavel_rows(report)
    for role, colour in (("agnostic", "#dd8452"), ("ordered", "#55a868"), ("aware", "#4c72b0")):
        pts = [(r["rate"], r[role]) for r in rows if r.get(role) is not None]
        if pts:
            label = f"ours: {rows[0][f'{role}_policy']}"
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", color=colour, label=label)
    for name, colour in (("LAS", "#dd8452"), ("Gavel", "#4c72b0")):
        ref = sorted(
            (p["input_job_rate_per_h"], p["avg_jct_h"])
            for p in report["paper_results"]
            if p["policy"] == name
        )
        ax.plot(
            [p[0] for p in ref], [p[1] for p in ref], "--", color=colour, alpha=0.7, label=f"paper: {name}"
        )
    ax.set_xlabel("input job rate (jobs/hour)")
    ax.set_ylabel("average JCT (hours)")
    ax.set_ylim(0, 100)
    ax.set_title("LAS vs heterogeneity-aware LAS, 36 K80+P100+V100 (Gavel Fig. 8)", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    png = out / "gavel_las.png"
    fig.savefig(png, dpi=110)
    plt.close(fig)
    files = [str(png), str(out / "report.json")]
    (out / "report.json").write_text(to_json({**report, "files": files}) + "\n", encoding="utf-8")
    return files


def _survey_label(row: dict[str, Any]) -> str:
    return f"SRSF {100 * row['mre']:g}%" if row["policy"] == "srsf" else str(row["policy"]).upper()


def _survey_outputs(report: dict[str, Any], out: Path | None) -> None:
    """The survey's table (avg JCT and its ratio to SRSF with MRE 0) and bar plot, saved under ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from scheduler.sim.reports import to_json

    rows = report["results"]
    ref = next((r["avg_jct_s"] for r in rows if r["policy"] == "srsf" and r["mre"] == 0), None)
    labels, values = [], []
    for r in rows:
        labels.append(_survey_label(r))
        values.append(r["avg_jct_s"] / 3600.0)
        r["jct_ratio_to_srsf_mre0"] = (r["avg_jct_s"] / ref) if ref else None
    if out is None:
        return
    out.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.bar(
        labels, values, color=["#4c72b0"] * sum(1 for r in rows if r["policy"] == "srsf") + ["#dd8452"] * 9
    )
    ax.set_ylabel("average JCT (hours)")
    load = report["load"]
    load_txt = "raw trace times" if load["mode"] == "raw" else f"load {load['target']:g}"
    ax.set_title(f"{report['trace_jobs']} Philly jobs, {report['cluster_gpus']} GPUs, {load_txt}")
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "survey_mre.png", dpi=110)
    plt.close(fig)
    report["files"] = [str(out / "survey_mre.png"), str(out / "report.json")]
    (out / "report.json").write_text(to_json(report) + "\n", encoding="utf-8")


def _print_survey(report: dict[str, Any], out: Path | None) -> None:
    typer.echo("")
    typer.echo(f"{'setting':<12} {'avg JCT (h)':>12} {'vs SRSF 0%':>11}")
    for r in report["results"]:
        ratio = r.get("jct_ratio_to_srsf_mre0")
        avg = r["avg_jct_s"] / 3600.0
        typer.echo(
            f"{_survey_label(r):<12} {avg:>12.2f} {ratio:>10.2f}x"
            if ratio
            else f"{_survey_label(r):<12} {avg:>12.2f}"
        )
    if out is not None:
        typer.echo(f"plot: {out / 'survey_mre.png'}")
