"""A synthetic trial of slow-node detection: 16 same-type nodes, one running at a fraction of its speed.

Pure (seeded ``random.Random``, virtual time). Each node runs ``jobs_per_node`` single-node jobs at a time,
each of one of ``models`` models for 30 min to 3 h, replaced when it ends; every ``report_s`` each job
reports its residual (observed / predicted throughput) =

    model bias (the predictor's error for the model, the same on every node, log-sd ``model_sigma``)
    x job factor (the job's own pace, log-sd ``job_sigma``) x sample noise (log-sd ``sample_sigma``)
    x the node's speed (``slow_factor`` on the slow node, 1 elsewhere),

and ``scheduler.core.slow_nodes.node_slowdown`` is evaluated every ``eval_s`` on the last window. The
trial reports when the slow node was first flagged and every flag of a healthy node (false flags). The
defaults are those of ``bench/slow_nodes.py`` and the calibration test.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from scheduler.core.slow_nodes import GangSample, SlowNodeConfig, node_slowdown


@dataclass(frozen=True, slots=True)
class TrialSpec:
    hours: float = 48.0
    nodes: int = 16
    slow_node: int = 7
    slow_factor: float = 0.6
    jobs_per_node: int = 3
    models: int = 8
    model_sigma: float = 0.2
    job_sigma: float = 0.1
    sample_sigma: float = 0.05
    report_s: float = 60.0
    eval_s: float = 600.0


@dataclass(slots=True)
class TrialResult:
    first_flag_s: float | None = None
    false_flags: list[tuple[str, float]] = field(default_factory=list)
    last_ratio: dict[str, float] = field(default_factory=dict)


def run_trial(seed: int, spec: TrialSpec | None = None, config: SlowNodeConfig | None = None) -> TrialResult:
    """One seeded trial (see the module docstring); defaults: ``TrialSpec()``, ``SlowNodeConfig()``."""
    spec = spec or TrialSpec()
    config = config or SlowNodeConfig()
    rng = random.Random(seed)
    models = [f"m{i}" for i in range(spec.models)]
    bias = {m: math.exp(rng.gauss(0.0, spec.model_sigma)) for m in models}
    names = [f"n{i:02d}" for i in range(spec.nodes)]
    slow = names[spec.slow_node] if 0 <= spec.slow_node < spec.nodes else ""

    def new_job(node: str, t: float) -> tuple[str, float, str, float]:
        return (
            node,
            t + rng.uniform(1800.0, 3 * 3600.0),
            rng.choice(models),
            math.exp(rng.gauss(0.0, spec.job_sigma)),
        )

    slots = [new_job(n, 0.0) for n in names for _ in range(spec.jobs_per_node)]
    samples: list[GangSample] = []
    out = TrialResult()
    t, next_eval = 0.0, spec.eval_s
    while t < spec.hours * 3600.0:
        t += spec.report_s
        for i, slot in enumerate(slots):
            if t >= slot[1]:
                slots[i] = new_job(slot[0], t)
            node, _, model, factor = slots[i]
            speed = spec.slow_factor if node == slow else 1.0
            noise = math.exp(rng.gauss(0.0, spec.sample_sigma))
            samples.append(GangSample(t, node, "A100", model, bias[model] * factor * speed * noise))
        if t >= next_eval:
            next_eval += spec.eval_s
            samples = [s for s in samples if s.time >= t - config.window_s]
            for node, v in node_slowdown(samples, now=t, config=config).items():
                out.last_ratio[node] = v.ratio
                if not v.flagged:
                    continue
                if node == slow:
                    out.first_flag_s = out.first_flag_s if out.first_flag_s is not None else t
                else:
                    out.false_flags.append((node, t))
    return out
