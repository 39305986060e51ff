"""``perfsched demo --real``'s console side: runs ``perfsched_dev.demo.real`` and prints its report (I/O).

``run_real`` returns the exit code: 0 ok, 1 a step failed (or a job did not finish), 130 interrupted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def run_real(console: Any, *, keep: bool, state_dir: Path | None) -> int:
    from rich.table import Table

    from perfsched_dev.demo.real import RealDemoError, RealDemoOptions, default_state_dir, run_real_demo

    options = RealDemoOptions(state_dir=state_dir or default_state_dir(), keep=keep)
    try:
        report, where = run_real_demo(options, say=console.print)
    except RealDemoError as exc:
        console.print(f"\n[bold red]perfsched demo --real: {exc}[/]")
        return 1
    except KeyboardInterrupt:
        console.print("\n[yellow]perfsched demo --real: interrupted; the cluster was stopped.[/]")
        return 130

    def num(x: float | None, fmt: str = ".3f") -> str:
        return "-" if x is None else format(x, fmt)

    table = Table(title=f"perfsched demo --real: {report.elapsed_s:.0f} s, real PyTorch training on this CPU")
    for col in ("job", "phase", "steps", "preempt / resize / restart", "lost", "loss first -> last",
                "iterations/s observed (CPU)", "predicted (T4)"):  # fmt: skip
        table.add_column(col)
    for j in report.jobs:
        table.add_row(
            j.name,
            j.phase,
            f"{j.progress:.0f}/{j.total:.0f}",
            f"{j.preemptions} / {j.resizes} / {j.restarts}",
            f"{j.lost_work:.0f}",
            f"{num(j.first_loss)} -> {num(j.final_loss)}",
            num(j.observed, ".2f"),
            num(j.predicted, ".2f"),
        )
    console.print(table)
    for j in report.jobs:
        for r in j.restart_log:
            console.print(
                f"  {j.name}: resumed from step {r.resumed_from} at world size {r.world_before} -> "
                f"{r.world_after}; loss {num(r.loss_before)} over the 5 steps up to the checkpoint, "
                f"{num(r.loss_after)} over the first 5 after it"
            )
    console.print(
        "  observed throughput is this machine's CPU running the tiny model; predicted is the perfmodel "
        "predictor's figure for the T4 GPUs the exec nodes declare (it learns from the observed values)"
    )
    console.print(
        f"  trainer logs: {where['exec_dir']}; loss curves: {where['checkpoints']}/<job>/metrics.jsonl"
    )
    unfinished = [j.name for j in report.jobs if j.phase != "Succeeded"]
    if unfinished or len(report.jobs) < 3:
        console.print(f"[bold red]not every job succeeded: {', '.join(unfinished) or 'some never ran'}[/]")
        return 1
    return 0
