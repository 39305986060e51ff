"""Benchmark: the whole ``perfsched simulate`` process against the naive reference simulator, same run.

Replays the Philly 10k trace with SRSF on 64 GPUs at load 0.8, as a user runs it: a fresh process with
its imports, trace parsing, rounds, table, report and plots (``perfsched simulate --policy srsf --gpus 64
--load 0.8 --out DIR``; ``--no-files``: ``--out '' --json``, no files), and the reference
``shared/bench/refsim.py TRACE --gpus 64 --load 0.8 --policies srsf:0`` (an independent event-driven
simulator of a homogeneous pool, numpy and pandas), alternately, ``--repeat`` times each. Prints each
one's median and best wall time and CPU time (user + system of the child process) and the ratio
perfsched / reference of the medians; the target is a CPU ratio <= 1.0. The machine is shared: the two run
interleaved so that both see the same load, and CPU time says more than wall time there. Each command
runs once untimed first, and perfsched's runs may write bytecode (to a private ``PYTHONPYCACHEPREFIX``,
whatever ``PYTHONDONTWRITEBYTECODE`` says), so that neither side pays for compiling its modules, as
neither does once installed (pip compiles bytecode at install).

The reference needs pandas, which perfsched does not depend on: ``--ref-python`` names an interpreter
that has numpy and pandas (default: this one). ``--baseline DIR`` also runs the same command from
another source tree of perfsched (e.g. ``git archive REV | tar -x -C DIR``) with this interpreter,
interleaved with the other two, so a before/after comparison sees the same load. Run from the
repository root: ``python bench/sim_vs_reference.py [--repeat 3] [--ref-python PY] [--shared DIR]
[--no-files] [--baseline DIR]``.
Figures are written to ``bench/results/sim_vs_reference.json`` as well.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _shared_dir(given: str | None) -> Path | None:
    """The shared data folder: ``--shared``, ``$PERFSCHED_SHARED``, or a ``shared/`` beside a parent."""
    if given:
        return Path(given)
    env = os.environ.get("PERFSCHED_SHARED")
    if env:
        return Path(env)
    for parent in (ROOT.parent, ROOT.parent.parent):
        if (parent / "shared" / "bench" / "refsim.py").is_file():
            return parent / "shared"
    return None


def _timed(cmd: list[str], env: dict[str, str] | None = None, cwd: Path = ROOT) -> tuple[float, float, str]:
    """Run ``cmd`` to completion; its wall seconds, CPU seconds (user + system) and stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, check=False, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SystemExit(f"sim_vs_reference: {cmd[0]} {cmd[1]} failed (exit {proc.returncode}): {tail}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.stdout


def _stats(samples: list[tuple[float, float]]) -> dict[str, float]:
    walls = [w for w, _ in samples]
    cpus = [c for _, c in samples]
    return {
        "wall_median_s": statistics.median(walls),
        "wall_best_s": min(walls),
        "cpu_median_s": statistics.median(cpus),
        "cpu_best_s": min(cpus),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each (interleaved)")
    ap.add_argument("--ref-python", default=sys.executable, help="interpreter with numpy and pandas")
    ap.add_argument("--shared", default=None, help="the shared data folder (bench/refsim.py, traces/)")
    ap.add_argument("--no-files", action="store_true", help="perfsched writes no report or plots")
    ap.add_argument("--baseline", default=None, help="another perfsched source tree to time as well")
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error(f"--repeat: must be >= 1, got {args.repeat}")
    shared = _shared_dir(args.shared)
    if shared is None or not (shared / "bench" / "refsim.py").is_file():
        ap.error("no shared/bench/refsim.py found: give --shared DIR or set PERFSCHED_SHARED")
    trace = shared / "traces" / "philly_pollux_10k.csv.gz"
    if not trace.is_file():
        ap.error(f"{trace}: the reference's trace is missing")
    probe = subprocess.run([args.ref_python, "-c", "import numpy, pandas"], capture_output=True, check=False)
    if probe.returncode != 0:
        ap.error(f"--ref-python {args.ref_python}: cannot import numpy and pandas (the reference needs both)")
    perfsched = shutil.which("perfsched")
    if perfsched is None:
        ap.error("the perfsched command is not on PATH (install the package or activate its venv)")
    # bytecode for perfsched's modules in a private folder, as an installed package has it beside them
    pycache = Path(tempfile.mkdtemp(prefix="sim-vs-ref-pyc-"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    base_env: dict[str, str] | None = None
    base_src = ROOT
    if args.baseline is not None:
        base_src = Path(args.baseline).resolve()
        if not (base_src / "scheduler" / "cli.py").is_file():
            ap.error(f"--baseline {args.baseline}: not a perfsched source tree (no scheduler/cli.py)")
        base_env = {**env, "PYTHONPATH": str(base_src)}

    out_dir = Path(tempfile.mkdtemp(prefix="sim-vs-ref-"))
    ours_cmd = [perfsched, "simulate", "--policy", "srsf", "--gpus", "64", "--load", "0.8"]
    # as a user runs it: the table on stdout and the files in --out (report.json read back from there);
    # with --no-files the report comes as JSON on stdout instead
    ours_cmd += ["--out", "", "--json"] if args.no_files else ["--out", str(out_dir)]
    ref_cmd = [args.ref_python, str(shared / "bench" / "refsim.py"), str(trace)]
    ref_cmd += ["--gpus", "64", "--load", "0.8", "--policies", "srsf:0"]

    base_dir = Path(tempfile.mkdtemp(prefix="sim-vs-ref-base-"))
    base_cmd = [sys.executable, "-m", "scheduler.cli", *ours_cmd[1:]]
    if not args.no_files:
        base_cmd[-1] = str(base_dir)
    ours: list[tuple[float, float]] = []
    ref: list[tuple[float, float]] = []
    base: list[tuple[float, float]] = []
    report: dict[str, Any] = {}
    ref_table = ""
    _timed(ref_cmd)  # untimed: page cache and bytecode warm for every command
    _timed(ours_cmd, env=env)
    if base_env is not None:
        _timed(base_cmd, env=base_env, cwd=base_src)
    for _ in range(args.repeat):
        w, c, ref_table = _timed(ref_cmd)
        ref.append((w, c))
        w, c, stdout = _timed(ours_cmd, env=env)
        ours.append((w, c))
        report = json.loads(stdout if args.no_files else (out_dir / "report.json").read_text())
        if base_env is not None:
            # run from the baseline's tree: ``python -m`` puts the working directory first on sys.path
            w, c, _ = _timed(base_cmd, env=base_env, cwd=base_src)
            base.append((w, c))
    shutil.rmtree(out_dir, ignore_errors=True)
    shutil.rmtree(base_dir, ignore_errors=True)
    shutil.rmtree(pycache, ignore_errors=True)

    o, r = _stats(ours), _stats(ref)
    row = report["results"][0]
    wall_ratio = o["wall_median_s"] / r["wall_median_s"]
    cpu_ratio = o["cpu_median_s"] / r["cpu_median_s"]
    print(
        f"Philly 10k, SRSF, 64 GPUs, load 0.8, whole process, {args.repeat} interleaved runs each "
        f"({'no files' if args.no_files else 'report and plots written'})"
    )
    print(f"{'':<24}{'wall median':>12}{'wall best':>11}{'CPU median':>12}{'CPU best':>10}")
    rows = [("perfsched simulate", o), ("reference refsim.py", r)]
    if base:
        rows.append(("baseline (--baseline)", _stats(base)))
    for name, s in rows:
        print(
            f"{name:<24}{s['wall_median_s']:>11.2f}s{s['wall_best_s']:>10.2f}s"
            f"{s['cpu_median_s']:>11.2f}s{s['cpu_best_s']:>9.2f}s"
        )
    # the target is judged on CPU time: on a shared machine wall time also measures the other work
    verdict = "met" if cpu_ratio <= 1.0 else "MISSED"
    print(
        f"ratio perfsched / reference: wall {wall_ratio:.2f}x, CPU {cpu_ratio:.2f}x "
        f"(target CPU <= 1.0x: {verdict})"
    )
    if base:
        b = _stats(base)
        print(
            f"ratio baseline / reference: wall {b['wall_median_s'] / r['wall_median_s']:.2f}x, "
            f"CPU {b['cpu_median_s'] / r['cpu_median_s']:.2f}x; perfsched / baseline: "
            f"CPU {o['cpu_median_s'] / b['cpu_median_s']:.2f}x"
        )
    print(
        f"perfsched's engine alone: {row['cpu_s']:.2f} s CPU; avg JCT {row['avg_jct_s'] / 3600:.2f} h, "
        f"p99 {row['p99_jct_s'] / 3600:.2f} h, {row['preemptions']} preemptions"
    )
    print("reference's table:")
    print(ref_table.rstrip())
    results = ROOT / "bench" / "results"
    results.mkdir(exist_ok=True)
    (results / "sim_vs_reference.json").write_text(
        json.dumps(
            {
                "perfsched": o,
                "reference": r,
                "baseline": _stats(base) if base else None,
                "ratio_wall": wall_ratio,
                "ratio_cpu": cpu_ratio,
                "engine_cpu_s": row["cpu_s"],
                "files": not args.no_files,
                "repeat": args.repeat,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
