"""The demo's workload: a slice of the Philly sample squeezed into minutes, as valid TrainingJobs."""

from __future__ import annotations

import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfsched_dev.demo.job_mix import DemoShape, k8s_name, pick_jobs, trainingjob_manifest
from scheduler.core.errors import ConfigError
from scheduler.core.types import Job
from scheduler.k8s.crd import parse_spec
from scheduler.sim.traces import TraceJob, load_trace


def tj(i: int, submit: float, gpus: int, duration: float) -> TraceJob:
    return TraceJob(job_id=f"j{i}", submit_time=submit, num_gpus=gpus, duration=duration)


def test_arrivals_and_durations_are_rescaled() -> None:
    jobs = [tj(0, 1000, 1, 3600), tj(1, 1600, 2, 7200), tj(2, 2200, 16, 60), tj(3, 3400, 4, 36000)]
    shape = DemoShape(jobs=3, arrival_window_s=60, target_median_s=40, min_run_s=15, max_run_s=90, max_gpus=8)
    picked = pick_jobs(jobs, shape)
    # j2 (16 GPUs > 8) is skipped; arrivals 1000, 1600, 3400 -> span 2400 s squeezed into 60 s
    assert [j.job_id for j in picked] == ["j0", "j1", "j3"]
    assert [j.submit_time for j in picked] == [0.0, 15.0, 60.0]  # 600 * 60/2400 = 15; 2400 * 60/2400 = 60
    # median duration 7200 s -> 40 s: scale 1/180; 3600 -> 20 s, 7200 -> 40 s, 36000 -> 200 -> clamped 90
    assert [j.duration for j in picked] == [20.0, 40.0, 90.0]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0, 1e6), st.integers(1, 64), st.floats(1, 1e6)), min_size=1, max_size=30),
    st.integers(1, 20),
)
def test_picked_jobs_fit_the_shape(rows: list[tuple[float, int, float]], n: int) -> None:
    jobs = [tj(i, s, g, d) for i, (s, g, d) in enumerate(sorted(rows))]
    shape = DemoShape(jobs=n, arrival_window_s=50, target_median_s=30, min_run_s=10, max_run_s=60, max_gpus=8)
    if not any(g <= 8 for _, g, _ in rows):
        with pytest.raises(ConfigError, match=r"no job with 1\.\.8 GPUs"):
            pick_jobs(jobs, shape)
        return
    picked = pick_jobs(jobs, shape)
    assert 1 <= len(picked) <= n
    assert all(1 <= j.num_gpus <= 8 for j in picked)
    assert all(10 <= j.duration <= 60 for j in picked)
    assert all(0 <= j.submit_time <= 50 + 1e-6 for j in picked)
    assert [j.submit_time for j in picked] == sorted(j.submit_time for j in picked)


def test_shipped_sample_gives_a_few_minutes_of_work() -> None:
    picked = pick_jobs(load_trace("philly-10k").jobs, DemoShape(jobs=16))
    assert len(picked) == 16
    assert statistics.median(j.duration for j in picked) == pytest.approx(40.0, abs=10.0)
    assert max(j.submit_time for j in picked) <= 60.0


def test_manifest_is_a_valid_trainingjob() -> None:
    job = Job(
        name="philly/123_ab",
        submit_time=0,
        total_work=1234.2,
        min_replicas=2,
        max_replicas=2,
        model="resnet50",
        dataset="imagenet",
        batch_size=256,
    )
    body = trainingjob_manifest(job)
    assert body["metadata"]["name"] == "tj-philly-123-ab"
    assert body["spec"]["work"] == {"iterations": 1235}  # ceil(1234.2)
    spec = parse_spec(body)
    assert not hasattr(spec, "resolvable"), spec  # parsed, not Unschedulable
    assert spec.model == "resnet50"


@pytest.mark.parametrize(
    ("raw", "name"), [("A_B", "tj-a-b"), ("x" * 80, "tj-" + "x" * 37), ("--7--", "tj-7")]
)
def test_k8s_names_are_dns_labels(raw: str, name: str) -> None:
    assert k8s_name(raw) == name


def test_bad_shape_is_refused_naming_the_flag() -> None:
    with pytest.raises(ConfigError, match="--jobs"):
        DemoShape(jobs=0)


def test_elastic_manifest_keeps_the_replica_range() -> None:
    job = Job(
        name="e1",
        submit_time=0,
        total_work=10,
        min_replicas=1,
        max_replicas=8,
        elastic=True,
        model="resnet50",
        batch_size=128,
    )
    body = trainingjob_manifest(job)
    assert body["spec"]["elastic"] is True
    assert body["spec"]["replicas"] == {"min": 1, "max": 8, "gpusPerReplica": 1}
    spec = parse_spec(body)
    assert not hasattr(spec, "resolvable"), spec
