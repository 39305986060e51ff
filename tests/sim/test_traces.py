"""Trace loading: validation errors name file, line and field; shipped traces load; load rescaling."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import pytest

from scheduler.core.errors import ConfigError
from scheduler.sim.traces import TraceJob, load_trace, parse_load, rescale_load

HEADER = "job_id,submit_time,num_gpus,duration,status\n"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # header lacks 'duration' -> reported on line 1 with the missing column named
        ("job_id,submit_time,num_gpus\nj1,0,1\n", ["line 1", "missing column(s) duration"]),
        # data row 2 of the file is line 3 (header = line 1)
        (
            HEADER + "j1,0,1,10,completed\nj2,5,1,-3,completed\n",
            ["line 3", "'duration'", "must be > 0", "'-3'"],
        ),
        (HEADER + "j1,0,0,10,completed\n", ["line 2", "'num_gpus'", ">= 1", "'0'"]),
        (HEADER + "j1,0,1.5,10,completed\n", ["line 2", "'num_gpus'", "whole number"]),
        (HEADER + "j1,abc,1,10,completed\n", ["line 2", "'submit_time'", "not a number"]),
        (HEADER + "j1,-1,1,10,completed\n", ["line 2", "'submit_time'", ">= 0"]),
        (HEADER + "j1,0,1,10,completed\nj1,1,1,10,completed\n", ["line 3", "'job_id'", "duplicate"]),
        (HEADER + "j1,0,1\n", ["line 2", "3 fields"]),
        (HEADER, ["no jobs"]),
        ("", ["empty file"]),
    ],
)
def test_bad_trace_names_file_line_and_field(tmp_path: Path, body: str, expected: list[str]) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(body)
    with pytest.raises(ConfigError) as err:
        load_trace(str(path))
    msg = str(err.value)
    assert str(path) in msg
    for part in expected:
        assert part in msg


def test_good_trace_is_sorted_by_submit_time_and_reads_gzip(tmp_path: Path) -> None:
    path = tmp_path / "t.csv.gz"
    path.write_bytes(gzip.compress((HEADER + "b,20,2,30,x\na,10,1,5,x\n").encode()))
    trace = load_trace(str(path))
    assert [j.job_id for j in trace.jobs] == ["a", "b"]
    assert trace.jobs[1] == TraceJob("b", 20.0, 2, 30.0, status="x")
    # 1x5 + 2x30 = 65 GPU-seconds over a 10 s span on 2 GPUs -> 3.25
    assert trace.offered_load(2) == pytest.approx(3.25)


def test_shipped_philly_10k_matches_its_readme() -> None:
    trace = load_trace("philly-10k")
    assert len(trace.jobs) == 10_000
    assert trace.jobs[0].submit_time == 0
    # README: 70,032 GPU-hours; GPU counts {1: 9629, 2: 93, 4: 67, 8: 192, 16: 4, 32: 15}
    assert trace.gpu_seconds / 3600 == pytest.approx(70_032, rel=1e-3)
    counts: dict[int, int] = {}
    for j in trace.jobs:
        counts[j.num_gpus] = counts.get(j.num_gpus, 0) + 1
    assert counts == {1: 9629, 2: 93, 4: 67, 8: 192, 16: 4, 32: 15}


def test_unknown_trace_name_lists_the_names() -> None:
    with pytest.raises(ConfigError, match="philly-10k"):
        load_trace("no-such-trace")


def _jobs(*rows: tuple[float, int, float]) -> tuple[TraceJob, ...]:
    return tuple(TraceJob(f"j{i}", s, g, d) for i, (s, g, d) in enumerate(rows))


@pytest.mark.parametrize(
    ("rows", "gpus", "load", "raw", "factor", "submits"),
    [
        # work = 1x100 + 2x50 + 1x100 = 300 GPU-s; span = 100 - 10 = 90 s on 4 GPUs -> raw 300/360 = 0.8333;
        # load 0.5 -> factor 0.8333/0.5 = 1.6667; gaps 40, 50 -> 66.67, 83.33 (first job moved to 0)
        (
            ((10, 1, 100), (50, 2, 50), (100, 1, 100)),
            4,
            0.5,
            300 / 360,
            (300 / 360) / 0.5,
            (0, 66.667, 150.0),
        ),
        # same trace at load 2.0 -> factor 0.41667: squeezes the gaps to 16.67, 20.83
        (((10, 1, 100), (50, 2, 50), (100, 1, 100)), 4, 2.0, 300 / 360, (300 / 360) / 2.0, (0, 16.667, 37.5)),
        # raw keeps the gaps, only shifts to start at 0
        (((10, 1, 100), (50, 2, 50), (100, 1, 100)), 4, None, 300 / 360, 1.0, (0, 40.0, 90.0)),
    ],
)
def test_rescale_load_arithmetic(
    rows: tuple[tuple[float, int, float], ...],
    gpus: int,
    load: float | None,
    raw: float,
    factor: float,
    submits: tuple[float, ...],
) -> None:
    scaled, info = rescale_load(_jobs(*rows), gpus, load)
    assert info.raw_load == pytest.approx(raw)
    assert info.factor == pytest.approx(factor)
    assert [j.submit_time for j in scaled] == pytest.approx(list(submits), abs=1e-3)
    # after rescaling the offered load is the target
    if load is not None:
        span = scaled[-1].submit_time - scaled[0].submit_time
        assert sum(j.num_gpus * j.duration for j in scaled) / (gpus * span) == pytest.approx(load)


def test_parse_load() -> None:
    assert parse_load("raw") is None
    assert parse_load("0.8") == 0.8
    for bad in ("0", "-1", "x", "nan", "inf"):
        with pytest.raises(ConfigError, match="--load"):
            parse_load(bad)
    assert math.isinf(rescale_load(_jobs((0, 1, 1)), 1, None)[1].raw_load)


def test_rescale_load_keeps_every_other_field() -> None:
    """Rescaling rebuilds each job field by field: every field but the submit time comes through."""
    import dataclasses

    job = TraceJob("a", 10.0, 2, 50.0, "Pass", "u1", "vc7", "resnet50", 64)
    later = TraceJob("b", 20.0, 1, 50.0)
    for load in (0.5, None):
        scaled, _ = rescale_load((job, later), 4, load)
        assert scaled[0] == dataclasses.replace(job, submit_time=0.0)
        assert [f.name for f in dataclasses.fields(TraceJob)] == [
            "job_id", "submit_time", "num_gpus", "duration", "status", "user", "group", "model", "batch_size"
        ]  # fmt: skip
