"""Real training on the real control plane: ``examples/trainer/train.py`` run by ``perfsched emulate --exec``.

Each test creates its own exec nodes (label ``perfsched.dev/exec-node=true``, GPU type T4, which no KWOK
node of the session cluster has, so the test's jobs land only there), starts ``perfsched extender``,
``perfsched operator`` (policy ``srsf:heterogeneity=agnostic``, scoped to the test's namespace: on one GPU
type it differs from aware ``srsf`` only in sizing elastic jobs by predicted gain, and the predictor gives
resnet18 / cifar10 at global batch 32 nothing from a second T4, so aware SRSF would run the elastic job
below on one GPU and there would be no world-size change to test) and ``perfsched emulate --exec``,
and submits TrainingJobs whose workers are the example trainer (``resnet-tiny``, CPU, gloo) under the
Python that has PyTorch (Debian's ``python3-torch``, installed by the tools step). Checkpoints go to a
``hostPath`` volume in the test's temporary directory (one machine: the same files for every replica and
every restart, as a ReadWriteMany volume gives). Without PyTorch the tests are skipped, saying so.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.harness import REPO, Component, KubeCluster, wait_until
from perfsched_dev.emulator.exec import find_torch_python
from scheduler.names import API_VERSION, GROUP, TRAININGJOB_KIND, TRAININGJOB_PLURAL, VERSION

TRAIN = REPO / "examples" / "trainer" / "train.py"
PYTHON = find_torch_python()

pytestmark = pytest.mark.skipif(
    PYTHON is None,
    reason="no Python with PyTorch here: install Debian's python3-torch (`bash e2e/install-tools.sh`) "
    "or set PERFSCHED_TRAINER_PYTHON",
)

StartComponent = Callable[..., Component]


def trainer_job(
    name: str,
    ckpt: Path,
    *,
    steps: int,
    replicas: tuple[int, int] = (1, 1),
    gpus: int = 1,
    priority: int = 0,
    grace: int = 20,
    checkpoint_every: int = 20,
    ignore_sigterm: bool = False,
) -> dict[str, Any]:
    """A TrainingJob of ``steps`` iterations of the example trainer (global batch 32)."""
    assert PYTHON is not None
    ckpt.mkdir(parents=True, exist_ok=True)
    argv = [
        PYTHON, str(TRAIN), "--model", "resnet-tiny", "--global-batch-size", "32",
        "--checkpoint-dir", "/ckpt", "--checkpoint-every", str(checkpoint_every), "--log-every", "5",
    ]  # fmt: skip
    # with ignore_sigterm, a wrapper that ignores SIGTERM (the trainer keeps an inherited ignore, as Unix
    # programs do)
    command = ["sh", "-c", "trap '' TERM; exec \"$@\"", "worker", *argv] if ignore_sigterm else argv
    lo, hi = replicas
    return {
        "apiVersion": API_VERSION,
        "kind": TRAININGJOB_KIND,
        "metadata": {"name": name},
        "spec": {
            "model": "resnet18",
            "dataset": "cifar10",
            "batchSize": 32,
            "work": {"iterations": steps},
            "elastic": hi > lo,
            "replicas": {"min": lo, "max": hi, "gpusPerReplica": gpus},
            "allowedGPUTypes": ["T4"],
            "priority": priority,
            "preemptible": True,
            "checkpointGraceSeconds": grace,
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "worker",
                            "image": "registry.example.com/perfsched-trainer:0.1",
                            "command": command,
                            "env": [{"name": "PERFSCHED_WORKER_REPORT_INTERVAL_SECONDS", "value": "0.5"}],
                            "volumeMounts": [{"name": "ckpt", "mountPath": "/ckpt"}],
                        }
                    ],
                    "volumes": [{"name": "ckpt", "hostPath": {"path": str(ckpt), "type": "Directory"}}],
                }
            },
        },
    }


class Jobs:
    """TrainingJobs, pods and exec nodes of one test."""

    def __init__(self, kube: KubeCluster, ns: str, exec_dir: Path) -> None:
        self.kube, self.ns, self.exec_dir = kube, ns, exec_dir
        self.nodes: list[str] = []
        self.emulator: Component | None = None

    def add_node(self, name: str, gpus: int) -> None:
        from perfsched_dev.k8s.execapi import KubeExec, exec_node_manifest
        from scheduler.core.types import Node

        node = Node(name=name, gpu_type="T4", gpus=gpus, gpu_product="Tesla-T4", rack=f"rack-{self.ns}")
        KubeExec(self.kube.api).create_nodes([exec_node_manifest(node)])
        self.nodes.append(name)

    def submit(self, body: dict[str, Any]) -> None:
        self.kube.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, TRAININGJOB_PLURAL, body)

    def status(self, name: str) -> dict[str, Any]:
        obj = self.kube.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, TRAININGJOB_PLURAL, name)
        return dict(obj.get("status") or {})

    def wait_phase(self, name: str, phases: set[str], timeout: float) -> dict[str, Any]:
        wait_until(lambda: self.status(name).get("phase") in phases, timeout, f"{name} to reach {phases}")
        return self.status(name)

    def pod_exists(self, name: str) -> bool:
        return bool(self.kube.core.list_namespaced_pod(self.ns, field_selector=f"metadata.name={name}").items)

    def log(self, job: str, generation: int, replica: int = 0) -> str:
        path = self.exec_dir / self.ns / f"{job}-g{generation}-{replica}" / "log"
        return path.read_text() if path.exists() else ""

    def events(self, name: str) -> list[str]:
        evs = self.kube.core.list_namespaced_event(
            self.ns, field_selector=f"involvedObject.name={name}"
        ).items
        return [str(e.reason) for e in evs]


def curve(ckpt: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (ckpt / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture
def jobs(
    kube_cluster: KubeCluster,
    fresh_namespace: str,
    start_component: StartComponent,
    start_perfsched_extender: Callable[..., Component],
    tmp_path: Path,
) -> Iterator[Jobs]:
    exec_dir = tmp_path / "exec"
    j = Jobs(kube_cluster, fresh_namespace, exec_dir)
    start_perfsched_extender()
    j.emulator = start_component(
        ["perfsched", "emulate", "--exec", "--exec-dir", str(exec_dir), "--namespace", fresh_namespace],
        name="exec-emulator",
        env={"PERFSCHED_LOG_LEVEL": "INFO"},
    )
    start_component(
        ["perfsched", "operator"],
        name="operator",
        env={
            "PERFSCHED_NAMESPACE": fresh_namespace,
            "PERFSCHED_OPERATOR_POLICY": "srsf:heterogeneity=agnostic",
            "PERFSCHED_OPERATOR_ROUND_PERIOD_SECONDS": "1",
            "PERFSCHED_OPERATOR_MIN_ROUND_INTERVAL_SECONDS": "0.2",
            "PERFSCHED_OPERATOR_MIN_RESIZE_INTERVAL_SECONDS": "2",
            "PERFSCHED_OPERATOR_RESTART_COST_SECONDS": "1",
            "PERFSCHED_OPERATOR_RESIZE_COST_SECONDS": "1",
            "PERFSCHED_OPERATOR_GANG_START_TIMEOUT_SECONDS": "60",
            "PERFSCHED_OPERATOR_LEASE_NAMESPACE": fresh_namespace,
            "PERFSCHED_OPERATOR_METRICS_PORT": "0",
        },
    )
    yield j
    for name in j.nodes:
        kube_cluster.core.delete_node(name)


def test_preempted_job_resumes_from_its_checkpoint_at_another_world_size(jobs: Jobs, tmp_path: Path) -> None:
    # One 2-GPU exec node. `low` (elastic 1..2 replicas, 300 steps) trains on both GPUs; `high` (a short
    # job on 2 GPUs, higher priority and less remaining service, so SRSF evicts `low` for it) arrives
    # mid-run. `low` checkpoints on SIGTERM and waits; a 1-GPU node joins, `low` restarts there with one
    # replica (world size 2 -> 1, same global batch) from its checkpoint, and finishes its 300 steps.
    suffix = uuid.uuid4().hex[:5]
    jobs.add_node(f"exec-{suffix}-a", 2)
    low_ckpt, high_ckpt = tmp_path / "ckpt-low", tmp_path / "ckpt-high"
    jobs.submit(trainer_job("low", low_ckpt, steps=300, replicas=(1, 2)))
    st = jobs.wait_phase("low", {"Running"}, 120)
    assert st["allocation"]["replicas"] == 2, st["allocation"]
    wait_until(lambda: jobs.status("low").get("progress", 0) >= 40, 120, "low to train 40 steps")
    jobs.submit(trainer_job("high", high_ckpt, steps=30, gpus=2, priority=10))
    st = jobs.wait_phase("low", {"Preempted"}, 60)
    assert st["preemptions"] == 1
    jobs.add_node(f"exec-{suffix}-b", 1)
    final = jobs.wait_phase("low", {"Succeeded", "Failed"}, 240)
    assert final["phase"] == "Succeeded", final
    assert jobs.wait_phase("high", {"Succeeded", "Failed"}, 120)["phase"] == "Succeeded"

    # its final step count equals its declared work
    assert final["progress"] == 300 and final["restarts"] >= 1 and final["gangGeneration"] >= 2
    points = curve(low_ckpt)
    assert max(p["step"] for p in points) == 300
    # generation 1 stopped on SIGTERM at step S with a checkpoint; generation 2 resumed from exactly S
    first = jobs.log("low", 1)
    stop = re.search(r"SIGTERM: every replica stopped at step (\d+), replica 0 saved it", first)
    assert stop is not None, first[-3000:]
    stopped = int(stop.group(1))
    second = jobs.log("low", 2)
    assert f"resumed from step {stopped} (checkpoint written at world size 2, now 1;" in second, second[
        -3000:
    ]
    assert "starting at step 0" not in second
    # the loss curve continues where it stopped, at the new world size
    before = [p for p in points if p["step"] <= stopped and p["world_size"] == 2]
    after = [p for p in points if p["step"] > stopped and p["world_size"] == 1]
    assert before[-1]["step"] == stopped and after[0]["step"] == stopped + 1
    tail = [p["loss"] for p in before[-5:]]
    assert before[0]["loss"] > 2.0 and after[0]["loss"] < 1.8  # trained, not back at ln(10) = 2.30
    assert abs(after[0]["loss"] - sum(tail) / len(tail)) < 0.6, (tail, after[:3])
    assert "Preempted" in jobs.events("low") and "Restarted" in jobs.events("low")
    # the operator's accounting: nothing lost when it saw the SIGTERM checkpoint before the pods went (the
    # usual case), at most one checkpoint interval (20 steps) if the pods went first
    assert final["lostWork"] <= 20, final


def test_worker_ignoring_sigterm_is_killed_after_the_grace_period_and_its_work_counted_lost(
    jobs: Jobs, tmp_path: Path
) -> None:
    # One 1-GPU exec node. `stubborn` (no periodic checkpoints) ignores SIGTERM; `urgent` evicts it.
    # The exec emulator sends SIGTERM, waits the job's 3 s grace period, then SIGKILL: the progress
    # `stubborn` had reported is lost (no checkpoint) and counted in its status; it later runs again.
    jobs.add_node(f"exec-{uuid.uuid4().hex[:5]}", 1)
    ckpt = tmp_path / "ckpt-stubborn"
    # enough steps that the worker is still training when its 3 s grace period ends (an idle machine
    # trains this model at ~50 steps/s)
    steps = 1500
    jobs.submit(trainer_job("stubborn", ckpt, steps=steps, grace=3, checkpoint_every=0, ignore_sigterm=True))
    jobs.wait_phase("stubborn", {"Running"}, 120)
    wait_until(lambda: jobs.status("stubborn").get("progress", 0) >= 20, 120, "stubborn to train 20 steps")
    t0 = time.monotonic()
    jobs.submit(trainer_job("urgent", tmp_path / "ckpt-urgent", steps=10, priority=10))
    jobs.wait_phase("stubborn", {"Preempted"}, 60)
    # the pod (and its GPU) stays until the exec emulator SIGKILLs the worker after the grace period
    wait_until(lambda: not jobs.pod_exists("stubborn-g1-0"), 60, "stubborn's pod to go")
    waited = time.monotonic() - t0
    jobs.wait_phase("urgent", {"Running", "Succeeded"}, 60)
    first = jobs.log("stubborn", 1)
    assert "SIGTERM is ignored by this process's parent" in first
    assert "SIGTERM: every replica stopped" not in first  # it never stopped by itself
    assert waited >= 3  # the GPU was held for the whole grace period
    assert jobs.emulator is not None
    assert f"grace period over: SIGKILL to {jobs.ns}/stubborn-g1-0" in jobs.emulator.log(5000)
    final = jobs.wait_phase("stubborn", {"Succeeded", "Failed"}, 240)
    assert final["phase"] == "Succeeded", final
    assert final["lostWork"] >= 20, final  # the steps reported before the kill, never checkpointed
    assert final["progress"] == steps and final["restarts"] == 1
    # the restart had no checkpoint to resume from (start progress 0), so it trained from step 0
    assert "starting at step 0" in jobs.log("stubborn", 2)
    assert max(p["step"] for p in curve(ckpt)) == steps


def test_demo_real_trains_through_a_resize_and_a_preemption(tmp_path: Path) -> None:
    # `perfsched demo --real` end to end (its own control plane): the report a user reads
    from perfsched_dev.demo.real import RealDemoOptions, run_real_demo

    said: list[str] = []
    report, _where = run_real_demo(
        RealDemoOptions(state_dir=tmp_path / "demo", python=PYTHON or ""), said.append
    )
    jobs = {j.name: j for j in report.jobs}
    assert {j.phase for j in report.jobs} == {"Succeeded"}, said
    alpha = jobs["alpha"]
    assert alpha.progress == alpha.total == 1000
    assert alpha.resizes >= 1 and alpha.preemptions >= 1, said
    assert len(alpha.restart_log) == alpha.restarts >= 2
    for r in alpha.restart_log:
        assert r.resumed_from > 0 and r.world_before != 0
        assert r.loss_after is not None and r.loss_before is not None and r.loss_after < 1.8  # not 2.30 again
    assert alpha.observed and alpha.predicted
    assert report.elapsed_s < 300, report.elapsed_s
