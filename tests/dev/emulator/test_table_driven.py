"""The emulator loop against a fake API: gangs advance at the true rate of their placement, wait for all
workers, report like real workers, finish through KWOK, and restart from checkpoints."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

import pytest

from perfsched_dev.emulator.table_driven import (
    Emulator,
    EmulatorConfig,
    ThroughputQuery,
    ground_truth_throughput,
)
from scheduler.core.types import WorkUnit
from scheduler.k8s.codec import decode_pod
from scheduler.k8s.errors import ApiHealth, ApiUnavailable
from scheduler.k8s.progress import ProgressReport, parse_progress, parse_start_progress
from scheduler.k8s.workload import WorkerPod, adopted_worker

PRODUCTS = {"v100-0": "Tesla-V100-SXM2-16GB", "v100-1": "Tesla-V100-SXM2-16GB", "k80-0": "Tesla-K80"}


class FakeApi:
    def __init__(self) -> None:
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.jobs: dict[tuple[str, str], dict[str, Any]] = {}
        self.patches: list[tuple[str, str, dict[str, str | None]]] = []
        self.extra_labels: dict[str, dict[str, str]] = {}

    def add_job(self, name: str, iterations: int, ns: str = "team") -> None:
        self.jobs[(ns, name)] = {
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "model": "resnet50",
                "dataset": "imagenet",
                "batchSize": 256,
                "work": {"iterations": iterations},
                "replicas": {"max": 2, "gpusPerReplica": 4},
                "template": {"spec": {"containers": [{"name": "w", "image": "x"}]}},
            },
        }

    def add_pod(
        self,
        job: str,
        replica: int,
        gen: str,
        node: str,
        phase: str = "Running",
        ns: str = "team",
        **ann: str,
    ) -> str:
        name = f"{job}-g{gen}-{replica}"
        self.pods[(ns, name)] = {
            "metadata": {
                "name": name,
                "namespace": ns,
                "uid": name,
                "labels": {
                    "perfsched.dev/job-name": job,
                    "perfsched.dev/replica-index": str(replica),
                    "perfsched.dev/generation": gen,
                },
                "annotations": dict(ann),
            },
            "spec": {
                "nodeName": node,
                "containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": "4"}}}],
            },
            "status": {"phase": phase},
        }
        return name

    def add_adopted_pod(self, job: str, index: int, admission: str, node: str, **ann: str) -> str:
        """A pod of batch Job ``job`` that perfsched admitted (its worker annotations, no TrainingJob)."""
        name = f"{job}-{index}-a{admission}"
        worker = {
            "perfsched.dev/admission": admission,
            "perfsched.dev/model": "resnet50",
            "perfsched.dev/batch-size": "256",
            "perfsched.dev/total-work": "100000",
        }
        self.pods[("team", name)] = {
            "metadata": {
                "name": name,
                "namespace": "team",
                "uid": name,
                "labels": {
                    "batch.kubernetes.io/job-name": job,
                    "batch.kubernetes.io/job-completion-index": str(index),
                },
                "annotations": {**worker, **ann},
            },
            "spec": {
                "nodeName": node,
                "containers": [{"name": "w", "resources": {"limits": {"nvidia.com/gpu": "4"}}}],
            },
            "status": {"phase": "Running"},
        }
        return name

    def _workers(self) -> list[WorkerPod]:
        out = []
        for obj in self.pods.values():
            ann = obj["metadata"]["annotations"]
            out.append(
                WorkerPod(
                    info=decode_pod(obj),
                    deleting="deletionTimestamp" in obj["metadata"],
                    report=parse_progress(ann.get("perfsched.dev/progress")),
                    start_progress=parse_start_progress(ann.get("perfsched.dev/start-progress")),
                    annotations=dict(ann),
                    deletion_grace_s=obj["metadata"].get("deletionGracePeriodSeconds"),
                    labels=dict(obj["metadata"]["labels"]),
                )
            )
        return out

    def list_job_pods(self, namespace: str = "") -> list[WorkerPod]:
        return [p for p in self._workers() if p.info.job]

    def list_adopted_pods(self, namespace: str = "") -> list[WorkerPod]:
        return [a for p in self._workers() if (a := adopted_worker(p)) is not None]

    def training_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.jobs.get((namespace, name))

    def node_labels(self, name: str) -> dict[str, str]:
        product = PRODUCTS.get(name)
        return {**({"nvidia.com/gpu.product": product} if product else {}), **self.extra_labels.get(name, {})}

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None:
        self.patches.append((namespace, name, dict(annotations)))
        ann = self.pods[(namespace, name)]["metadata"]["annotations"]
        for k, v in annotations.items():
            if v is None:
                ann.pop(k, None)
            else:
                ann[k] = v

    def report(self, name: str, ns: str = "team") -> ProgressReport | None:
        return parse_progress(self.pods[(ns, name)]["metadata"]["annotations"].get("perfsched.dev/progress"))


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


# true iterations/s: V100 10/s per GPU-set, K80 2/s; a 2-node gang of 8 V100 makes 10 it/s
RATES = {"V100": 10.0, "K80": 2.0}
CALLS: list[ThroughputQuery] = []


def fake_truth(q: ThroughputQuery) -> float | None:
    CALLS.append(q)
    return RATES.get(q.gpu_type) if q.model == "resnet50" else None


def make(api: FakeApi, clock: Clock, **cfg: float) -> Emulator:
    config = EmulatorConfig(
        time_scale=cfg.get("time_scale", 10.0),
        checkpoint_interval_s=cfg.get("checkpoint_interval_s", 100.0),
        report_interval_s=cfg.get("report_interval_s", 1.0),
    )
    return Emulator(api, fake_truth, config, clock=clock)


def test_gang_advances_at_the_true_rate_of_its_placement_scaled_in_time() -> None:
    api, clock = FakeApi(), Clock()
    api.add_job("a", iterations=10_000)
    p0 = api.add_pod("a", 0, "1", "v100-0")
    p1 = api.add_pod("a", 1, "1", "v100-1")
    emu = make(api, clock, time_scale=10.0, checkpoint_interval_s=100.0)
    emu.step()
    assert api.report(p0) == ProgressReport(0.0, 0.0, 0.0, 1000.0)
    CALLS.clear()
    clock.t += 3.0
    emu.step()
    # 3 wall s x 10 = 30 emulated s at 10 it/s = 300 iterations; no checkpoint yet (every 100 s)
    assert [
        (q.model, q.batch_size, q.gpu_type, q.num_gpus, q.num_nodes, q.dataset, q.unit) for q in CALLS
    ] == [("resnet50", 256, "V100", 8, 2, "imagenet", WorkUnit.ITERATIONS)]
    for pod in (p0, p1):  # every worker reports
        report = api.report(pod)
        assert report is not None
        assert (report.progress, report.checkpoint, report.throughput, report.time) == (
            300.0,
            0.0,
            10.0,
            1003.0,
        )
    clock.t += 8.0
    emu.step()
    # 30 + 80 = 110 emulated s: 1,100 iterations, checkpoint at 100 s = 1,000
    report = api.report(p0)
    assert report is not None and (report.progress, report.checkpoint) == (1100.0, 1000.0)


def test_gang_waits_until_every_worker_runs() -> None:
    api, clock = FakeApi(), Clock()
    api.add_job("a", iterations=10_000)
    p0 = api.add_pod("a", 0, "1", "v100-0")
    p1 = api.add_pod("a", 1, "1", "v100-1", phase="Pending")
    emu = make(api, clock)
    for _ in range(3):
        clock.t += 5
        result = emu.step()
        assert result.waiting == ["team/a"]
    assert api.report(p0) is None
    api.pods[("team", p1)]["status"]["phase"] = "Running"
    emu.step()
    clock.t += 1
    emu.step()
    report = api.report(p0)
    assert (
        report is not None and report.progress == 100.0
    )  # 1 s x 10 x 10 it/s: the waiting time did not count


def test_mixed_gpu_types_run_at_the_slowest() -> None:
    api, clock = FakeApi(), Clock()
    api.add_job("a", iterations=10_000)
    p0 = api.add_pod("a", 0, "1", "v100-0")
    api.add_pod("a", 1, "1", "k80-0")
    emu = make(api, clock, time_scale=1.0)
    emu.step()
    clock.t += 10
    emu.step()
    report = api.report(p0)
    assert report is not None and report.progress == 20.0  # 10 s at the K80's 2 it/s


@pytest.mark.parametrize(
    ("speed", "progress"),
    [
        ("0.6", 60.0),  # 10 s x 10 it/s x 0.6
        ("1", 100.0),
        ("fast", 100.0),  # not a number: full speed, with a warning
        ("0", 100.0),  # outside (0, 1]: full speed
    ],
)
def test_a_node_labelled_slow_runs_its_gangs_at_that_fraction(speed: str, progress: float) -> None:
    api, clock = FakeApi(), Clock()
    api.add_job("a", iterations=10_000)
    p0 = api.add_pod("a", 0, "1", "v100-0")
    api.add_pod("a", 1, "1", "v100-1")
    api.extra_labels["v100-1"] = {"perfsched.dev/emulated-speed": speed}
    emu = make(api, clock, time_scale=1.0)
    emu.step()
    clock.t += 10
    emu.step()
    report = api.report(p0)
    # the gang runs at the pace of its slowest node; the report carries the throughput it achieved
    assert report is not None and report.progress == pytest.approx(progress)
    assert report.throughput == pytest.approx(progress / 10)


def test_finished_gang_reports_the_total_and_asks_kwok_to_end_the_pods() -> None:
    api, clock = FakeApi(), Clock()
    api.add_job("a", iterations=500)
    pods = [api.add_pod("a", i, "1", f"v100-{i}") for i in range(2)]
    emu = make(api, clock, time_scale=10.0)
    emu.step()
    clock.t += 10  # 100 emulated s x 10 it/s = 1,000 > 500
    result = emu.step()
    assert result.finished == ["team/a"]
    for pod in pods:
        ann = api.pods[("team", pod)]["metadata"]["annotations"]
        assert ann["perfsched.dev/kwok-run-duration"] == "0s"
        report = api.report(pod)
        assert report is not None and (report.progress, report.checkpoint) == (500.0, 500.0)
    n = len(api.patches)
    clock.t += 10
    emu.step()
    assert len(api.patches) == n  # reported once, not again


def test_new_generation_starts_from_the_operators_start_progress() -> None:
    api, clock = FakeApi(), Clock()
    api.add_job("a", iterations=100_000)
    old = [api.add_pod("a", i, "1", f"v100-{i}") for i in range(2)]
    emu = make(api, clock, time_scale=10.0, checkpoint_interval_s=100.0)
    emu.step()
    clock.t += 15  # 150 emulated s: progress 1,500, checkpoint 1,000
    emu.step()
    last = api.report(old[0])
    assert last is not None and (last.progress, last.checkpoint) == (1500.0, 1000.0)
    # the operator resizes: generation 2, replica 0's checkpoint passed as start-progress
    for pod in old:
        api.pods[("team", pod)]["status"]["phase"] = "Succeeded"
    new0 = api.add_pod("a", 0, "2", "v100-0", **{"perfsched.dev/start-progress": "1000"})
    api.add_pod("a", 1, "2", "v100-1", **{"perfsched.dev/start-progress": "1000"})
    emu.step()
    first = api.report(new0)
    assert first is not None and (first.progress, first.checkpoint) == (1000.0, 1000.0)  # 500 iterations lost


@pytest.mark.parametrize(
    ("how", "start"),
    [
        ("graceful", 1500.0),  # SIGTERM: the workers save where they stand within the grace period
        ("vanished", 1500.0),  # KWOK removed the deleted pods before the emulator saw them
        ("killed", 1000.0),  # deleted with no grace period (SIGKILL): the last periodic checkpoint
        ("failed", 1000.0),  # a crash saves nothing
    ],
)
def test_stopped_gang_checkpoints_on_sigterm_only(how: str, start: float) -> None:
    api, clock = FakeApi(), Clock()
    api.add_job("a", iterations=100_000)
    old = [api.add_pod("a", i, "1", f"v100-{i}") for i in range(2)]
    emu = make(api, clock, time_scale=10.0, checkpoint_interval_s=100.0)
    emu.step()
    clock.t += 15  # 150 emulated s: progress 1,500, checkpoint 1,000
    emu.step()
    for pod in old:
        meta = api.pods[("team", pod)]["metadata"]
        if how == "graceful":
            meta.update(deletionTimestamp="2026-01-01T00:00:30Z", deletionGracePeriodSeconds=30)
        elif how == "killed":
            meta.update(deletionTimestamp="2026-01-01T00:00:00Z", deletionGracePeriodSeconds=0)
        elif how == "failed":
            api.pods[("team", pod)]["status"]["phase"] = "Failed"
    if how == "vanished":
        for pod in old:
            del api.pods[("team", pod)]
    clock.t += 1
    result = emu.step()
    assert result.checkpointed == (["team/a"] if start == 1500.0 else [])
    if how == "graceful":  # reported on the pods still there, for the operator to see
        report = api.report(old[0])
        assert report is not None and (report.progress, report.checkpoint) == (1500.0, 1500.0)
    # the operator restarts it from the checkpoint it saw (1,000): the workers resume from the newest
    new0 = api.add_pod("a", 0, "2", "v100-0", **{"perfsched.dev/start-progress": "1000"})
    api.add_pod("a", 1, "2", "v100-1", **{"perfsched.dev/start-progress": "1000"})
    emu.step()
    first = api.report(new0)
    assert first is not None and first.progress == start


def test_new_generation_without_start_progress_resumes_from_the_last_checkpoint() -> None:
    api, clock = FakeApi(), Clock()
    api.add_job("a", iterations=100_000)
    old = api.add_pod("a", 0, "1", "v100-0")
    emu = make(api, clock, time_scale=10.0, checkpoint_interval_s=100.0)
    emu.step()
    clock.t += 25
    emu.step()  # progress 2,500, checkpoint 2,000
    api.pods[("team", old)]["status"]["phase"] = "Failed"
    new0 = api.add_pod("a", 0, "2", "v100-1")
    emu.step()
    report = api.report(new0)
    assert report is not None and report.progress == 2000.0


@pytest.mark.parametrize("how", ["graceful", "vanished"])
def test_adopted_job_resumes_from_its_checkpoint_after_a_preemption(how: str) -> None:
    """A batch Job perfsched admitted: its pods carry the worker annotations, not a TrainingJob. Suspending
    it (preemption) deletes them gracefully; the workers save a checkpoint, and the pods of its next
    admission resume from it (the operator writes no start progress for it: the checkpoint is the
    workers' own, as a real trainer's volume)."""
    api, clock = FakeApi(), Clock()
    old = [api.add_adopted_pod("train", i, "1", f"v100-{i}") for i in range(2)]
    emu = make(api, clock, time_scale=10.0, checkpoint_interval_s=100.0)
    assert emu.step().advanced["team/job:train"].progress == 0.0
    clock.t += 15  # 150 emulated s at 10 it/s: progress 1,500, periodic checkpoint 1,000
    emu.step()
    for pod in old:
        meta = api.pods[("team", pod)]["metadata"]
        if how == "graceful":
            meta.update(deletionTimestamp="2026-01-01T00:00:30Z", deletionGracePeriodSeconds=30)
        else:
            del api.pods[("team", pod)]
    clock.t += 1
    assert emu.step().checkpointed == ["team/job:train"]
    new0 = api.add_adopted_pod("train", 0, "2", "k80-0")
    api.add_adopted_pod("train", 1, "2", "k80-0")
    emu.step()
    first = api.report(new0)
    assert first is not None and first.progress == 1500.0  # not from zero
    clock.t += 10  # 100 emulated s on K80 at 2 it/s
    emu.step()
    later = api.report(new0)
    assert later is not None and later.progress == 1700.0


def test_adopted_pods_without_declared_work_are_left_to_their_own_spec() -> None:
    api, clock = FakeApi(), Clock()
    pod = api.add_adopted_pod("train", 0, "1", "v100-0", **{"perfsched.dev/total-work": ""})
    result = make(api, clock).step()
    assert result.advanced == {} and api.report(pod) is None


def test_restarted_emulator_resumes_from_the_workers_annotations() -> None:
    api, clock = FakeApi(), Clock()
    api.add_job("a", iterations=100_000)
    p0 = api.add_pod(
        "a", 0, "1", "v100-0", **{"perfsched.dev/progress": '{"progress": 700, "checkpoint": 400}'}
    )
    emu = make(api, clock, time_scale=1.0)
    emu.step()
    clock.t += 10
    emu.step()
    report = api.report(p0)
    assert report is not None and (report.progress, report.checkpoint) == (800.0, 400.0)


@pytest.mark.parametrize("change", ["no-job", "unknown-model"])
def test_jobs_it_cannot_emulate_make_no_progress(change: str) -> None:
    api, clock = FakeApi(), Clock()
    api.add_job("a", iterations=1000)
    if change == "no-job":
        api.jobs.clear()
    else:
        api.jobs[("team", "a")]["spec"]["model"] = "no-such-model"
    p0 = api.add_pod("a", 0, "1", "v100-0")
    emu = make(api, clock)
    emu.step()
    clock.t += 10
    result = emu.step()
    report = api.report(p0)
    if change == "no-job":
        assert report is None
    else:
        assert report is not None and report.progress == 0.0
        assert result.unknown_throughput == ["team/a"]


def test_config_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="time_scale"):
        EmulatorConfig(time_scale=0)
    with pytest.raises(ValueError, match="checkpoint_interval_s"):
        EmulatorConfig(checkpoint_interval_s=-1)


def _query(**kw: object) -> ThroughputQuery:
    base: dict[str, object] = {
        "model": "resnet50", "dataset": "imagenet", "batch_size": 256, "precision": "fp32", "params": None,
        "flops_per_sample": None, "gpu_type": "V100", "num_gpus": 8, "num_nodes": 2,
        "unit": WorkUnit.ITERATIONS,
    }  # fmt: skip
    base.update(kw)
    return ThroughputQuery(**base)  # type: ignore[arg-type]


def test_real_truth_uses_measurements_and_converts_units() -> None:
    from perfmodel.truth import GroundTruth

    fn = ground_truth_throughput()
    truth = GroundTruth.load()
    its = truth.throughput("resnet50", 256, "V100", 8, 2, "imagenet", network_gbps=100.0)
    assert its is not None
    assert fn(_query(network_gbps=100.0)) == its
    # samples (and epochs x datasetSize) count samples: iterations/s x global batch
    assert fn(_query(unit=WorkUnit.SAMPLES, network_gbps=100.0)) == pytest.approx(its * 256)
    # across nodes the gang's slowest network decides the sync time: Gavel measured it at 10 Gb/s
    measured = truth.throughput("resnet50", 256, "V100", 8, 2, "imagenet")
    assert measured is not None and measured < its
    assert fn(_query(network_gbps=10.0)) == pytest.approx(measured)
    # inside one node the network does not matter
    assert fn(_query(num_nodes=1, network_gbps=10.0)) == fn(_query(num_nodes=1, network_gbps=100.0))


def test_jobs_without_measurements_run_at_the_analytic_pace() -> None:
    fn = ground_truth_throughput()
    # a custom model (modelParams only): 100M parameters, 6 GFLOP per sample
    small = fn(_query(model="", dataset="", params=1e8, flops_per_sample=6e9))
    big = fn(_query(model="", dataset="", params=1e8, flops_per_sample=6e10))
    assert small is not None and big is not None
    assert 0 < big < small  # ten times the FLOPs per sample is slower
    slow_link = fn(
        _query(model="", dataset="", params=1e8, flops_per_sample=6e9, interconnect="pcie", network_gbps=10)
    )
    assert slow_link is not None and slow_link < small


class FlakyApi(FakeApi):
    """``FakeApi`` whose every call fails like an unreachable API server while ``down`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.failed_calls = 0

    def _check(self) -> None:
        if self.down:
            self.failed_calls += 1
            raise ApiUnavailable("listing TrainingJob pods: API server unreachable (MaxRetryError: refused)")

    def list_job_pods(self, namespace: str = "") -> list[WorkerPod]:
        self._check()
        return super().list_job_pods(namespace)

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str | None]) -> None:
        self._check()
        super().annotate_pod(namespace, name, annotations)


def test_run_survives_an_api_outage_logging_it_once_and_keeps_the_gangs_progress(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api, clock = FlakyApi(), Clock()
    api.add_job("a", iterations=1_000_000)
    p0 = api.add_pod("a", 0, "1", "v100-0")
    api.add_pod("a", 1, "1", "v100-1")
    counted: list[float] = []
    health = ApiHealth("emulator", clock=clock, count=counted.append)
    config = EmulatorConfig(time_scale=10.0, checkpoint_interval_s=100.0, report_interval_s=0.5, tick_s=0.01)
    emu = Emulator(api, fake_truth, config, clock=clock, health=health)
    stop = threading.Event()
    runner = threading.Thread(target=emu.run, args=(stop,))
    caplog.set_level(logging.INFO)

    def steps_until(check: Any) -> None:
        deadline = time.monotonic() + 10
        while not check():
            assert time.monotonic() < deadline, "the emulator loop stopped stepping"
            clock.t += 0.5
            time.sleep(0.02)

    runner.start()
    try:
        steps_until(lambda: (r := api.report(p0)) is not None and r.progress > 0)
        api.down = True
        down_at = clock.t
        steps_until(lambda: api.failed_calls >= 20)  # many failed steps: 60+ s of emulated outage
        assert runner.is_alive() and not health.available()
        api.down = False
        up_at = clock.t
        steps_until(lambda: (r := api.report(p0)) is not None and r.time > up_at)
    finally:
        stop.set()
        runner.join(5)
    assert not runner.is_alive()
    outage_logs = [r for r in caplog.records if "API server unavailable" in r.message]
    assert len(outage_logs) == 1  # once per outage, not once per failed step
    assert any("available again" in r.message for r in caplog.records)
    assert health.available() and health.outages == 1
    # the metric got (about) the outage's length: from the first failed step to the first good one
    assert up_at - down_at - 1.0 <= sum(counted) <= up_at - down_at + 1.0
    # the workers kept training during the outage: 10 it/s x 10 (time scale) over the whole time
    report = api.report(p0)
    assert report is not None
    assert report.progress >= 100.0 * (up_at - down_at)


def test_a_dra_node_without_product_label_runs_at_the_decided_type() -> None:
    # "dra-0" has no nvidia.com/gpu.product label (its GPUs are DRA devices): the type the operator
    # decided and wrote on the pods is what kube-scheduler allocated there
    api, clock = FakeApi(), Clock()
    api.add_job("a", iterations=10_000)
    ann = {"perfsched.dev/gpu-type": "V100"}
    api.add_pod("a", 0, "1", "dra-0", **ann)
    api.add_pod("a", 1, "1", "dra-0", **ann)
    emu = make(api, clock)
    emu.step()
    CALLS.clear()
    clock.t += 1.0
    emu.step()
    assert [(q.gpu_type, q.num_gpus, q.num_nodes) for q in CALLS] == [("V100", 8, 1)]
