"""Simulation reports: summary metrics from an engine run, JSON/CSV files and plots.

``summarize`` is pure: it turns an ``EngineResult`` into one flat ``dict`` of metrics (avg/p50/p99 JCT,
queueing delay (to the first start), waiting time (all time without GPUs), makespan, utilisation,
preemptions/restarts/migrations per job (a migration is a restart that moves a running job to other GPUs
without waiting; a preemption stops it), deadline satisfaction, finish-time fairness, engine speed).
``write_reports`` and ``write_plots`` write files (the only I/O here); ``write_plots`` writes SVG by
default (``scheduler.sim.svgplot``, no plotting library), and PNGs on request with matplotlib, imported
only then and drawn on the Agg canvas without ``pyplot``.

Finish-time fairness follows Themis' rho = T_shared / T_fair, where T_fair is the job's run time if
it had its fair share of the cluster: with N the average number of jobs in the system while the job
was, a job asking g of C GPUs gets min(g, C/N) GPUs, so T_fair = T_ideal x max(1, g N / C) (T_ideal =
the job's duration alone on the GPUs it asked for; for Philly jobs, the trace duration). rho <= 1 is
fair; we report its mean, its maximum and the share of jobs with rho <= 1.
"""

from __future__ import annotations

import bisect
import csv
import json
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from scheduler.sim import stats
from scheduler.sim.engine import EngineResult, JobRecord
from scheduler.sim.svgplot import Series, chart_svg

log = logging.getLogger(__name__)

#: the columns of the summary CSV, in order (JSON has the same keys)
SUMMARY_FIELDS = (
    "policy",
    "mre",
    "cluster",
    "trace",
    "load",
    "jobs",
    "jobs_total",
    "unfinished",
    "failed",
    "avg_jct_s",
    "p50_jct_s",
    "p99_jct_s",
    "avg_queueing_s",
    "p50_queueing_s",
    "p99_queueing_s",
    "avg_waiting_s",
    "makespan_s",
    "utilization",
    "preemptions",
    "preemptions_per_job",
    "restarts_per_job",
    "migrations_per_job",
    "resizes_per_job",
    "deadline_jobs",
    "deadline_met_ratio",
    "ftf_rho_avg",
    "ftf_rho_max",
    "ftf_fair_ratio",
    "events",
    "rounds",
    "skipped_rounds",
    "avg_jobs_per_round",
    "round_wall_s",
    "wall_s",
    "cpu_s",
    "events_per_s",
)


def _active_integral(result: EngineResult) -> tuple[list[float], list[float], list[float]]:
    """The series' times, jobs in the system (waiting + running) after each sample, and the integral
    of the latter up to each sample time (numpy's ``cumsum`` order: one running sum)."""
    t = result.series_t
    n = [float(w + r) for w, r in zip(result.series_waiting, result.series_running, strict=True)]
    area = [0.0] if t else []
    acc = 0.0
    for i in range(len(t) - 1):
        acc += n[i] * (t[i + 1] - t[i])
        area.append(acc)
    return t, n, area


def _fairness(result: EngineResult, done: Sequence[JobRecord]) -> tuple[float, float, float]:
    """Finish-time fairness of the finished jobs (module docstring): rho's mean, maximum and the share
    of jobs with rho <= 1; NaN where no job has an ideal duration.

    N (the jobs in the system while the job was) is the integral of the step series between the job's
    submit and finish times over that span, read off the running integral at the sample before each."""
    t, act, area = _active_integral(result)
    total = result.total_gpus
    last = max(0, len(t) - 1)
    right = bisect.bisect_right
    rho: list[float] = []
    for r in done:
        ideal = r.ideal_duration
        if not (math.isfinite(ideal) and ideal > 0):
            continue
        sub, fin = r.submit_time, r.finish if r.finish is not None else math.nan
        k = min(max(right(t, fin) - 1, 0), last)
        d = fin - t[k]
        at_fin = area[k] + act[k] * (d if d > 0.0 else 0.0)
        k = min(max(right(t, sub) - 1, 0), last)
        d = sub - t[k]
        at_sub = area[k] + act[k] * (d if d > 0.0 else 0.0)
        span = fin - sub
        n_avg = (at_fin - at_sub) / (span if span > 1e-9 else 1e-9)
        share = float(r.gpus) * (n_avg if n_avg > 1.0 else 1.0) / total
        rho.append(span / (ideal * (share if share > 1.0 else 1.0)))
    if not rho:
        return math.nan, math.nan, math.nan
    fair = sum(1 for v in rho if v <= 1.0 + 1e-9) / len(rho)
    return stats.mean(rho), max(rho), fair


def summarize(result: EngineResult, **labels: Any) -> dict[str, Any]:
    """Flat metrics of one run; ``labels`` (policy, mre, cluster, trace, load) are copied in front.

    Means and percentiles are numpy's, computed without it (``scheduler.sim.stats``)."""
    recs = result.records
    done = [r for r in recs if r.finish is not None]
    jct = [r.finish - r.submit_time for r in done if r.finish is not None]
    queue = [q for q in (r.queueing_delay for r in done) if q is not None]
    first = min((r.submit_time for r in recs), default=0.0)
    makespan = max((r.finish for r in done if r.finish is not None), default=first) - first
    gpu_s = sum(r.gpu_seconds for r in recs)
    util = gpu_s / (result.total_gpus * makespan) if makespan > 0 and result.total_gpus else math.nan
    n = max(1, len(recs))
    with_deadline = [r for r in recs if r.deadline is not None]
    met = [r for r in with_deadline if r.finish is not None and r.finish <= (r.deadline or 0.0) + 1e-6]

    rho_avg = rho_max = fair = math.nan
    if done and result.series_t:
        rho_avg, rho_max, fair = _fairness(result, done)

    out: dict[str, Any] = {k: labels.get(k) for k in ("policy", "mre", "cluster", "trace", "load")}
    out.update(
        jobs=len(done),
        jobs_total=len(recs),
        unfinished=sum(1 for r in recs if r.finish is None and not r.failed),
        failed=sum(1 for r in recs if r.failed),
        avg_jct_s=stats.mean(jct),
        p50_jct_s=stats.percentile(jct, 50),
        p99_jct_s=stats.percentile(jct, 99),
        avg_queueing_s=stats.mean(queue),
        p50_queueing_s=stats.percentile(queue, 50),
        p99_queueing_s=stats.percentile(queue, 99),
        # all the time without GPUs, also after preemptions (a preemptive policy starts each job at once)
        avg_waiting_s=stats.mean(
            [max(0.0, (r.finish or 0.0) - r.submit_time - r.held_seconds) for r in done]
        ),
        makespan_s=makespan,
        utilization=util,
        preemptions=sum(r.preemptions for r in recs),
        preemptions_per_job=sum(r.preemptions for r in recs) / n,
        restarts_per_job=sum(r.restarts for r in recs) / n,
        migrations_per_job=sum(r.migrations for r in recs) / n,
        resizes_per_job=sum(r.resizes for r in recs) / n,
        deadline_jobs=len(with_deadline),
        deadline_met_ratio=(len(met) / len(with_deadline)) if with_deadline else None,
        ftf_rho_avg=rho_avg,
        ftf_rho_max=rho_max,
        ftf_fair_ratio=fair,
        events=result.events,
        rounds=result.rounds,
        skipped_rounds=result.skipped_rounds,
        avg_jobs_per_round=result.jobs_in_rounds / result.rounds if result.rounds else 0.0,
        round_wall_s=result.round_wall_s,
        wall_s=result.wall_s,
        cpu_s=result.cpu_s,
        events_per_s=result.events / result.wall_s if result.wall_s > 0 else math.nan,
    )
    return out


def _clean(value: Any) -> Any:
    """JSON has no NaN: write null instead."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def to_json(report: Mapping[str, Any]) -> str:
    return json.dumps(_clean(dict(report)), indent=2, sort_keys=False)


def write_reports(
    out_dir: Path, report: Mapping[str, Any], runs: Sequence[tuple[str, EngineResult]]
) -> list[Path]:
    """Write ``report.json``, ``summary.csv`` and ``jobs-<run>.csv`` per run into ``out_dir``.

    ``<run>`` is the run's label with a policy spec's ``:`` and ``;`` replaced by ``_``.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    p = out_dir / "report.json"
    p.write_text(to_json(report) + "\n", encoding="utf-8")
    written.append(p)
    p = out_dir / "summary.csv"
    with p.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(SUMMARY_FIELDS), extrasaction="ignore")
        w.writeheader()
        for row in report.get("results", []):
            w.writerow({k: ("" if v is None else v) for k, v in _clean(row).items()})
    written.append(p)
    for label, result in runs:
        # a spec's ':' and ';' make awkward file names: las:x=1;y=2 -> las_x=1_y=2
        p = out_dir / f"jobs-{label.replace(':', '_').replace(';', '_')}.csv"
        with p.open("w", newline="", encoding="utf-8") as fh:
            w2 = csv.writer(fh)
            w2.writerow(
                ["job", "submit_s", "gpus", "first_start_s", "finish_s", "jct_s", "queueing_s",
                 "preemptions", "restarts", "migrations", "resizes", "gpu_seconds", "deadline_s", "failed"]
            )  # fmt: skip
            for r in result.records:
                w2.writerow(
                    [r.name, r.submit_time, r.gpus, r.first_start, r.finish, r.jct, r.queueing_delay,
                     r.preemptions, r.restarts, r.migrations, r.resizes, round(r.gpu_seconds, 3), r.deadline,
                     r.failed]
                )  # fmt: skip
        written.append(p)
    return written


def _thin(t: Sequence[float], y: Any, limit: int = 4000) -> tuple[Any, Any]:
    import numpy as np  # only for the PNG plots, which import matplotlib (and so numpy) anyway

    ta, ya = np.asarray(t, dtype=float), np.asarray(y, dtype=float)
    if ta.size > limit:
        idx = np.linspace(0, ta.size - 1, limit).astype(int)
        ta, ya = ta[idx], ya[idx]
    return ta, ya


def _figure(size: tuple[float, float]) -> tuple[Any, Any]:
    """A figure with one axes on the Agg canvas, margins fixed for one-line labels and titles.

    Built from ``matplotlib.figure.Figure`` without ``pyplot`` (whose import and figure manager cost
    more than drawing these plots), and with fixed margins instead of ``tight_layout`` (which measures
    every tick label by rendering it, once per figure).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size)
    FigureCanvasAgg(fig)
    fig.subplots_adjust(left=0.1, right=0.97, bottom=0.12, top=0.91)
    return fig, fig.add_subplot()


#: the plot formats ``write_plots`` writes: SVG text (default, no plotting library) or matplotlib PNGs
PLOT_FORMATS = ("svg", "png")


def _plot_series(runs: Sequence[tuple[str, EngineResult]]) -> list[tuple[str, str, str, bool, list[Series]]]:
    """The three plots' data: (file stem, y label, title stem, log x axis, series)."""
    cdf: list[Series] = []
    util: list[Series] = []
    queue: list[Series] = []
    for label, res in runs:
        jct = sorted(r.jct for r in res.records if r.jct is not None)
        if jct:
            n = len(jct)
            cdf.append(Series(label, [v / 3600.0 for v in jct], [(i + 1) / n for i in range(n)]))
        if res.series_t:
            hours = [t / 3600.0 for t in res.series_t]
            total = max(1, res.total_gpus)
            util.append(Series(label, hours, [u / total for u in res.series_used], step=True))
            queue.append(Series(label, hours, [float(w) for w in res.series_waiting], step=True))
    return [
        ("jct_cdf", "fraction of jobs", "JCT CDF", True, cdf),
        ("utilization", "GPUs allocated / total", "GPUs allocated / total over time", False, util),
        ("queue_length", "jobs waiting", "jobs waiting over time", False, queue),
    ]


def write_plots(
    out_dir: Path, runs: Sequence[tuple[str, EngineResult]], title: str = "", fmt: str = "svg"
) -> list[Path]:
    """The plots: JCT CDF per run, GPU utilisation over time, queue length over time.

    ``fmt="svg"`` writes them as SVG text (``scheduler.sim.svgplot``, no plotting library imported);
    ``fmt="png"`` draws PNGs with matplotlib's Agg canvas.
    """
    if fmt not in PLOT_FORMATS:
        raise ValueError(f"plot format {fmt!r}: expected one of {', '.join(PLOT_FORMATS)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for stem, ylabel, title_stem, xlog, series in _plot_series(runs):
        xlabel = "job completion time (hours, log scale)" if xlog else "simulated time (hours)"
        full_title = f"{title_stem} {title}".strip()
        path = out_dir / f"{stem}.{fmt}"
        if fmt == "svg":
            path.write_text(
                chart_svg(series, title=full_title, xlabel=xlabel, ylabel=ylabel, xlog=xlog), encoding="utf-8"
            )
        else:
            _write_png(path, series, title=full_title, xlabel=xlabel, ylabel=ylabel, xlog=xlog)
        paths.append(path)
    return paths


def _write_png(
    path: Path, series: Sequence[Series], *, title: str, xlabel: str, ylabel: str, xlog: bool
) -> None:
    fig, ax = _figure((7, 4.5) if xlog else (8, 4))
    for s in series:
        if s.step:
            t, y = _thin(s.x, s.y)
            ax.step(t, y, where="post", label=s.label, linewidth=0.8)
        else:
            ax.plot(s.x, s.y, label=s.label)
    if xlog:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=110)


def per_queue(
    result: EngineResult, queue_of: Mapping[str, str], weights: Mapping[str, float]
) -> dict[str, dict[str, Any]]:
    """Per tenant queue: jobs, jobs finished, average JCT (s), GPU-seconds used, share of all GPU-seconds
    and that share over the queue's weight share (1.0 = its fair share of GPU time)."""
    total_gpu_s = sum(r.gpu_seconds for r in result.records) or 1.0
    total_w = sum(weights.values()) or 1.0
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(weights):
        recs = [r for r in result.records if queue_of.get(r.name) == name]
        jcts = [r.jct for r in recs if r.jct is not None]
        gpu_s = sum(r.gpu_seconds for r in recs)
        share = gpu_s / total_gpu_s
        out[name] = {
            "jobs": len(recs),
            "finished": len(jcts),
            "avg_jct_s": sum(jcts) / len(jcts) if jcts else math.nan,
            "gpu_seconds": gpu_s,
            "gpu_share": share,
            "gpu_share_over_weight_share": share / (weights[name] / total_w),
        }
    return out
