"""Invariants of the operator under random event sequences (hypothesis), against the fake API server.

Whatever happens between rounds (pods bound and run, progress reported, workers crashing, pods deleted,
terminations finishing, time passing, operator restarts), after every round:

- a job never has live pods of two generations, nor a replica index twice;
- a job never has more live pods than ``replicas.max``;
- the GPUs of live pods planned or bound to a node never exceed the node's GPUs;
- a Succeeded job's progress equals its declared work, and no job's progress exceeds it;
- phases are always one of the documented ones;
- the round never wedges: the policy's answer is always accepted.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.core.round import RoundCosts
from scheduler.k8s import crd
from scheduler.names import ANNOTATION_PLANNED_NODE, LABEL_GENERATION, LABEL_JOB_NAME, LABEL_REPLICA_INDEX
from scheduler.policies import make_policy
from tests.operator.conftest import gpu_node, make_harness, trainingjob

EVENTS = st.sampled_from(
    ["bind_run", "progress", "crash", "delete_pod", "finish", "tick", "restart_operator"]
)


def check_invariants(h) -> None:  # type: ignore[no-untyped-def]
    capacity = {n: int(o["status"]["allocatable"]["nvidia.com/gpu"]) for n, o in h.api.nodes.items()}
    used: Counter[str] = Counter()
    gens: dict[str, set[str]] = defaultdict(set)
    replicas: Counter[tuple[str, str, str]] = Counter()
    for (ns, _), p in h.api.pods.items():
        if p["status"].get("phase") in ("Succeeded", "Failed") or "deletionTimestamp" in p["metadata"]:
            if p["spec"].get("nodeName") and p["status"].get("phase") not in ("Succeeded", "Failed"):
                used[p["spec"]["nodeName"]] += int(
                    p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
                )
            continue
        labels = p["metadata"]["labels"]
        key = f"{ns}/{labels[LABEL_JOB_NAME]}"
        gens[key].add(labels[LABEL_GENERATION])
        replicas[(key, labels[LABEL_GENERATION], labels[LABEL_REPLICA_INDEX])] += 1
        node = p["spec"].get("nodeName") or p["metadata"]["annotations"][ANNOTATION_PLANNED_NODE]
        used[node] += int(p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
    for key, g in gens.items():
        assert len(g) == 1, (key, g)
    assert all(n == 1 for n in replicas.values()), replicas
    for node, gpus in used.items():
        assert gpus <= capacity[node], (node, gpus, capacity[node])
    for (ns, name), obj in h.api.trainingjobs.items():
        live = sum(1 for k in replicas if k[0] == f"{ns}/{name}")
        assert live <= obj["spec"]["replicas"]["max"]
        status = obj.get("status") or {}
        assert status.get("phase", "Pending") in crd.PHASES
        total = float(status.get("totalWork", 0) or 0)
        if total:
            assert status.get("progress", 0) <= total
        if status.get("phase") == "Succeeded":
            assert status["progress"] == total


def misbind(h, pick: int) -> None:  # type: ignore[no-untyped-def]
    """Play a kube-scheduler that ignores the plan: bind an unbound pod to another node where it fits."""
    capacity = {n: int(o["status"]["allocatable"]["nvidia.com/gpu"]) for n, o in h.api.nodes.items()}
    used: Counter[str] = Counter()
    for p in h.api.pods.values():
        if p["spec"].get("nodeName") and p["status"].get("phase") not in ("Succeeded", "Failed"):
            used[p["spec"]["nodeName"]] += int(
                p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
            )
    for (ns, name), p in sorted(h.api.pods.items()):
        if p["spec"].get("nodeName") or "deletionTimestamp" in p["metadata"]:
            continue
        gpus = int(p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
        planned = p["metadata"]["annotations"].get(ANNOTATION_PLANNED_NODE)
        nodes = sorted(n for n in capacity if capacity[n] - used[n] >= gpus and n != planned)
        if nodes:
            h.api.bind(ns, name, nodes[pick % len(nodes)])
            return


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    policy=st.sampled_from(["fifo", "las", "srsf", "elastic"]),
    jobs=st.lists(
        st.tuples(st.integers(1, 3), st.sampled_from([1, 2, 4]), st.booleans(), st.booleans()),
        min_size=1,
        max_size=5,
    ),
    events=st.lists(st.tuples(EVENTS, st.integers(0, 10)), min_size=1, max_size=25),
)
def test_random_histories_keep_the_invariants(
    policy: str, jobs: list[tuple[int, int, bool, bool]], events: list[tuple[str, int]]
) -> None:
    play(policy, jobs, events)


def play(policy: str, jobs: list[tuple[int, int, bool, bool]], events: list[tuple[str, int]]):  # type: ignore[no-untyped-def]
    """Run a history (jobs: (replicas max, GPUs per replica, elastic, preemptible)) on nodes a1 (8 A100),
    a2 (8 A100) and v1 (4 V100), checking the invariants after every round; returns the harness."""
    h = make_harness(make_policy(policy), costs=RoundCosts(min_resize_interval_s=5), backoff_limit=1)
    h.api.add_node(gpu_node("a1", 8, "A100"))
    h.api.add_node(gpu_node("a2", 8, "A100"))
    h.api.add_node(gpu_node("v1", 4, "V100"))
    for i, (reps, gpus, elastic, preemptible) in enumerate(jobs):
        spec = {"replicas": {"min": 1, "max": reps, "gpusPerReplica": gpus}, "elastic": elastic}
        h.api.add_trainingjob(trainingjob(f"j{i}", preemptible=preemptible, **spec))
    op = h.operator()
    op.run_round()
    check_invariants(h)
    for event, pick in events:
        # kube-scheduler and kubelet are quick: new pods are bound and running before most events
        if event not in ("bind_run", "misbind") or pick % 2:
            h.settle_pods()
        pods = sorted(h.api.pods)
        if event == "bind_run":
            pass
        elif event == "misbind":
            misbind(h, pick)
        elif event == "progress" and pods:
            ns, name = pods[pick % len(pods)]
            p = h.api.pods[(ns, name)]
            if p["metadata"]["labels"][LABEL_REPLICA_INDEX] == "0" and p["status"]["phase"] == "Running":
                prev = crd.parse_status(h.api.trainingjobs[(ns, p["metadata"]["labels"][LABEL_JOB_NAME])])
                done = min(1000.0, prev.progress + 150.0 * (1 + pick))
                h.api.report_progress(ns, name, progress=done, checkpoint=done - 50 if done < 1000 else done,
                                      throughput=10.0, time=h.clock.now())  # fmt: skip
        elif event == "crash" and pods:
            ns, name = pods[pick % len(pods)]
            if h.api.pods[(ns, name)]["status"]["phase"] == "Running":
                h.api.set_pod_phase(ns, name, "Failed")
        elif event == "delete_pod" and pods:
            h.api.delete_pod(*pods[pick % len(pods)], 0)
        elif event == "finish":
            h.api.finish_deletions()
        elif event == "tick":
            h.clock.advance(1 + pick)
        elif event == "restart_operator":
            op = h.operator()
        rep = op.run_round()
        assert not [e for e in rep.errors if e.startswith("policy")], rep.errors
        check_invariants(h)
    return h


def test_a_start_on_gpus_of_a_gang_preempted_in_the_same_round_waits_for_its_pods_to_exit() -> None:
    # The history hypothesis shrank (seed 28), srsf; nodes a1 and a2 (8 A100 each), v1 (4 V100):
    #   j0 2x1 GPU -> a1, j1 1x4 -> a1, j2 1x1 -> v1, j3 1x4 -> a2 (all non-preemptible); j4 2x4
    #   (preemptible) waits: 8 A100 needed, 16 - 2 - 4 - 4 = 6 free.
    #   progress: j1 reports 450/1000. crash: j1's pod fails (backoff limit 1: requeued); j4 starts on
    #   a1 4 + a2 4 (a1: 2 + 4 = 6 of 8, a2: 4 + 4 = 8 of 8).
    #   bind_run (j4 bound and running): j1, less remaining service, preempts j4 and is planned on a2.
    # a2 then holds j3's 4 GPUs and j4's 4 (exiting for its 20 s grace period): j1's pod would make
    # 4 + 4 + 4 = 12 of 8. Its START is written, its pod waits until j4's pods are gone.
    events = [("progress", 2), ("crash", 2), ("bind_run", 1)]
    jobs = [(2, 1, False, False), (1, 4, False, False), (1, 1, False, False), (1, 4, False, False)]
    h = play("srsf", [*jobs, (2, 4, False, True)], events)
    assert h.api.status_of("ml", "j4")["phase"] == "Preempted"
    st = h.api.status_of("ml", "j1")
    assert st["phase"] == "Admitted" and st["allocation"]["replicasPerNode"] == {"a2": 1}
    assert (
        "pods that are exiting (4 on a2)"
        in next(c for c in st["conditions"] if c["type"] == "Running")["message"]
    )
    assert [
        p["metadata"]["name"] for p in h.api.job_pods("ml", "j1") if p["status"]["phase"] != "Failed"
    ] == []
    # while j4's pods exit, rounds keep j1 waiting (and nothing else takes a2); once gone, j1's pod starts
    h = play("srsf", [*jobs, (2, 4, False, True)], [*events, ("tick", 4), ("finish", 0), ("bind_run", 1)])
    pods = [p for p in h.api.job_pods("ml", "j1") if p["status"]["phase"] == "Running"]
    assert [(p["metadata"]["name"], p["spec"]["nodeName"]) for p in pods] == [("j1-g2-0", "a2")]
    assert h.api.status_of("ml", "j1")["phase"] == "Running"
