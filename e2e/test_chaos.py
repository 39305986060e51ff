"""Chaos on the local control plane: every component is killed (SIGKILL) and restarted in turn while two
dozen TrainingJobs train, and nothing a user relies on breaks.

The test brings up its own cluster with ``perfsched dev-cluster up --with-perfsched`` (extender, operator
and the workload emulator as local processes), submits the jobs, and once several run kills and restarts
``kube-apiserver`` (down 5 s), ``etcd`` (down 3 s), perfsched's ``kube-scheduler``, the extender, the
operator and the emulator, one after the other, with ``perfsched dev-cluster restart COMPONENT``, which
starts each with its original command line. A sampler thread checks all along that

- no node has more GPUs bound than it has, no replica of a gang exists twice, no job has two live gangs;
- no TrainingJob disappears, and none goes back in progress beyond the last checkpoint it had reached;
- no perfsched process (extender, operator, emulator) exits on its own;
- a training script using ``scheduler.worker.ProgressReporter`` (in the test process) keeps training and
  reporting through the API server's outage and finishes with its last progress on its pod;

and at the end every job has Succeeded with all its work done, no perfsched log holds a traceback, and the
operator reported the API server outage on ``/readyz`` (503) and in
``perfsched_api_unavailable_seconds_total``. Sized for CI's two cores: about two to three minutes.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client as k8s

from e2e.harness import REPO, gpu_capacity, wait_until
from perfsched_dev.devcluster.cluster import DevCluster
from perfsched_dev.devcluster.process import is_running
from scheduler.k8s import connect
from scheduler.names import API_VERSION, GROUP, TRAININGJOB_KIND, TRAININGJOB_PLURAL, VERSION

SPEC = str(REPO / "e2e" / "clusters" / "e2e-small.yaml")
TIME_SCALE = 300.0
PERFSCHED = ("perfsched-extender", "perfsched-operator", "perfsched-emulator")
#: (component, seconds it stays down): the order of the issue's SRE run
CHAOS = [
    ("kube-apiserver", 5.0),
    ("etcd", 3.0),
    ("kube-scheduler-perfsched", 1.0),
    ("perfsched-extender", 1.0),
    ("perfsched-operator", 1.0),
    ("perfsched-emulator", 1.0),
]
MODELS = [
    # (model, dataset, global batch, iterations): a few emulated minutes each, seconds at TIME_SCALE
    ("resnet18", "cifar10", 128, 3000),
    ("resnet50", "imagenet", 256, 500),
    ("bert", "squad", 32, 500),
    ("lstm", "wikitext-2", 64, 8000),
]
JOBS = 24


def perfsched(*args: str, env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "scheduler.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def trainingjob(i: int) -> dict[str, Any]:
    model, dataset, batch, iterations = MODELS[i % len(MODELS)]
    return {
        "apiVersion": API_VERSION,
        "kind": TRAININGJOB_KIND,
        "metadata": {"name": f"chaos-{i:02d}"},
        "spec": {
            "model": model,
            "dataset": dataset,
            "batchSize": batch,
            "work": {"iterations": iterations},
            "replicas": {"max": 1 + i % 2, "gpusPerReplica": 1 + (i // 2) % 2},
            "checkpointGraceSeconds": 5,
            "template": {
                "spec": {"containers": [{"name": "worker", "image": "ghcr.io/perfsched/trainer:0.1"}]}
            },
        },
    }


class Sampler:
    """Samples pods, TrainingJobs and the perfsched processes every 0.3 s; records every violation.

    Samples that fail because the API server is down (it is, on purpose) are counted, not violations.
    ``restarting`` names the component the test is restarting right now: its absence is not an exit.
    """

    def __init__(self, api: k8s.ApiClient, dc: DevCluster, jobs: list[str]) -> None:
        self.core = k8s.CoreV1Api(api)
        self.custom = k8s.CustomObjectsApi(api)
        self.dc = dc
        self.jobs = jobs
        self.capacity = gpu_capacity(api)
        self.violations: list[str] = []
        self.samples = 0
        self.failed_samples = 0
        self.restarting = ""
        self.max_checkpoint: dict[str, float] = defaultdict(float)
        self.status: dict[str, dict[str, Any]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def violation(self, text: str) -> None:
        if text not in self.violations:
            self.violations.append(text)

    def check_processes(self) -> None:
        state = self.dc.load()
        assert state is not None
        for record in state.processes:
            if record.name in PERFSCHED and record.name != self.restarting and not is_running(record):
                self.violation(f"{record.name} (pid {record.pid}) exited on its own")

    def sample(self) -> None:
        pods = self.core.list_pod_for_all_namespaces(_request_timeout=5).items
        listed = self.custom.list_cluster_custom_object(
            GROUP, VERSION, TRAININGJOB_PLURAL, _request_timeout=5
        )
        tjs = listed["items"]
        used: dict[str, int] = defaultdict(int)
        gangs: dict[str, set[str]] = defaultdict(set)
        replicas: dict[tuple[str, str, str], int] = defaultdict(int)
        for p in pods:
            if p.status.phase in ("Succeeded", "Failed"):
                continue
            if p.spec.node_name:
                for c in p.spec.containers:
                    limits = (c.resources.limits or {}) if c.resources else {}
                    used[p.spec.node_name] += int(limits.get("nvidia.com/gpu", 0))
            labels = p.metadata.labels or {}
            job = labels.get("perfsched.dev/job-name")
            if job and p.metadata.deletion_timestamp is None:
                gen = labels.get("perfsched.dev/generation", "")
                gangs[job].add(gen)
                replicas[(job, gen, labels.get("perfsched.dev/replica-index", ""))] += 1
        for node, gpus in used.items():
            if gpus > self.capacity.get(node, 0):
                self.violation(f"node {node}: {gpus} GPUs bound, capacity {self.capacity.get(node)}")
        for job, gens in gangs.items():
            if len(gens) > 1:
                self.violation(f"job {job}: live pods of generations {sorted(gens)}")
        for key, n in replicas.items():
            if n > 1:
                self.violation(f"replica {key} exists {n} times")
        seen = {t["metadata"]["name"]: t.get("status") or {} for t in tjs}
        for name in self.jobs:
            if name not in seen:
                self.violation(f"TrainingJob {name} disappeared")
                continue
            st = seen[name]
            progress = float(st.get("progress") or 0.0)
            checkpoint = self.max_checkpoint[name]
            if progress < checkpoint - 1e-6:
                self.violation(f"{name} went back to progress {progress} behind its checkpoint {checkpoint}")
            self.max_checkpoint[name] = max(
                self.max_checkpoint[name], float(st.get("checkpointProgress") or 0)
            )
        self.status = seen
        self.samples += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            self.check_processes()
            try:
                self.sample()
            except Exception:  # the API server is down on purpose part of the time
                self.failed_samples += 1
            self._stop.wait(0.3)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


class TrainingScript(threading.Thread):
    """A training loop using ``scheduler.worker.ProgressReporter`` on its own pod, as a user writes it:
    a step every 20 ms, a report every step, a checkpoint every 50 steps, ``finish`` at the end. Records
    each step's time and whether the reporter had unsent progress; any exception ends it (and fails the
    test): an API server restart must not kill a training run."""

    def __init__(self, kubeconfig: str, pod: str) -> None:
        super().__init__(daemon=True)
        from scheduler.worker import ProgressReporter

        self.reporter = ProgressReporter(
            pod, "default", min_interval_s=0.5, kubeconfig=kubeconfig, retry_s=0.5, max_retry_s=2.0
        )
        self.steps: list[tuple[float, int, bool]] = []
        self.error: BaseException | None = None
        self.finished: bool | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            step = int(self.reporter.start_progress())
            while not self.stop.is_set():
                step += 1  # one training step
                self.reporter.report(step)
                if step % 50 == 0:
                    self.reporter.checkpoint(step)
                self.steps.append((time.monotonic(), step, self.reporter.pending))
                time.sleep(0.02)
            self.finished = self.reporter.finish(step)
        except BaseException as exc:  # what the test asserts never happens
            self.error = exc


@pytest.fixture
def chaos_cluster(tmp_path: Path) -> Iterator[tuple[DevCluster, dict[str, Any], dict[str, str]]]:
    if os.environ.get("PERFSCHED_E2E_KUBECONFIG"):
        pytest.skip("chaos kills control-plane processes: it needs the local control plane (dev-cluster)")
    state_dir = tmp_path / "dc"
    env = {
        **os.environ,
        "PERFSCHED_DEV_CLUSTER_DIR": str(state_dir),
        "PERFSCHED_OPERATOR_POLICY": "fifo",
        "PERFSCHED_OPERATOR_POLICY_CONFIG": '{"backfill": true}',
        "PERFSCHED_OPERATOR_ROUND_PERIOD_SECONDS": "1",
        "PERFSCHED_OPERATOR_MIN_ROUND_INTERVAL_SECONDS": "0.2",
        "PERFSCHED_OPERATOR_GANG_START_TIMEOUT_SECONDS": "60",
        "PERFSCHED_OPERATOR_LEASE_DURATION_SECONDS": "4",
        "PERFSCHED_OPERATOR_RENEW_DEADLINE_SECONDS": "3",
        "PERFSCHED_OPERATOR_RETRY_PERIOD_SECONDS": "0.5",
        "PERFSCHED_EMULATOR_TICK_SECONDS": "0.25",
        "PERFSCHED_EMULATOR_REPORT_INTERVAL_SECONDS": "0.5",
        "PERFSCHED_EMULATOR_CHECKPOINT_INTERVAL_SECONDS": "100",
    }
    up = perfsched(
        "dev-cluster", "up", "--with-perfsched", "--cluster", SPEC, "--time-scale", f"{TIME_SCALE:g}",
        "--json", env=env,
    )  # fmt: skip
    if up.returncode != 0:
        pytest.fail(f"dev-cluster up --with-perfsched failed:\n{up.stderr}", pytrace=False)
    dc = DevCluster(state_dir)
    try:
        yield dc, json.loads(up.stdout), env
    finally:
        perfsched("dev-cluster", "down", env=env)


def _metric(url: str, name: str, labels: str) -> float:
    for line in httpx.get(f"{url}/metrics", timeout=5).text.splitlines():
        if line.startswith(f"{name}{{{labels}}}"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_killing_every_component_in_turn_breaks_nothing(
    chaos_cluster: tuple[DevCluster, dict[str, Any], dict[str, str]],
) -> None:
    dc, info, env = chaos_cluster
    api = connect.api_client(info["kubeconfig"])
    custom = k8s.CustomObjectsApi(api)
    names = [trainingjob(i)["metadata"]["name"] for i in range(JOBS)]
    for i in range(JOBS):
        custom.create_namespaced_custom_object(GROUP, VERSION, "default", TRAININGJOB_PLURAL, trainingjob(i))
    operator_url = info["endpoints"]["perfsched-operator"]

    def phases() -> dict[str, str]:
        items = custom.list_namespaced_custom_object(
            GROUP, VERSION, "default", TRAININGJOB_PLURAL, _request_timeout=5
        )
        return {t["metadata"]["name"]: (t.get("status") or {}).get("phase", "") for t in items["items"]}

    def restart(component: str, down_for: float) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "scheduler.cli", "dev-cluster", "restart", component,
             "--down-for", f"{down_for:g}", "--json"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    readyz_during_outage: set[int] = set()
    # a real training script's pod (on a fake node, no GPUs): it reports through the API server outage
    core = k8s.CoreV1Api(api)
    node = core.list_node().items[0].metadata.name
    core.create_namespaced_pod(
        "default",
        {"metadata": {"name": "trainer-0"},
         "spec": {"nodeName": node, "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]}},
    )  # fmt: skip
    script = TrainingScript(info["kubeconfig"], "trainer-0")
    script.start()
    outage_window = (0.0, 0.0)
    restarted: dict[str, int] = {}
    with Sampler(api, dc, names) as sampler:
        wait_until(lambda: sum(p == "Running" for p in phases().values()) >= 5, 90, "5 running jobs")
        for component, down_for in CHAOS:
            sampler.restarting = component
            began = time.monotonic()
            proc = restart(component, down_for)
            while proc.poll() is None:
                if component == "kube-apiserver":
                    # the operator says it cannot reach the API server, and stays alive
                    with contextlib.suppress(httpx.HTTPError):
                        readyz_during_outage.add(httpx.get(f"{operator_url}/readyz", timeout=2).status_code)
                time.sleep(0.2)
            out, err = proc.communicate()
            assert proc.returncode == 0, f"restart {component} failed:\n{err}"
            restarted[component] = json.loads(out)["pid"]
            sampler.restarting = ""
            if component == "kube-apiserver":
                outage_window = (began, time.monotonic())
                wait_until(
                    lambda: httpx.get(f"{operator_url}/readyz", timeout=2).status_code == 200,
                    30,
                    "the operator to be ready again after the API server came back",
                )
                unavailable = _metric(
                    operator_url, "perfsched_api_unavailable_seconds_total", 'component="operator"'
                )
                assert unavailable >= 3.0, unavailable  # the 5 s outage, as the operator saw it
            time.sleep(3.0)  # let the cluster work a little between two kills
        wait_until(
            lambda: all(p == "Succeeded" for p in phases().values()),
            240,
            "every job to succeed",
            interval=1.0,
        )
        sampler.check_processes()
        sampler.sample()

    print(
        f"chaos: {JOBS} jobs, {len(CHAOS)} kills, {sampler.samples} samples "
        f"({sampler.failed_samples} taken while the API server was down)"
    )
    script.stop.set()
    script.join(timeout=120)
    assert script.error is None, f"the training script died: {script.error!r}"
    assert script.finished is True
    # it kept training while the API server was down, and its reports did fail meanwhile
    during = [(step, pending) for t, step, pending in script.steps if outage_window[0] < t < outage_window[1]]
    assert len(during) > 20 and any(pending for _, pending in during), (len(during), outage_window)
    report = json.loads(
        core.read_namespaced_pod("trainer-0", "default").metadata.annotations["perfsched.dev/progress"]
    )
    assert report["progress"] == report["checkpoint"] == script.steps[-1][1]
    assert 503 in readyz_during_outage, readyz_during_outage
    # one sample lists every pod and TrainingJob: about one a second on a loaded CI machine
    assert sampler.samples >= 20, (sampler.samples, sampler.failed_samples)
    assert sampler.violations == []
    state = dc.status()
    assert state is not None and state.phase == "running", state and [
        p.name for p in state.processes if not is_running(p)
    ]
    assert {p.name: p.pid for p in state.processes if p.name in restarted} == restarted
    for name in names:
        st = sampler.status[name]
        assert st.get("phase") == "Succeeded", (name, st)
        assert st.get("progress") == st.get("totalWork"), (name, st)
    for component in PERFSCHED:
        text = (Path(info["logs"][component])).read_text(errors="replace")
        assert "Traceback" not in text, f"{component} logged a traceback:\n{text[-3000:]}"
        assert text.count("API server unavailable") <= len(CHAOS), component  # once per outage at most
