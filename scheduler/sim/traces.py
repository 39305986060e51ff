"""Job traces for the simulator: loading and validating trace CSVs, shipped traces, and load rescaling.

A trace is a CSV (optionally gzipped) in the common schema of the shared trace collection
(``job_id, submit_time, num_gpus, duration`` required; ``status, user, group, gpu_type, ...`` optional;
``model`` and ``batch_size`` optional extensions for traces that know what ran). Validation names the
file, the line and the field of the first bad value. ``rescale_load`` stretches or squeezes the
inter-arrival times so that the offered load is a chosen fraction of a cluster's GPUs. Reading files is
the only I/O here; everything else is pure.
"""

from __future__ import annotations

import csv
import gzip
import io
import logging
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

from scheduler.core.errors import ConfigError

log = logging.getLogger(__name__)

REQUIRED_COLUMNS = ("job_id", "submit_time", "num_gpus", "duration")

#: shipped (inside the package) and shared (read from the shared trace folder when present) traces
SHIPPED_TRACES = {"philly-10k": "philly_pollux_10k.csv.gz"}
SHARED_TRACES = {
    "philly-full": "philly_pollux_full.csv.gz",
    "philly-10k-shared": "philly_pollux_10k.csv.gz",
    # training-like pods only (``scheduler.sim.mixes.alibaba_training_pods``); not shipped: no licence
    "alibaba-2023": "alibaba_gpu2023_openb_gpu_pods_full.csv.gz",
}
#: generated from a shipped trace (``scheduler.sim.mixes``); ``NAME:seed=N`` draws another one
SYNTHETIC_TRACES = ("multinode-mix",)


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace: when it arrived, how many GPUs it used and for how long (seconds)."""

    job_id: str
    submit_time: float
    num_gpus: int
    duration: float
    status: str = ""
    user: str = ""
    group: str = ""
    model: str = ""
    batch_size: int = 0


@dataclass(frozen=True, slots=True)
class Trace:
    """A validated trace: jobs sorted by (submit time, job id); ``source`` says where it came from."""

    name: str
    source: str
    jobs: tuple[TraceJob, ...]

    @property
    def has_models(self) -> bool:
        return all(j.model and j.batch_size > 0 for j in self.jobs)

    @property
    def gpu_seconds(self) -> float:
        return sum(j.num_gpus * j.duration for j in self.jobs)

    @property
    def span(self) -> float:
        """Seconds from the first to the last arrival."""
        if not self.jobs:
            return 0.0
        return self.jobs[-1].submit_time - self.jobs[0].submit_time

    def offered_load(self, cluster_gpus: int) -> float:
        """GPU-seconds asked for divided by what ``cluster_gpus`` GPUs supply over the arrival span."""
        if self.span <= 0 or cluster_gpus <= 0:
            return math.inf
        return self.gpu_seconds / (cluster_gpus * self.span)

    def head(self, n: int) -> Trace:
        return replace(self, jobs=self.jobs[:n], name=f"{self.name}[:{n}]")


def shared_trace_dirs() -> list[Path]:
    """Folders searched for shared traces: ``$PERFSCHED_TRACES_DIR``, then the repo's ``../shared/traces``."""
    dirs: list[Path] = []
    env = os.environ.get("PERFSCHED_TRACES_DIR")
    if env:
        dirs.append(Path(env))
    repo = Path(__file__).resolve().parents[2]
    dirs += [repo.parent / "shared" / "traces", Path.cwd().parent / "shared" / "traces"]
    return dirs


def _parse_float(src: str, line: int, field: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{src}: line {line}: field '{field}': not a number: {raw!r}") from None
    if not math.isfinite(value):
        raise ConfigError(f"{src}: line {line}: field '{field}': must be finite, got {raw!r}")
    return value


def parse_trace_csv(text: str, source: str, name: str = "") -> Trace:
    """Validate CSV text as a trace. Errors name ``source``, the line (header = line 1) and the field."""
    reader = csv.reader(io.StringIO(text))
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise ConfigError(
            f"{source}: empty file, expected a header with {', '.join(REQUIRED_COLUMNS)}"
        ) from None
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise ConfigError(
            f"{source}: line 1: missing column(s) {', '.join(missing)} "
            f"(required: {', '.join(REQUIRED_COLUMNS)})"
        )
    col = {h: i for i, h in enumerate(header)}
    i_id, i_sub, i_g, i_d = (col[c] for c in REQUIRED_COLUMNS)
    i_status, i_user, i_group, i_model, i_batch = (
        col.get(k) for k in ("status", "user", "group", "model", "batch_size")
    )
    jobs: list[TraceJob] = []
    seen: set[str] = set()
    isfinite = math.isfinite
    for line, row in enumerate(reader, start=2):
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if len(row) < len(header):
            raise ConfigError(f"{source}: line {line}: {len(row)} fields, the header has {len(header)}")
        job_id = row[i_id].strip()
        if not job_id:
            raise ConfigError(f"{source}: line {line}: field 'job_id': empty")
        if job_id in seen:
            raise ConfigError(f"{source}: line {line}: field 'job_id': duplicate id {job_id!r}")
        seen.add(job_id)
        try:  # the common case at once; any bad number is named by the checks below, field by field
            submit, gpus_f, duration = float(row[i_sub]), float(row[i_g]), float(row[i_d])
            numbers = isfinite(submit) and isfinite(gpus_f) and isfinite(duration)
        except ValueError:
            numbers = False
        if not numbers:
            submit = _parse_float(source, line, "submit_time", row[i_sub])
        if submit < 0:
            raise ConfigError(f"{source}: line {line}: field 'submit_time': must be >= 0, got {row[i_sub]!r}")
        if not numbers:
            gpus_f = _parse_float(source, line, "num_gpus", row[i_g])
        if gpus_f != int(gpus_f) or gpus_f < 1:
            raise ConfigError(
                f"{source}: line {line}: field 'num_gpus': must be a whole number >= 1, got {row[i_g]!r}"
            )
        if not numbers:
            duration = _parse_float(source, line, "duration", row[i_d])
        if duration <= 0:
            raise ConfigError(
                f"{source}: line {line}: field 'duration': must be > 0 seconds, got {row[i_d]!r}"
            )
        batch_text = row[i_batch].strip() if i_batch is not None else ""
        batch = 0
        if batch_text:
            b = _parse_float(source, line, "batch_size", batch_text)
            if b != int(b) or b < 1:
                raise ConfigError(
                    f"{source}: line {line}: field 'batch_size': must be a whole number >= 1, "
                    f"got {batch_text!r}"
                )
            batch = int(b)
        jobs.append(
            TraceJob(
                job_id,
                submit,
                int(gpus_f),
                duration,
                row[i_status].strip() if i_status is not None else "",
                row[i_user].strip() if i_user is not None else "",
                row[i_group].strip() if i_group is not None else "",
                row[i_model].strip() if i_model is not None else "",
                batch,
            )
        )
    if not jobs:
        raise ConfigError(f"{source}: no jobs (only a header)")
    jobs.sort(key=lambda j: (j.submit_time, j.job_id))
    return Trace(name=name or Path(source).name, source=source, jobs=tuple(jobs))


def _read_text(path: Path) -> str:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data.decode("utf-8")


def load_trace(path_or_name: str | Path) -> Trace:
    """Load a trace CSV (``.csv`` or ``.csv.gz``) or a named one: ``philly-10k`` (shipped),
    ``philly-full`` and ``alibaba-2023`` (from the shared trace folder, when present),
    ``multinode-mix[:seed=N]`` (generated from the shipped Philly sample, ``scheduler.sim.mixes``)."""
    key = str(path_or_name)
    path = Path(key)
    base, _, options = key.partition(":")
    if base in SYNTHETIC_TRACES and not path.is_file():
        from scheduler.sim.mixes import parse_mix_options, size_mix_trace

        seed = parse_mix_options(options).get("seed", 0)
        return size_mix_trace(load_trace("philly-10k"), jobs=10_000, seed=seed, name=key)
    if path.is_file():
        try:
            text = _read_text(path)
        except (OSError, UnicodeDecodeError, gzip.BadGzipFile) as exc:
            raise ConfigError(f"{key}: cannot read trace: {exc}") from None
        return parse_trace_csv(text, key)
    if key in SHIPPED_TRACES:
        res = resources.files("scheduler.sim") / "data" / SHIPPED_TRACES[key]
        text = gzip.decompress(res.read_bytes()).decode("utf-8")
        return parse_trace_csv(text, f"{key} (shipped)", name=key)
    if key in SHARED_TRACES:
        for folder in shared_trace_dirs():
            candidate = folder / SHARED_TRACES[key]
            if candidate.is_file():
                text = _read_text(candidate)
                if key == "alibaba-2023":
                    from scheduler.sim.mixes import alibaba_training_pods

                    text = alibaba_training_pods(text, str(candidate))
                return parse_trace_csv(text, str(candidate), name=key)
        raise ConfigError(
            f"{key}: shared trace {SHARED_TRACES[key]} not found in "
            f"{', '.join(str(d) for d in shared_trace_dirs())} (set PERFSCHED_TRACES_DIR)"
        )
    names = ", ".join([*SHIPPED_TRACES, *SHARED_TRACES, *SYNTHETIC_TRACES])
    raise ConfigError(f"{key}: no such trace file or trace name (names: {names})")


@dataclass(frozen=True, slots=True)
class LoadScaling:
    """What ``rescale_load`` did: the offered load before and after, and the inter-arrival factor."""

    raw_load: float
    target_load: float | None
    factor: float


def _at(job: TraceJob, submit_time: float) -> TraceJob:
    """``replace(job, submit_time=submit_time)``, field by field (a third of ``replace``'s time)."""
    return TraceJob(
        job.job_id,
        submit_time,
        job.num_gpus,
        job.duration,
        job.status,
        job.user,
        job.group,
        job.model,
        job.batch_size,
    )


def rescale_load(
    jobs: Sequence[TraceJob], cluster_gpus: int, load: float | None
) -> tuple[tuple[TraceJob, ...], LoadScaling]:
    """Scale inter-arrival times so the offered load is ``load`` x ``cluster_gpus`` (None keeps trace times).

    Offered load = sum(num_gpus x duration) / (cluster_gpus x arrival span). Multiplying every gap
    between arrivals by ``factor`` multiplies the span by it, so ``factor = raw_load / load``. Submit
    times are shifted so the first job arrives at 0.
    """
    if not jobs:
        raise ConfigError("trace: no jobs to replay")
    t0 = jobs[0].submit_time
    span = jobs[-1].submit_time - t0
    work = sum(j.num_gpus * j.duration for j in jobs)
    raw = work / (cluster_gpus * span) if span > 0 else math.inf
    if load is None:
        return tuple(_at(j, j.submit_time - t0) for j in jobs), LoadScaling(raw, None, 1.0)
    if not (load > 0 and math.isfinite(load)):
        raise ConfigError(f"--load: must be a positive number or 'raw', got {load!r}")
    if span <= 0:
        raise ConfigError("--load: every job arrives at the same time; use --load raw")
    factor = raw / load
    scaled = tuple(_at(j, (j.submit_time - t0) * factor) for j in jobs)
    return scaled, LoadScaling(raw, load, factor)


def parse_load(text: str) -> float | None:
    """``--load`` value: ``raw`` (None) or a positive fraction of the cluster's capacity."""
    if text.strip().lower() == "raw":
        return None
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"--load: must be a positive number or 'raw', got {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise ConfigError(f"--load: must be a positive number or 'raw', got {text!r}")
    return value
