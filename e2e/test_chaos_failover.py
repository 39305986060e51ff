"""Chaos on the real control plane (KWOK nodes): the operator leader is killed at random steps of resizes,
preemptions and migrations, at least 20 times, then one GPU node is deleted and another goes NotReady,
while a stream of TrainingJobs trains.

Two operator replicas run ``e2e.crash_operator`` (the real operator that SIGKILLs itself right after
the armed step of a change: the intent written to the status, its Event, the n-th pod deletion, the n-th
pod of the restarted gang). The test arms each process with a step drawn from a seeded generator
(``PERFSCHED_E2E_CHAOS_SEED``; 0 under CI, else a fresh seed that the test prints), restarts whichever
died as the new standby, and keeps the changes coming: a user scales an elastic job, moves a job to the
other GPU type (``allowedGPUTypes``), submits an urgent job; the ``las`` policy time-slices the rest. A
sampler thread lists pods, jobs and the Lease without pause (about once a second on two cores) and checks
that

- no pod is seen outside its TrainingJob's status (another generation, a replica beyond the allocation,
  any pod of a job whose status holds no gang) longer than one round after the leader that cleans it up
  took the Lease (plus a margin for that leader's first round and the sampling);
- no node has more GPUs bound than it has, no replica exists twice, no TrainingJob disappears, none
  goes back behind its last checkpoint;

after the kills, with the kill points disarmed, every gang on the deleted node and on the NotReady node
is whole again elsewhere (or gave all its GPUs up to wait) within the failure grace plus two rounds, and
at the end every job has Succeeded with all its work, and no resize or preemption was announced twice
across the failovers. Sized for CI's two cores: about two minutes plus the control plane's
start.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kubernetes.client import CoordinationV1Api
from kubernetes.client.rest import ApiException

from e2e import test_operator as base
from e2e.crash_operator import STEPS
from e2e.harness import Component, KubeCluster, gpu_capacity, wait_until
from e2e.test_operator import Cluster, operator_env, tj
from e2e.test_reliability import _recreate

# the fixtures of e2e/test_operator.py, under their names
cluster = base.cluster

KILLS = 20
ROUND_S = 1.0  # PERFSCHED_OPERATOR_ROUND_PERIOD_SECONDS in operator_env
#: margin: the new leader's first round on a loaded two-core machine (listing everything, predicting
#: every job) and a Lease hand-over seen up to a sample late (each sample lists pods, jobs and the Lease)
MARGIN_S = 2.0
GRACE_S = 3  # PERFSCHED_OPERATOR_NODE_FAILURE_GRACE_SECONDS
KILL_PHASE_S = 200.0
UNFINISHED = 12  # jobs kept in the system while the kills go on
TYPES = ("A100", "V100")
#: (model, dataset, batch, iterations): about 20 s of one A100 each at the emulator's 300x time scale
MODELS = [
    ("resnet18", "cifar10", 128, 100_000),
    ("resnet50", "imagenet", 256, 8_000),
    ("bert", "squad", 32, 20_000),
    ("lstm", "wikitext-2", 64, 280_000),
]


def chaos_seed() -> int:
    given = os.environ.get("PERFSCHED_E2E_CHAOS_SEED")
    if given:
        return int(given)
    return 0 if os.environ.get("CI") else random.SystemRandom().randrange(1 << 30)


def job_body(i: int, rng: random.Random, urgent: bool = False) -> dict[str, Any]:
    model, dataset, batch, iterations = MODELS[i % len(MODELS)]
    extra: dict[str, Any] = {"allowedGPUTypes": list(TYPES), "checkpointGraceSeconds": 3}
    if urgent:
        return tj(f"urgent-{i:02d}", model=model, dataset=dataset, batch=batch, iterations=iterations // 4,
                  replicas=2, gpus=4, priority=10, **extra)  # fmt: skip
    if i % 3 == 0:  # elastic, 1-4 x 1 GPU
        body = tj(f"job-{i:02d}", model=model, dataset=dataset, batch=batch, iterations=iterations,
                  elastic=True, **extra)  # fmt: skip
        body["spec"]["replicas"] = {"min": 1, "max": 4, "gpusPerReplica": 1}
        return body
    replicas, gpus = rng.choice([(1, 1), (1, 2), (2, 1), (2, 2)])
    return tj(f"job-{i:02d}", model=model, dataset=dataset, batch=batch, iterations=iterations,
              replicas=replicas, gpus=gpus, **extra)  # fmt: skip


class Sampler:
    """Samples the test namespace's pods, TrainingJobs and Lease every 0.3 s (see the module docstring)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.coord = CoordinationV1Api(cluster.kube.api)
        self.capacity = gpu_capacity(cluster.kube.api)
        self.violations: list[str] = []
        self.samples = 0
        #: job -> when its pods outside the status were first and last seen (open episodes)
        self.orphaned: dict[str, tuple[float, float]] = {}
        #: (job, first seen, last seen) of closed episodes
        self.episodes: list[tuple[str, float, float]] = []
        #: (time seen, new holder) of every Lease hand-over
        self.leaders: list[tuple[float, str]] = []
        self.known: set[str] = set()
        self.max_checkpoint: dict[str, float] = defaultdict(float)
        self.status: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()
        self.began = time.time()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def violation(self, text: str) -> None:
        if text not in self.violations:
            self.violations.append(text)

    def holder(self) -> str:
        try:
            lease = self.coord.read_namespaced_lease(
                "perfsched-operator", self.cluster.ns, _request_timeout=5
            )
        except ApiException:
            return ""
        return str(lease.spec.holder_identity or "")

    def sample(self) -> None:
        now = time.time()  # wall clock: the kill and leader logs of e2e.crash_operator use it
        holder = self.holder()
        if holder and (not self.leaders or self.leaders[-1][1] != holder):
            self.leaders.append((now, holder))
        pods = self.cluster.core.list_pod_for_all_namespaces(_request_timeout=5).items
        tjs = {
            t["metadata"]["name"]: t.get("status") or {}
            for t in self.cluster.custom.list_namespaced_custom_object(
                "perfsched.dev", "v1alpha1", self.cluster.ns, "trainingjobs", _request_timeout=5
            )["items"]
        }
        used: dict[str, int] = defaultdict(int)
        live: dict[str, list[tuple[str, int]]] = defaultdict(list)
        replicas: dict[tuple[str, str, int], int] = defaultdict(int)
        for p in pods:
            if p.status.phase in ("Succeeded", "Failed"):
                continue
            if p.spec.node_name:
                used[p.spec.node_name] += base.Watcher._gpus(p)
            labels = p.metadata.labels or {}
            job = labels.get("perfsched.dev/job-name")
            if (
                p.metadata.namespace != self.cluster.ns
                or not job
                or p.metadata.deletion_timestamp is not None
            ):
                continue
            gen, index = (
                labels.get("perfsched.dev/generation", ""),
                int(labels["perfsched.dev/replica-index"]),
            )
            live[job].append((gen, index))
            replicas[(job, gen, index)] += 1
        for node, gpus in used.items():
            if gpus > self.capacity.get(node, 0):
                self.violation(f"node {node}: {gpus} GPUs bound, capacity {self.capacity.get(node)}")
        for key, n in replicas.items():
            if n > 1:
                self.violation(f"replica {key} exists {n} times")
        with self.lock:
            for name in self.known - set(tjs):
                self.violation(f"TrainingJob {name} disappeared")
            for name, st in tjs.items():
                progress = float(st.get("progress") or 0.0)
                if progress < self.max_checkpoint[name] - 1e-6:
                    self.violation(f"{name} went back to {progress}, behind its checkpoint")
                self.max_checkpoint[name] = max(
                    self.max_checkpoint[name], float(st.get("checkpointProgress") or 0)
                )
                alloc = st.get("allocation")
                if st.get("phase") in ("Succeeded", "Failed"):
                    outside = []  # a finished gang's pods exit on their own
                elif alloc:
                    gen = str(st.get("gangGeneration", 0))
                    outside = [
                        (g, i) for g, i in live[name] if g != gen or i >= int(alloc.get("replicas", 0))
                    ]
                else:
                    outside = live[name]
                if outside:
                    self.orphaned[name] = (self.orphaned.get(name, (now, now))[0], now)
                elif name in self.orphaned:
                    self.episodes.append((name, *self.orphaned.pop(name)))
            self.status = tjs
        self.samples += 1

    def late_orphans(self, kills: Sequence[float], takeovers: Sequence[float]) -> tuple[float, list[str]]:
        """The longest time pods were still seen outside a status (the last sample that saw them) after the
        leader in charge of them started, and the episodes longer than one round plus the margin. A leader
        killed during an episode (or just before it: the kill follows the write that began it) leaves the
        pods to the next one, so the leader in charge is the first to take over after the last such kill
        (``kills`` and ``takeovers`` are wall-clock times from ``e2e.crash_operator``); without a kill, it
        is the one that led all along and the time counts from the episode's start."""
        worst, late = 0.0, []
        now = time.time()
        closed = self.episodes + [(j, t0, now) for j, (t0, _) in self.orphaned.items()]
        for job, t0, t1 in closed:
            killed = [k for k in kills if t0 - MARGIN_S <= k <= t1]
            after = [t for t in takeovers if killed and t >= killed[-1]]
            start = max(t0, after[0] if after else (t1 if killed else t0))
            worst = max(worst, t1 - start)
            if t1 - start > ROUND_S + MARGIN_S:
                late.append(
                    f"{job}: pods outside its status from {t0 - self.began:.1f} s to "
                    f"{t1 - self.began:.1f} s, the leader in charge started at {start - self.began:.1f} s"
                )
        return worst, late

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
            except Exception as exc:  # an API hiccup under load: the next sample sees the same state
                if "Timeout" not in type(exc).__name__:
                    self.violation(f"sampling failed: {exc!r}")
            self._stop.wait(0.3)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def _jsonl(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def _running_jobs(cluster: Cluster) -> dict[str, dict[str, Any]]:
    items = cluster.custom.list_namespaced_custom_object(
        "perfsched.dev", "v1alpha1", cluster.ns, "trainingjobs"
    )
    return {
        t["metadata"]["name"]: t["spec"]
        for t in items["items"]
        if (t.get("status") or {}).get("phase") == "Running"
    }


def _gang_whole_off(cluster: Cluster, job: str, failed: str) -> bool:
    """The job's gang is whole on healthy nodes, or it holds no pod (it waits for GPUs): never partial."""
    st = cluster.status(job)
    pods = [
        p
        for p in cluster.pods(job)
        if p.metadata.deletion_timestamp is None and p.status.phase not in ("Succeeded", "Failed")
    ]
    if any(p.spec.node_name == failed for p in pods):
        return False
    if st.get("phase") in ("Succeeded", "Failed"):
        return True
    if not pods:
        return st.get("phase") != "Running"
    alloc = st.get("allocation") or {}
    gen = str(st.get("gangGeneration"))
    current = [p for p in pods if p.metadata.labels.get("perfsched.dev/generation") == gen]
    return st.get("phase") == "Running" and len(current) == alloc.get("replicas") == len(pods)


def _not_ready(cluster: Cluster, node: str) -> None:
    core = cluster.core
    core.patch_node(node, {"metadata": {"annotations": {"perfsched.dev/kwok-not-ready": "true"}}})
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    core.patch_node_status(
        node,
        {"status": {"conditions": [
            {"type": "Ready", "status": "False", "reason": "KubeletNotReady", "message": "e2e",
             "lastTransitionTime": now, "lastHeartbeatTime": now},
        ]}},
    )  # fmt: skip


def _ready(cluster: Cluster, node: str) -> None:
    core = cluster.core
    core.patch_node(node, {"metadata": {"annotations": {"perfsched.dev/kwok-not-ready": None}}})
    core.patch_node_status(
        node, {"status": {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "e2e"}]}}
    )
    wait_until(
        lambda: any(c.type == "Ready" and c.status == "True" for c in core.read_node(node).status.conditions),
        30,
        f"{node} Ready again",
    )


def test_operator_killed_at_random_steps_and_failed_nodes_lose_nothing(
    kube_cluster: KubeCluster,
    cluster: Cluster,
    start_component: Callable[..., Component],
    start_perfsched_extender: Callable[..., Component],
    tmp_path: Path,
) -> None:
    seed = chaos_seed()
    print(f"chaos seed {seed} (PERFSCHED_E2E_CHAOS_SEED={seed} replays the kill points)")
    rng = random.Random(seed)
    crash_log, leader_log = tmp_path / "crashes.jsonl", tmp_path / "leaders.jsonl"
    start_perfsched_extender()
    start_component(
        ["perfsched", "emulate", "--time-scale", str(base.TIME_SCALE), "--checkpoint-interval", "100",
         "--report-interval", "0.5", "--namespace", cluster.ns],
        name="emulator",
        env={"PERFSCHED_EMULATOR_TICK_SECONDS": "0.25"},
    )  # fmt: skip
    arms = [tmp_path / f"arm-{i}.json" for i in range(2)]

    def arm(i: int) -> None:
        step = rng.choice(STEPS)
        # the first or the second pod deletion / creation of a gang: a gang left half-stopped or half-started
        n = rng.randint(1, 2) if step in ("delete", "create") else 1
        arms[i].write_text(json.dumps({"step": step, "n": n}))

    def operator(i: int) -> Component:
        arm(i)
        env = operator_env(
            cluster.ns,
            "las",
            PERFSCHED_OPERATOR_IDENTITY=f"operator-{i}",
            PERFSCHED_OPERATOR_NODE_FAILURE_GRACE_SECONDS=str(GRACE_S),
            # a short Lease, so that 20 hand-overs fit CI's time budget
            PERFSCHED_OPERATOR_LEASE_DURATION_SECONDS="3",
            PERFSCHED_OPERATOR_RENEW_DEADLINE_SECONDS="2",
            PERFSCHED_OPERATOR_RETRY_PERIOD_SECONDS="0.3",
            PERFSCHED_E2E_CRASH_FILE=str(arms[i]),
            PERFSCHED_E2E_CRASH_LOG=str(crash_log),
            PERFSCHED_E2E_LEADER_LOG=str(leader_log),
        )
        return start_component([sys.executable, "-m", "e2e.crash_operator"], name=f"operator-{i}", env=env)

    ops = [operator(0), operator(1)]
    submitted: list[str] = []
    counter = {"i": 0, "urgent": 0}

    def submit(urgent: bool = False) -> None:
        if urgent:
            counter["urgent"] += 1
            body = job_body(counter["urgent"], rng, urgent=True)
        else:
            body = job_body(counter["i"], rng)
            counter["i"] += 1
        cluster.submit(body)
        submitted.append(body["metadata"]["name"])

    def user_change() -> str:
        """A user's change that makes the policy resize, move or preempt."""
        running = _running_jobs(cluster)
        urgent = sum(1 for n in running if n.startswith("urgent"))
        what = rng.choice(["scale", "scale", "move", "move"] + (["urgent"] if urgent < 2 else []))
        elastic = sorted(n for n, s in running.items() if s.get("elastic"))
        if what == "scale" and elastic:
            name = rng.choice(elastic)
            now_max = running[name]["replicas"]["max"]
            new_max = rng.choice([m for m in (1, 2, 3, 4) if m != now_max])
            patch: dict[str, Any] = {"spec": {"replicas": {"max": new_max}}}
        elif what == "move" and running:
            name = rng.choice(sorted(running))
            at = cluster.status(name).get("allocation", {}).get("gpuType", "A100")
            patch = {"spec": {"allowedGPUTypes": [t for t in TYPES if t != at]}}
        elif what == "urgent":
            submit(urgent=True)
            return "urgent"
        else:
            return "none"  # nothing to scale or move right now
        cluster.custom.patch_namespaced_custom_object(
            "perfsched.dev", "v1alpha1", cluster.ns, "trainingjobs", name, patch
        )
        return what

    for _ in range(UNFINISHED):
        submit()
    t_start = time.monotonic()
    changes: dict[str, int] = defaultdict(int)
    with Sampler(cluster) as sampler:
        sampler.known = set()
        wait_until(lambda: len(sampler.leaders) > 0, 40, "a leader")
        # --- 1. kill the leader at random steps of changes ------------------------------------------------
        last_change = time.monotonic()
        while len(_jsonl(crash_log)) < KILLS and time.monotonic() - t_start < KILL_PHASE_S:
            for i, op in enumerate(ops):
                if not op.running:
                    op._reap()
                    ops[i] = operator(i)  # back as the standby, armed again
            with sampler.lock:
                sampler.known |= set(submitted)
                unfinished = sum(
                    1
                    for n in submitted
                    if (sampler.status.get(n) or {}).get("phase") not in ("Succeeded", "Failed")
                )
            for _ in range(UNFINISHED - unfinished):
                submit()
            if time.monotonic() - last_change > 1.0:
                changes[user_change()] += 1
                last_change = time.monotonic()
            time.sleep(0.5)
        crashes = _jsonl(crash_log)
        kill_s = time.monotonic() - t_start
        for a in arms:
            a.unlink(missing_ok=True)
        for i, op in enumerate(ops):
            if not op.running:
                op._reap()
                ops[i] = operator(i)
                arms[i].unlink()
        print(f"kills: {len(crashes)} in {kill_s:.0f} s; user changes {dict(changes)}")
        by: defaultdict[tuple[str, str], int] = defaultdict(int)
        for c in crashes:
            by[(c["kind"], c["step"])] += 1
        print("kills by (change, step):", dict(sorted(by.items())))
        gaps = [b["time"] - a["time"] for a, b in itertools.pairwise(crashes)]
        print(f"time between kills: median {sorted(gaps)[len(gaps) // 2]:.1f} s" if gaps else "")
        assert len(crashes) >= KILLS, (len(crashes), by)

        # --- 2. a node is deleted, another goes NotReady ---------------------------------------------------
        def busiest() -> list[tuple[str, set[str]]]:
            """The two nodes running the most gangs, with those gangs (one listing), or [] if not two."""
            gangs: dict[str, set[str]] = defaultdict(set)
            for p in cluster.pods():
                if p.spec.node_name and p.metadata.deletion_timestamp is None and p.status.phase == "Running":
                    gangs[p.spec.node_name].add(p.metadata.labels["perfsched.dev/job-name"])
            top = sorted(gangs.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:2]
            return top if len(top) == 2 else []

        (deleted, hit_deleted), (notready, hit_notready) = wait_until(busiest, 30, "two nodes running gangs")
        cluster.core.delete_node(deleted)
        t_del = time.monotonic()
        _not_ready(cluster, notready)
        t_nr = time.monotonic()
        recovered: dict[str, float] = {}

        def all_whole() -> bool:
            for job in (hit_deleted | hit_notready) - set(recovered):
                node, t0 = (deleted, t_del) if job in hit_deleted else (notready, t_nr)
                if _gang_whole_off(cluster, job, node):
                    recovered[job] = time.monotonic() - t0
            return recovered.keys() >= hit_deleted | hit_notready

        try:
            wait_until(
                all_whole, GRACE_S + 2 * ROUND_S + 30, "every gang on the failed nodes whole or waiting"
            )
        finally:
            _recreate(cluster.kube, deleted)
            _ready(cluster, notready)
        print(
            f"node {deleted} deleted ({len(hit_deleted)} gangs), {notready} NotReady "
            f"({len(hit_notready)} gangs, grace {GRACE_S} s): whole elsewhere or waiting after "
            f"{max(recovered.values(), default=0.0):.1f} s at most"
        )
        for job, s in recovered.items():
            grace = 0 if job in hit_deleted else GRACE_S
            # a round to see it (after the grace period), a round to restart, binding and the margin
            assert s <= grace + 2 * ROUND_S + MARGIN_S + 5, (job, s)

        # --- 3. everything finishes ----------------------------------------------------------------------
        with sampler.lock:
            sampler.known |= set(submitted)
        wait_until(
            lambda: all(cluster.phase(n) == "Succeeded" for n in submitted),
            150,
            "every job to succeed",
            interval=1.0,
        )
        sampler.sample()
    total_s = time.monotonic() - t_start
    leaders = sorted((float(t["time"]), int(t["pid"])) for t in _jsonl(leader_log))
    takeovers = [t for t, _ in leaders]
    kills = sorted((float(c["time"]), int(c["pid"])) for c in crashes)
    worst, late = sampler.late_orphans([t for t, _ in kills], takeovers)
    # a leader whose round outlasted its Lease may reach an armed step after another process took over:
    # that kill hands nothing over; count such kills, and require a leader to start after every kill
    deposed = [k for k, pid in kills if next((p for t, p in reversed(leaders) if t <= k), None) != pid]
    print(
        f"{len(submitted)} jobs, {len(crashes)} kills ({len(deposed)} of a process that had lost the "
        f"Lease), {len(takeovers)} leaders, {sampler.samples} samples, {len(sampler.episodes)} moments with "
        f"pods outside a status, the longest seen {worst:.1f} s after the leader in charge started; "
        f"{total_s:.0f} s"
    )
    assert late == [], (late, [f"{t - sampler.began:.1f}" for t in takeovers])
    assert sampler.violations == [], sampler.violations
    assert all(any(t > k for t in takeovers) for k, _ in kills), (kills, leaders)  # a leader after each kill
    for name in submitted:
        st = sampler.status[name]
        assert st.get("phase") == "Succeeded" and st.get("progress") == st.get("totalWork"), (name, st)
    # no decision announced twice across the failovers (a re-sent Event finds its predecessor's name taken)
    fewer = []
    for name in submitted:
        st = sampler.status[name]
        sent = [m for r, m in cluster.events(name) if r in ("Resized", "Preempted")]
        decisions = st.get("resizes", 0) + st.get("preemptions", 0)
        assert len(sent) <= decisions, (name, sent, st)
        if len(sent) < decisions:
            fewer.append(f"{name}: {decisions} resizes + preemptions, {len(sent)} Events")
    print("jobs with fewer Events than decisions:", fewer or "none")
    for op in ops:
        assert "Traceback" not in op.log(400), op.log(400)
