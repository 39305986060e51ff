"""Synthetic job-size mixes and filtered shared traces, for decision benchmarks beyond the Philly sample.

``size_mix_trace`` draws a seeded trace whose jobs ask for GPU counts in chosen shares (default
``MULTINODE_MIX``: 70% 1-GPU, 28% 8-GPU, 2% 32-GPU jobs, so 30% need 8-32 GPUs across the 4- and 8-GPU
servers of the shipped clusters), with durations resampled from a source trace's jobs of a similar size
(the shipped Philly sample: 1-GPU durations for 1-GPU jobs, 2-7 GPU ones for 2-7, 8-GPU-and-larger ones
for 8 and up) and Poisson arrivals (the simulator rescales them to the offered load). Named
``multinode-mix`` (``multinode-mix:seed=N`` for another draw) in ``scheduler.sim.traces.load_trace``.

``alibaba_training_pods`` keeps, from the Alibaba GPU 2023 pods trace (``openb``, ATC'23; not shipped: its
repository carries no licence, so it is read from the shared trace folder as ``alibaba-2023``), the pods
that look like training jobs: whole GPUs (``gpu_fraction`` 1 for 1-GPU pods; multi-GPU pods hold whole
GPUs), a duration between one minute and seven days (the longer ones are services, deleted when the trace
ended), any QoS class. Pure: text and numbers in, a ``Trace`` out.
"""

from __future__ import annotations

import csv
import io
import math
import random
from collections.abc import Mapping, Sequence

from scheduler.core.errors import ConfigError
from scheduler.sim.traces import Trace, TraceJob

#: the multi-node-heavy mix: GPUs per job -> share of jobs
MULTINODE_MIX: Mapping[int, float] = {1: 0.70, 8: 0.28, 32: 0.02}
#: durations of a g-GPU job are drawn from the source trace's jobs in g's class: 1, 2-7, 8 and up
_SIZE_CLASSES = ((1, 1), (2, 7), (8, 1 << 30))


def _size_class(gpus: int) -> tuple[int, int]:
    return next(c for c in _SIZE_CLASSES if c[0] <= gpus <= c[1])


def size_mix_trace(
    source: Trace,
    *,
    jobs: int,
    seed: int,
    mix: Mapping[int, float] = MULTINODE_MIX,
    name: str = "multinode-mix",
) -> Trace:
    """``jobs`` jobs with GPU counts drawn from ``mix`` (shares, normalised), durations resampled from
    ``source``'s jobs of the same size class, exponential inter-arrival times of mean 1 s (rescaled by
    the load later); the same seed gives the same trace."""
    if jobs < 1:
        raise ConfigError(f"size mix: jobs must be >= 1, got {jobs}")
    if not mix or any(g < 1 or not (w > 0 and math.isfinite(w)) for g, w in mix.items()):
        raise ConfigError(f"size mix: GPU counts must be >= 1 and shares > 0, got {dict(mix)}")
    pools: dict[tuple[int, int], list[float]] = {}
    for j in source.jobs:
        pools.setdefault(_size_class(j.num_gpus), []).append(j.duration)
    sizes = sorted(mix)
    for g in sizes:
        if not pools.get(_size_class(g)):
            raise ConfigError(f"size mix: the source trace {source.name} has no job of {g} GPUs' class")
    weights = [mix[g] for g in sizes]
    rng = random.Random(seed)
    out: list[TraceJob] = []
    t = 0.0
    for i in range(jobs):
        g = rng.choices(sizes, weights)[0]
        pool = pools[_size_class(g)]
        out.append(TraceJob(f"mix-{i:05d}", t, g, pool[rng.randrange(len(pool))]))
        t += rng.expovariate(1.0)
    mix_text = ", ".join(f"{mix[g] / sum(weights):.0%} {g}-GPU" for g in sizes)
    return Trace(
        name=name,
        source=f"synthetic ({mix_text}; durations from {source.name}; seed {seed})",
        jobs=tuple(out),
    )


def alibaba_training_pods(text: str, source: str) -> str:
    """The rows of the Alibaba GPU 2023 pods CSV (common schema plus ``gpu_fraction``) that look like
    training jobs (module docstring), as CSV text in the common schema."""
    reader = csv.DictReader(io.StringIO(text))
    fields = reader.fieldnames or []
    for col in ("job_id", "submit_time", "num_gpus", "duration", "gpu_fraction"):
        if col not in fields:
            raise ConfigError(
                f"{source}: line 1: missing column {col!r} (an Alibaba GPU 2023 pods trace has it)"
            )
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for line, row in enumerate(reader, start=2):
        try:
            gpus = float(row["num_gpus"])
            frac = float(row["gpu_fraction"] or "1")
            duration = float(row["duration"])
        except ValueError:
            raise ConfigError(
                f"{source}: line {line}: num_gpus, gpu_fraction or duration is not a number"
            ) from None
        whole = gpus > 1 or frac >= 1.0
        if whole and 60.0 <= duration <= 7 * 86400.0:
            writer.writerow(row)
    return buf.getvalue()


def parse_mix_options(text: str, known: Sequence[str] = ("seed",)) -> dict[str, int]:
    """``key=value[;...]`` integer options after a synthetic trace's name (``multinode-mix:seed=1``)."""
    out: dict[str, int] = {}
    for item in filter(None, (p.strip() for p in text.split(";"))):
        key, eq, raw = item.partition("=")
        key = key.strip()
        if not eq or key not in known:
            raise ConfigError(f"trace option {item!r}: expected one of {', '.join(f'{k}=N' for k in known)}")
        try:
            out[key] = int(raw)
        except ValueError:
            raise ConfigError(f"trace option {item!r}: {key} must be a whole number") from None
    return out
