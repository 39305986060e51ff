"""``perfsched demo --compare``: the same workload under the default policy, then under a baseline.

Impure shell over ``perfsched_dev.demo.emulated.run_demo``: each run brings up its own local control plane
(so the second starts from the same empty cluster as the first), submits the same TrainingJobs on the same
schedule, watches them for at most the demo's duration and tears the cluster down. The second run keeps its
cluster state (logs, metrics scrapes) in a sibling directory, ``<state dir>-baseline``, so both runs' logs
survive. ``write_jct_cdf`` draws both runs' JCT distributions into one PNG.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from perfsched_dev.demo.emulated import DemoOptions, Watch, demo_state_dir, run_demo
from perfsched_dev.demo.report import DemoReport


@dataclass(frozen=True, slots=True)
class CompareRun:
    """One run of the comparison: its role (``default`` or ``baseline``), policy spec, report, where its
    logs are, and the wall seconds the whole run took (control plane up and down included)."""

    role: str
    policy: str
    report: DemoReport
    where: dict[str, Any]
    wall_s: float


def run_compare(
    options: DemoOptions,
    baseline: str,
    *,
    render: Callable[[Watch, DemoOptions, int], None] | None = None,
    say: Callable[[str], None] = print,
) -> list[CompareRun]:
    """Run the workload of ``options`` under ``options.policy``, then under ``baseline``; see the module
    docstring. A failing run raises ``DemoError`` (its cluster is torn down); nothing of a later run starts.
    """
    state = demo_state_dir(options)
    plan = (
        ("default", options.policy, state),
        ("baseline", baseline, state.with_name(f"{state.name}-baseline")),
    )
    runs: list[CompareRun] = []
    for i, (role, policy, state_dir) in enumerate(plan, start=1):
        say(f"[bold]run {i} of {len(plan)}[/]: {role} policy [cyan]{policy}[/]")
        t0 = time.monotonic()
        report, where = run_demo(replace(options, policy=policy, state_dir=state_dir), render=render, say=say)
        runs.append(CompareRun(role, policy, report, where, round(time.monotonic() - t0, 1)))
    return runs


def write_jct_cdf(path: Path, runs: Sequence[CompareRun], title: str = "") -> Path:
    """A PNG of each run's JCT CDF: the share of the *submitted* jobs finished within t seconds, so a run
    with unfinished jobs ends below 1."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for run in runs:
        jcts = run.report.jcts
        total = max(1, run.report.submitted)
        xs = [0.0, *jcts]
        ys = [0.0, *[(i + 1) / total for i in range(len(jcts))]]
        ax.step(xs, ys, where="post", label=f"{run.role}: {run.policy}")
    ax.set_xlabel("job completion time (seconds)")
    ax.set_ylabel("share of submitted jobs finished")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"JCT CDF {title}".strip())
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.subplots_adjust(left=0.1, right=0.97, bottom=0.12, top=0.91)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path
