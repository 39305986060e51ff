"""The TrainingJob operator on the real control plane, with the real extender and the workload emulator.

Each test starts ``perfsched extender``, ``perfsched emulate`` (time-scaled, so minutes of training take
seconds) and ``perfsched operator`` (one or two replicas, scoped to the test's namespace) as separate
processes, submits TrainingJobs through the API, and checks what a user would see: phases, conditions,
allocations, progress, events. A watcher thread samples pods all along and records any node holding
more GPUs than it has, any job with two live gangs, and any replica that exists twice.

Cluster: ``e2e/clusters/e2e-small.yaml`` (2 x 8 A100, 2 x 4 V100, 2 x 4 K80 = 32 GPUs).
"""

from __future__ import annotations

import base64
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from e2e.harness import Component, KubeCluster, gpu_capacity, wait_until
from scheduler.names import API_VERSION, GROUP, TRAININGJOB_KIND, TRAININGJOB_PLURAL, VERSION
from scheduler.operator import learning_state

TIME_SCALE = 300.0

StartComponent = Callable[..., Component]


# --- helpers ---------------------------------------------------------------------------------------------


def tj(
    name: str,
    *,
    model: str = "resnet18",
    batch: int = 128,
    dataset: str = "cifar10",
    iterations: int = 2000,
    replicas: int = 1,
    gpus: int = 1,
    **extra: Any,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "model": model,
        "dataset": dataset,
        "batchSize": batch,
        "work": {"iterations": iterations},
        "replicas": {"max": replicas, "gpusPerReplica": gpus},
        "checkpointGraceSeconds": 10,
        "template": {
            "spec": {"containers": [{"name": "worker", "image": "ghcr.io/perfsched/examples-trainer:0.1"}]}
        },
    }
    spec.update(extra)
    return {
        "apiVersion": API_VERSION,
        "kind": TRAININGJOB_KIND,
        "metadata": {"name": name},
        "spec": spec,
    }


class Cluster:
    """Small client-side helpers over the admin API for one test namespace."""

    def __init__(self, kube: KubeCluster, ns: str) -> None:
        self.kube, self.ns = kube, ns
        self.core, self.custom = kube.core, kube.custom

    def submit(self, body: dict[str, Any]) -> None:
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.ns, TRAININGJOB_PLURAL, body)

    def get(self, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, TRAININGJOB_PLURAL, name)  # type: ignore[no-any-return]

    def status(self, name: str) -> dict[str, Any]:
        return self.get(name).get("status") or {}

    def phase(self, name: str) -> str:
        return str(self.status(name).get("phase", ""))

    def condition(self, name: str, type_: str) -> dict[str, Any]:
        return next((c for c in self.status(name).get("conditions", []) if c["type"] == type_), {})

    def wait_phase(self, name: str, phases: set[str], timeout: float) -> dict[str, Any]:
        wait_until(lambda: self.phase(name) in phases, timeout, f"{name} to reach {sorted(phases)}")
        return self.status(name)

    def pods(self, job: str = "") -> list[Any]:
        sel = f"perfsched.dev/job-name={job}" if job else "perfsched.dev/job-name"
        return list(self.core.list_namespaced_pod(self.ns, label_selector=sel).items)

    def events(self, name: str) -> list[tuple[str, str]]:
        evs = self.core.list_namespaced_event(self.ns, field_selector=f"involvedObject.name={name}").items
        # resourceVersions of one namespace's events grow with creation (etcd revision)
        return [(e.reason, e.message) for e in sorted(evs, key=lambda e: int(e.metadata.resource_version))]

    def wait_event(self, name: str, reason: str, timeout: float = 20) -> list[tuple[str, str]]:
        wait_until(lambda: reason in [r for r, _ in self.events(name)], timeout, f"event {reason} of {name}")
        return self.events(name)


class Watcher:
    """Samples pods and nodes; records over-committed nodes, doubled gangs and doubled replicas."""

    def __init__(self, kube: KubeCluster) -> None:
        self.core = kube.core
        self.capacity = gpu_capacity(kube.api)
        self.violations: list[str] = []
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _gpus(pod: Any) -> int:
        total = 0
        for c in pod.spec.containers:
            lim = (c.resources.limits or {}) if c.resources else {}
            req = (c.resources.requests or {}) if c.resources else {}
            total += int(req.get("nvidia.com/gpu", lim.get("nvidia.com/gpu", 0)))
        return total

    def sample(self) -> None:
        pods = self.core.list_pod_for_all_namespaces().items
        used: dict[str, int] = defaultdict(int)
        gangs: dict[str, set[str]] = defaultdict(set)
        replicas: dict[tuple[str, str, str], int] = defaultdict(int)
        for p in pods:
            if p.status.phase in ("Succeeded", "Failed"):
                continue
            if p.spec.node_name:
                used[p.spec.node_name] += self._gpus(p)
            labels = p.metadata.labels or {}
            job = labels.get("perfsched.dev/job-name")
            if job and p.metadata.deletion_timestamp is None:
                key = f"{p.metadata.namespace}/{job}"
                gen = labels.get("perfsched.dev/generation", "")
                gangs[key].add(gen)
                replicas[(key, gen, labels.get("perfsched.dev/replica-index", ""))] += 1
        for node, gpus in used.items():
            if gpus > self.capacity.get(node, 0):
                self.violations.append(f"node {node}: {gpus} GPUs bound, capacity {self.capacity.get(node)}")
        for key, gens in gangs.items():
            if len(gens) > 1:
                self.violations.append(f"job {key}: live pods of generations {sorted(gens)}")
        for rkey, n in replicas.items():
            if n > 1:
                self.violations.append(f"replica {rkey} exists {n} times")
        self.samples += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
            except Exception as exc:  # the API may hiccup under load; keep sampling
                self.violations.append(f"sampling failed: {exc}") if "sampling" in str(exc) else None
            self._stop.wait(0.3)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def operator_env(ns: str, policy: str, **extra: str) -> dict[str, str]:
    env = {
        "PERFSCHED_NAMESPACE": ns,
        "PERFSCHED_OPERATOR_POLICY": policy,
        "PERFSCHED_OPERATOR_ROUND_PERIOD_SECONDS": "1",
        "PERFSCHED_OPERATOR_MIN_ROUND_INTERVAL_SECONDS": "0.2",
        "PERFSCHED_OPERATOR_MIN_RESIZE_INTERVAL_SECONDS": "2",
        "PERFSCHED_OPERATOR_RESTART_COST_SECONDS": "5",
        "PERFSCHED_OPERATOR_RESIZE_COST_SECONDS": "2",
        "PERFSCHED_OPERATOR_GANG_START_TIMEOUT_SECONDS": "60",
        "PERFSCHED_OPERATOR_LEASE_NAMESPACE": ns,
        "PERFSCHED_OPERATOR_LEASE_DURATION_SECONDS": "4",
        "PERFSCHED_OPERATOR_RENEW_DEADLINE_SECONDS": "3",
        "PERFSCHED_OPERATOR_RETRY_PERIOD_SECONDS": "0.5",
        "PERFSCHED_OPERATOR_METRICS_PORT": "0",
    }
    env.update(extra)
    return env


@pytest.fixture
def cluster(kube_cluster: KubeCluster, fresh_namespace: str) -> Cluster:
    return Cluster(kube_cluster, fresh_namespace)


@pytest.fixture
def stack(
    kube_cluster: KubeCluster,
    fresh_namespace: str,
    start_component: StartComponent,
    start_perfsched_extender: Callable[..., Component],
) -> Iterator[Callable[..., list[Component]]]:
    """Start extender + emulator + ``replicas`` operators with ``policy``; returns the operators."""

    def start(
        policy: str = "fifo", replicas: int = 1, checkpoint_interval: float = 100.0, **env: str
    ) -> list[Component]:
        start_perfsched_extender()
        start_component(
            ["perfsched", "emulate", "--time-scale", str(TIME_SCALE), "--checkpoint-interval",
             str(checkpoint_interval), "--report-interval", "0.5", "--namespace", fresh_namespace],
            name="emulator",
            env={"PERFSCHED_EMULATOR_TICK_SECONDS": "0.25"},
        )  # fmt: skip
        return [
            start_component(
                ["perfsched", "operator"],
                name=f"operator-{i}",
                env=operator_env(fresh_namespace, policy, PERFSCHED_OPERATOR_IDENTITY=f"operator-{i}", **env),
            )
            for i in range(replicas)
        ]

    yield start


# --- validation (no operator needed) ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda s: s["replicas"].update(min=4, max=2), "spec.replicas.min"),
        (lambda s: s.update(batchSize=0), "spec.batchSize"),
        (lambda s: s.update(work={"iterations": 0}), "spec.work.iterations"),
        (lambda s: s.update(work={"iterations": 5, "samples": 5}), "spec.work"),
        (lambda s: s.update(work={"epochs": 2}), "spec.work.datasetSize"),
        (lambda s: s["replicas"].update(gpusPerReplica=0), "spec.replicas.gpusPerReplica"),
        (lambda s: s.update(deadline="next tuesday"), "spec.deadline"),
        (lambda s: s.update(modelParams={"parameters": 1e9, "flopsPerSample": 1e12}), "spec.model"),
        (lambda s: s.pop("model"), "spec.model"),
        (lambda s: s.update(allowedGPUTypes=["A100-80GB"]), "spec.allowedGPUTypes[0]"),
        (lambda s: s.update(precision="fp8"), "spec.precision"),
        (lambda s: s.update(priority=1, priorityClassName="high"), "spec.priorityClassName"),
        (lambda s: s.pop("template"), "spec.template"),
        (lambda s: s.update(sharding="tp4xqq"), "spec.sharding"),
        (lambda s: s.update(sequenceLength=0), "spec.sequenceLength"),
        (lambda s: s.update(microBatchSize=10**6), "spec.microBatchSize"),
        (lambda s: (s.pop("model"), s.update(modelParams={"parameters": 1e9})), "spec.modelParams"),
        (
            lambda s: (s.pop("model"), s.update(modelProfile={"configMapName": "Bad_Name", "key": "k"})),
            "spec.modelProfile.configMapName",
        ),
        (lambda s: s.update(modelProfile={"configMapName": "cm", "key": "a/b"}), "spec.modelProfile.key"),
    ],
)
def test_invalid_manifest_is_rejected_naming_the_field(cluster: Cluster, mutate: Any, field: str) -> None:
    body = tj("bad")
    mutate(body["spec"])
    with pytest.raises(ApiException) as info:
        cluster.submit(body)
    assert info.value.status == 422, info.value.body
    assert field in info.value.body, info.value.body


def test_valid_examples_are_accepted_and_scale_sets_the_ceiling(cluster: Cluster) -> None:
    import yaml

    from e2e.harness import REPO

    for path in sorted((REPO / "crds" / "examples").glob("*.yaml")):
        if path.name == "queues.yaml":  # TrainingQueues: e2e/test_queues.py
            continue
        body = yaml.safe_load(path.read_text())
        if path.name.startswith("invalid-"):
            with pytest.raises(ApiException):
                cluster.submit(body)
        else:
            cluster.submit(body)
    # `kubectl scale tj/bert-elastic --replicas=4` sets spec.replicas.max
    cluster.custom.patch_namespaced_custom_object_scale(
        GROUP, VERSION, cluster.ns, TRAININGJOB_PLURAL, "bert-elastic", {"spec": {"replicas": 4}}
    )
    assert cluster.get("bert-elastic")["spec"]["replicas"]["max"] == 4
    with pytest.raises(ApiException) as info:  # below min (1) is refused by the min <= max rule
        cluster.custom.patch_namespaced_custom_object_scale(
            GROUP, VERSION, cluster.ns, TRAININGJOB_PLURAL, "bert-elastic", {"spec": {"replicas": 0}}
        )
    assert info.value.status == 422


# --- the lifecycle ---------------------------------------------------------------------------------------


def test_rigid_job_runs_to_succeeded_with_honest_status(cluster: Cluster, stack: Any) -> None:
    stack("fifo")
    with Watcher(cluster.kube) as w:
        cluster.submit(tj("rn18", replicas=2, gpus=2, iterations=3000))
        st = cluster.wait_phase("rn18", {"Running"}, 60)
        assert st["allocation"]["replicas"] == 2 and st["allocation"]["gpusPerReplica"] == 2
        assert st["predictedThroughput"] > 0
        st = cluster.wait_phase("rn18", {"Succeeded", "Failed"}, 90)
    assert st["phase"] == "Succeeded", st
    assert (st["progress"], st["progressPercent"], st["totalWork"]) == (3000, 100.0, 3000)
    assert st["observedThroughput"] > 0
    assert cluster.condition("rn18", "Succeeded")["status"] == "True"
    reasons = [r for r, _ in cluster.wait_event("rn18", "Succeeded")]
    assert reasons == ["Started", "Running", "Succeeded"], reasons
    assert all(p.status.phase == "Succeeded" for p in cluster.pods("rn18"))
    assert w.samples > 0 and w.violations == []


MODELS = [
    # (model, dataset, global batch, iterations): a few emulated minutes each, seconds at TIME_SCALE
    ("resnet18", "cifar10", 128, 2000),
    ("resnet50", "imagenet", 256, 300),
    ("bert", "squad", 32, 300),
    ("lstm", "wikitext-2", 64, 5000),
]


def test_mixed_batch_of_20_jobs_all_succeed(cluster: Cluster, stack: Any) -> None:
    # a policy spec in PERFSCHED_OPERATOR_POLICY (heterogeneity-aware by default: this test counts
    # restarts, and a running job is moved only when the move pays against what it was measured to make)
    stack("fifo:backfill=true")
    names = []
    elastic: set[str] = set()
    with Watcher(cluster.kube) as w:
        for i in range(20):
            model, dataset, batch, iters = MODELS[i % 4]
            extra: dict[str, Any] = {"priority": i % 3}
            replicas, gpus = [(1, 1), (2, 1), (1, 2), (2, 2), (1, 4)][i % 5]
            if i % 6 == 5:
                elastic.add(f"job-{i:02d}-{model}")
                extra.update(elastic=True)
                replicas, gpus = 4, 1
                extra["replicas"] = {"min": 1, "max": 4, "gpusPerReplica": 1}
            if i % 7 == 3:
                extra["allowedGPUTypes"] = ["V100", "A100"]
            if i == 11:
                extra["deadline"] = "2099-01-01T00:00:00Z"
            name = f"job-{i:02d}-{model}"
            names.append(name)
            body = tj(
                name,
                model=model,
                dataset=dataset,
                batch=batch,
                iterations=iters,
                replicas=replicas,
                gpus=gpus,
            )
            body["spec"].update(extra)
            cluster.submit(body)

        def all_done() -> bool:
            return all(cluster.phase(n) in ("Succeeded", "Failed") for n in names)

        wait_until(all_done, 300, "all 20 jobs to finish", interval=1.0)
    for n in names:
        st = cluster.status(n)
        assert st["phase"] == "Succeeded", (n, st)
        assert st["progress"] == st["totalWork"] and st["progressPercent"] == 100.0, (n, st)
        assert "allocation" not in st and st["completionTime"] >= st["startTime"], (n, st)
        assert st.get("preemptions", 0) == 0, (n, st)  # FIFO never preempts
        # a rigid job never restarts; an elastic one only when it is resized (grown into freed GPUs)
        assert st.get("restarts", 0) <= (st.get("resizes", 0) if n in elastic else 0), (n, st)
        assert st["attainedService"] > 0, (n, st)
        assert cluster.condition(n, "Succeeded")["status"] == "True"
        assert {p.status.phase for p in cluster.pods(n)} == {"Succeeded"}, n
    assert w.samples > 10 and w.violations == []


def test_elastic_job_grows_when_gpus_free_up_and_shrinks_when_another_job_arrives(
    cluster: Cluster, stack: Any
) -> None:
    # Policy `deadline` (ElasticFlow): jobs with a deadline are admitted with their minimum share first;
    # the GPUs left go to best-effort elastic jobs by predicted marginal gain. The elastic job is a
    # model described by its size (350 M parameters, 2 TFLOPs per sample), which the predictor scales
    # well on one 8-GPU A100 node and badly across nodes, so it lives on one node next to a long job
    # holding the other A100 node. It need not progress (the emulator has no ground truth for it).
    stack("deadline")
    r50: dict[str, Any] = {
        "model": "resnet50",
        "dataset": "imagenet",
        "batch": 256,
        "allowedGPUTypes": ["A100"],
    }
    with Watcher(cluster.kube) as w:
        cluster.submit(tj("long", iterations=10_000_000, gpus=8, **r50))
        cluster.submit(tj("blocker", iterations=15000, gpus=4, **r50))
        cluster.wait_phase("long", {"Running"}, 60)
        cluster.wait_phase("blocker", {"Running"}, 60)
        el = tj("elastic", iterations=10_000_000, batch=32, elastic=True, allowedGPUTypes=["A100"])
        del el["spec"]["model"]
        el["spec"]["modelParams"] = {"parameters": 350_000_000, "flopsPerSample": 2_000_000_000_000}
        el["spec"]["replicas"] = {"min": 1, "max": 8, "gpusPerReplica": 1}
        cluster.submit(el)
        st = cluster.wait_phase("elastic", {"Running"}, 60)
        before = st["allocation"]["replicas"]
        assert before <= 4, st["allocation"]  # what was free next to the blocker
        cluster.wait_phase("blocker", {"Succeeded"}, 90)
        # the blocker's GPUs free up: the elastic job is resized up through a checkpoint
        wait_until(
            lambda: (
                cluster.phase("elastic") == "Running"
                and cluster.status("elastic").get("allocation", {}).get("replicas", 0) > before
            ),
            90,
            "the elastic job to grow",
        )
        grown = cluster.status("elastic")
        size = grown["allocation"]["replicas"]
        assert grown["resizes"] >= 1 and grown["gangGeneration"] >= 2
        assert f"resizing {before} -> {size} replicas" in cluster.condition("elastic", "Resized")["message"]
        gen = str(grown["gangGeneration"])
        pods = [p for p in cluster.pods("elastic") if p.metadata.labels["perfsched.dev/generation"] == gen]
        assert len(pods) == size
        world = {e.value for p in pods for e in p.spec.containers[0].env if e.name == "WORLD_SIZE"}
        assert world == {str(size)}
        # a job with a deadline that only fits on A100 arrives: the elastic job gives up GPUs for it
        cluster.submit(tj("newcomer", iterations=6000, priority=10, deadline="2099-01-01T00:00:00Z", **r50))
        wait_until(
            lambda: 0 < (cluster.status("elastic").get("allocation") or {}).get("replicas", 0) < size,
            60,
            "the elastic job to shrink",
        )
        shrunk = cluster.status("elastic")
        assert shrunk["resizes"] >= grown["resizes"] + 1
        assert f"resizing {size} -> " in cluster.condition("elastic", "Resized")["message"]
        cluster.wait_phase("newcomer", {"Succeeded"}, 90)
    assert w.violations == []


def test_preemptible_low_priority_job_is_preempted_and_later_finishes(cluster: Cluster, stack: Any) -> None:
    stack("srsf", checkpoint_interval=50.0)
    with Watcher(cluster.kube) as w:
        cluster.submit(
            tj("long-low", model="resnet50", dataset="imagenet", batch=256, iterations=40000, replicas=2,
               gpus=8, priority=-5, preemptible=True, allowedGPUTypes=["A100"])
        )  # fmt: skip
        cluster.wait_phase("long-low", {"Running"}, 60)
        time.sleep(3)  # past the minimum change interval, with some progress and checkpoints
        cluster.submit(
            tj("short-high", model="resnet18", iterations=6000, replicas=2, gpus=8, priority=5,
               allowedGPUTypes=["A100"])
        )  # fmt: skip
        st = cluster.wait_phase("long-low", {"Preempted"}, 60)
        assert st["preemptions"] == 1
        assert "preempted" in cluster.condition("long-low", "Preempted")["message"]
        cluster.wait_phase("short-high", {"Succeeded"}, 90)
        st = cluster.wait_phase("long-low", {"Succeeded", "Failed"}, 180)
    assert st["phase"] == "Succeeded", st
    assert st["restarts"] >= 1 and st["gangGeneration"] >= 2
    assert st["progress"] == 40000
    assert "Preempted" in [r for r, _ in cluster.events("long-low")]
    assert w.violations == []


def test_unschedulable_and_invalid_jobs_stay_pending_while_others_run(cluster: Cluster, stack: Any) -> None:
    ops = stack("fifo", PERFSCHED_OPERATOR_POLICY_CONFIG='{"backfill": true}')
    cluster.submit(tj("huge", replicas=5, gpus=8))  # 40 GPUs, the cluster has 32
    empty = tj("empty")
    empty["spec"]["template"] = {"spec": {"containers": []}}
    cluster.submit(empty)
    cluster.submit(tj("mystery", model="no-such-net"))
    cluster.submit(tj("nowhere", allowedGPUTypes=["H100"]))
    # Llama 3 70B with DDP keeps 16 B x 70.6e9 = 1 TiB of model states on every GPU: no node fits it
    cluster.submit(
        tj("too-big", model="llama3-70b", dataset="", batch=8, gpus=8, precision="bf16", sequenceLength=2048,
           sharding="ddp", microBatchSize=1)
    )  # fmt: skip
    cluster.submit(tj("fine", iterations=3000))
    cluster.wait_phase("fine", {"Succeeded"}, 90)
    expected = {
        "huge": ("Unschedulable", "asks 40 GPUs"),
        "empty": ("InvalidSpec", "spec.template.spec.containers is empty"),
        "mystery": ("InvalidSpec", "unknown model 'no-such-net'"),
        "nowhere": ("Unschedulable", "no node has any of the GPU types in spec.allowedGPUTypes ['H100']"),
        "too-big": ("Unschedulable", "does not fit in GPU memory on any allowed GPU type: needs ~"),
    }
    for name, (reason, text) in expected.items():
        assert cluster.phase(name) == "Pending", name
        c = cluster.condition(name, "Admitted")
        assert (c["status"], c["reason"]) == ("False", reason), (name, c)
        assert text in c["message"], (name, c)
        assert cluster.pods(name) == []
    assert ops[0].running


def test_killing_the_leader_mid_run_loses_nothing_and_duplicates_nothing(
    kube_cluster: KubeCluster, cluster: Cluster, stack: Any
) -> None:
    ops = stack(
        "fifo",
        replicas=2,
        PERFSCHED_OPERATOR_POLICY_CONFIG='{"backfill": true}',
        PERFSCHED_OPERATOR_LEARNING_STATE_INTERVAL_SECONDS="1",
    )
    coord = __import__("kubernetes").client.CoordinationV1Api(kube_cluster.api)
    core = __import__("kubernetes").client.CoreV1Api(kube_cluster.api)

    def learnt() -> dict[str, Any] | None:
        """The corrector's part of the learning state the leader keeps in its ConfigMap (None: none)."""
        try:
            cm = core.read_namespaced_config_map("perfsched-operator-learning-state", cluster.ns)
        except ApiException:
            return None
        got = learning_state.decode(base64.b64decode((cm.binary_data or {})[learning_state.KEY]))
        assert not isinstance(got, str), got
        return dict(got.oracle["corrector"])

    def holder() -> str:
        try:
            lease = coord.read_namespaced_lease("perfsched-operator", cluster.ns)
        except ApiException:
            return ""
        return str(lease.spec.holder_identity or "")

    first = wait_until(holder, 30, "a leader")
    names = [f"kill-{i}" for i in range(8)]
    with Watcher(cluster.kube) as w:
        for i, n in enumerate(names):
            model, dataset, batch, iters = MODELS[i % 4]
            body = tj(
                n, model=model, dataset=dataset, batch=batch, iterations=iters * 4, replicas=1 + i % 2, gpus=2
            )
            cluster.submit(body)
        wait_until(lambda: sum(cluster.phase(n) == "Running" for n in names) >= 3, 60, "3 running jobs")
        # the leader keeps what it learnt from the running jobs' reports in its ConfigMap
        wait_until(lambda: (c := learnt()) is not None and len(c["jobs"]) >= 1, 30, "a stored learning state")
        running_at_kill = {n for n in names if cluster.phase(n) == "Running"}
        gens_at_kill = {n: cluster.status(n)["gangGeneration"] for n in running_at_kill}
        leader = next(op for op in ops if op.name == first)
        leader.kill()
        second = wait_until(lambda: (h := holder()) and h != first and h, 30, "the standby to take over")
        new_leader = next(op for op in ops if op.name == second)
        wait_until(
            lambda: "learning state restored" in new_leader.log(400), 30, "the new leader to restore it"
        )
        cluster.submit(tj("after-kill", iterations=3000))
        leader.restart()  # it comes back as a standby
        wait_until(
            lambda: all(cluster.phase(n) == "Succeeded" for n in [*names, "after-kill"]),
            240,
            "every job to succeed after the failover",
            interval=1.0,
        )
    assert holder() == second
    # the new leader went on from the restored state and stored it again: every job ended, so no live
    # record is left, and what the jobs taught is in the shared levels
    wait_until(
        lambda: (c := learnt()) is not None and not c["jobs"] and c["retired"], 30, "the jobs' ends stored"
    )
    for n in running_at_kill:
        st = cluster.status(n)
        # jobs running at the kill were neither restarted nor duplicated by the new leader
        assert st["gangGeneration"] == gens_at_kill[n] and st.get("restarts", 0) == 0, (n, st)
    assert w.samples > 10 and w.violations == []
