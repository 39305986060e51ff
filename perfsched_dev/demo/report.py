"""What the demo shows: live counts from TrainingJobs and the final report. Pure.

Inputs are TrainingJob objects as the API returns them (dicts) and samples the runner took while it
watched; nothing here talks to the cluster or reads a clock.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from scheduler.k8s.crd import PHASES, TERMINAL_PHASES, parse_status, parse_time

Obj = Mapping[str, Any]


def phase_of(tj: Obj) -> str:
    return str((tj.get("status") or {}).get("phase") or "Pending")


def phase_counts(tjs: Iterable[Obj]) -> dict[str, int]:
    """Jobs per phase, in lifecycle order, phases with no job left out."""
    counts = Counter(phase_of(tj) for tj in tjs)
    return {p: counts[p] for p in (*PHASES, *sorted(set(counts) - set(PHASES))) if counts[p]}


def gpus_in_use(tjs: Iterable[Obj]) -> int:
    """GPUs held by non-terminal jobs according to ``status.allocation`` (replicas x GPUs per replica)."""
    used = 0
    for tj in tjs:
        if phase_of(tj) in TERMINAL_PHASES:
            continue
        alloc = (tj.get("status") or {}).get("allocation") or {}
        per = alloc.get("gpusPerReplica") or (tj.get("spec") or {}).get("replicas", {}).get(
            "gpusPerReplica", 1
        )
        used += int(alloc.get("replicas") or 0) * int(per or 1)
    return used


def prediction_errors(tjs: Iterable[Obj]) -> list[float]:
    """|predicted - observed| / observed throughput of every job that reports both (> 0)."""
    out = []
    for tj in tjs:
        status = parse_status(tj)
        pred, obs = status.predicted_throughput, status.observed_throughput
        if pred and obs and pred > 0 and obs > 0:
            out.append(abs(pred - obs) / obs)
    return out


def time_average(samples: Sequence[tuple[float, float]]) -> float:
    """Time-weighted mean of a step function sampled as (time, value), each value held until the next."""
    if len(samples) < 2:
        return samples[0][1] if samples else 0.0
    total = samples[-1][0] - samples[0][0]
    if total <= 0:
        return samples[-1][1]
    area = sum(v * (t2 - t1) for (t1, v), (t2, _) in itertools.pairwise(samples))
    return area / total


@dataclass(frozen=True, slots=True)
class DemoReport:
    """The numbers the demo ends with."""

    submitted: int
    succeeded: int
    failed: int
    unfinished: int
    avg_jct_s: float | None
    p99_jct_s: float | None
    utilisation: float
    preemptions: int
    resizes: int
    restarts: int
    predictor_error: float | None
    predictor_samples: int
    #: the JCT of every job that succeeded, seconds, ascending
    jcts: tuple[float, ...] = ()


def build_report(
    tjs: Sequence[Obj],
    gpu_samples: Sequence[tuple[float, float]],
    total_gpus: int,
    error_samples: Sequence[float],
) -> DemoReport:
    """Summarise the run. JCT is ``status.completionTime - metadata.creationTimestamp`` of finished jobs
    (p99 by ``percentile``); utilisation is the time-average of GPUs in use over ``total_gpus``; predictor
    error is the mean of the relative errors sampled while jobs ran."""
    jcts = []
    succeeded = failed = 0
    preemptions = resizes = restarts = 0
    for tj in tjs:
        status = parse_status(tj)
        preemptions += status.preemptions
        resizes += status.resizes
        restarts += status.restarts
        if status.phase == "Succeeded":
            succeeded += 1
        elif status.phase == "Failed":
            failed += 1
        created = parse_time((tj.get("metadata") or {}).get("creationTimestamp"))
        done = parse_time(status.completion_time)
        if status.phase == "Succeeded" and created is not None and done is not None:
            jcts.append(done - created)
    util = time_average(gpu_samples) / total_gpus if total_gpus > 0 else 0.0
    return DemoReport(
        submitted=len(tjs),
        succeeded=succeeded,
        failed=failed,
        unfinished=len(tjs) - succeeded - failed,
        avg_jct_s=sum(jcts) / len(jcts) if jcts else None,
        p99_jct_s=percentile(jcts, 99) if jcts else None,
        utilisation=util,
        preemptions=preemptions,
        resizes=resizes,
        restarts=restarts,
        predictor_error=sum(error_samples) / len(error_samples) if error_samples else None,
        predictor_samples=len(error_samples),
        jcts=tuple(sorted(jcts)),
    )


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile of ``values``, interpolated linearly between the closest ranks (numpy's
    default, written out so that the report needs no numpy): rank ``q/100 x (n - 1)`` of the sorted values."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    pos = q / 100.0 * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _seconds(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f} s"


def _error(r: DemoReport) -> str:
    if r.predictor_error is None:
        return "-"
    return f"{r.predictor_error:.1%} ({r.predictor_samples} samples)"


def comparison_rows(a: DemoReport, b: DemoReport) -> list[tuple[str, str, str]]:
    """The two runs' figures side by side: (metric, first run, second run) per row."""

    def jobs(r: DemoReport) -> str:
        return f"{r.succeeded}/{r.submitted} succeeded, {r.failed} failed, {r.unfinished} unfinished"

    def actions(r: DemoReport) -> str:
        return f"{r.preemptions} / {r.resizes} / {r.restarts}"

    rows: list[tuple[str, Callable[[DemoReport], str]]] = [
        ("jobs", jobs),
        ("avg JCT", lambda r: _seconds(r.avg_jct_s)),
        ("p99 JCT", lambda r: _seconds(r.p99_jct_s)),
        ("GPU utilisation", lambda r: f"{r.utilisation:.0%}"),
        ("preemptions / resizes / restarts", actions),
        ("predictor error (mean |pred - obs| / obs)", _error),
    ]
    return [(label, show(a), show(b)) for label, show in rows]


def verdict(aware: DemoReport, baseline: DemoReport, aware_name: str, baseline_name: str) -> str:
    """One sentence on whether the aware policy's average JCT was lower than the baseline's, and by how
    much; it says so when it was not, and when the runs cannot be compared (a job unfinished in either,
    so the averages cover different jobs, or no job finished)."""
    a, b = aware.avg_jct_s, baseline.avg_jct_s
    if a is None or b is None:
        return "no comparison: a run finished no job"
    caveat = ""
    if aware.unfinished or baseline.unfinished or aware.failed or baseline.failed:
        caveat = (
            " (not every job succeeded in both runs, so the averages cover different jobs; "
            "try a longer --duration)"
        )
    if a < b:
        return (
            f"{aware_name}'s average JCT was lower: {a:.1f} s vs {b:.1f} s for {baseline_name} "
            f"({b / a:.2f}x){caveat}"
        )
    return f"{aware_name}'s average JCT was NOT lower: {a:.1f} s vs {b:.1f} s for {baseline_name}{caveat}"
