"""Synthetic job-size mixes and the Alibaba GPU 2023 training-pod filter (``scheduler.sim.mixes``)."""

from __future__ import annotations

import pytest

from scheduler.core.errors import ConfigError
from scheduler.sim.mixes import alibaba_training_pods, parse_mix_options, size_mix_trace
from scheduler.sim.traces import Trace, TraceJob, load_trace, parse_trace_csv

SOURCE = Trace(
    name="src",
    source="test",
    jobs=(
        TraceJob("s1", 0, 1, 100.0),
        TraceJob("s2", 1, 1, 200.0),
        TraceJob("s8", 3, 8, 800.0),
        TraceJob("s16", 4, 16, 1600.0),
    ),
)


def test_a_mix_draws_sizes_in_its_shares_and_durations_from_the_same_size_class() -> None:
    t = size_mix_trace(SOURCE, jobs=2000, seed=1, mix={1: 0.7, 8: 0.28, 32: 0.02})
    sizes = [j.num_gpus for j in t.jobs]
    # 2000 draws: shares within 3 points of 70 / 28 / 2 (binomial sd ~1 point)
    assert sizes.count(1) / 2000 == pytest.approx(0.70, abs=0.03)
    assert sizes.count(8) / 2000 == pytest.approx(0.28, abs=0.03)
    assert sizes.count(32) / 2000 == pytest.approx(0.02, abs=0.01)
    # 1-GPU jobs take 1-GPU durations (100, 200); 8 and 32 take the 8-and-up class's (800, 1600)
    assert {j.duration for j in t.jobs if j.num_gpus == 1} == {100.0, 200.0}
    assert {j.duration for j in t.jobs if j.num_gpus >= 8} == {800.0, 1600.0}
    assert all(b.submit_time > a.submit_time for a, b in zip(t.jobs, t.jobs[1:], strict=False))


def test_the_same_seed_gives_the_same_trace() -> None:
    a, b = (size_mix_trace(SOURCE, jobs=50, seed=3) for _ in range(2))
    assert a.jobs == b.jobs
    assert size_mix_trace(SOURCE, jobs=50, seed=4).jobs != a.jobs


@pytest.mark.parametrize(
    ("mix", "message"),
    [
        ({}, "GPU counts must be >= 1 and shares > 0"),
        ({0: 1.0}, "GPU counts must be >= 1 and shares > 0"),
        ({2: 1.0}, "no job of 2 GPUs' class"),  # the source has no 2-7 GPU job
    ],
)
def test_a_bad_mix_is_one_line(mix: dict[int, float], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        size_mix_trace(SOURCE, jobs=10, seed=0, mix=mix)


def test_the_named_multinode_mix_is_seeded_and_30_percent_multi_node() -> None:
    t = load_trace("multinode-mix:seed=2")
    head = t.jobs[:1000]
    assert sum(1 for j in head if j.num_gpus >= 8) / 1000 == pytest.approx(0.30, abs=0.04)
    assert load_trace("multinode-mix:seed=2").jobs[:5] == t.jobs[:5]
    with pytest.raises(ConfigError, match="trace option 'jobs=5'"):
        load_trace("multinode-mix:jobs=5")
    assert parse_mix_options("seed=7") == {"seed": 7}


PODS = """job_id,submit_time,num_gpus,duration,status,group,gpu_fraction
p-whole,0,1,3600,failed,BE,1.0
p-shared,1,1,3600,running_phase,LS,0.5
p-short,2,1,30,completed,BE,1.0
p-service,3,1,9000000,running_phase,LS,1.0
p-gang,4,8,7200,completed,BE,
"""


def test_alibaba_training_pods_keeps_whole_gpus_for_a_minute_to_a_week() -> None:
    text = alibaba_training_pods(PODS, "pods.csv")
    kept = parse_trace_csv(text, "pods.csv")
    # shared GPU (0.5), 30 s and 104 days are dropped; a multi-GPU pod holds whole GPUs
    assert [j.job_id for j in kept.jobs] == ["p-whole", "p-gang"]
    with pytest.raises(ConfigError, match="missing column 'gpu_fraction'"):
        alibaba_training_pods("job_id,submit_time,num_gpus,duration\n", "x.csv")
