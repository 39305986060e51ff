"""Gangs that cannot start and GPU nodes that fail, on the real control plane (KWOK nodes).

- a job whose pods mount a claim that does not exist: the operator says why in the pods' words, stops
  the gang once ``spec.startTimeoutSeconds`` passed (its pods gone, its GPUs free) and requeues it with
  backoff; once the spec is fixed, the next attempt runs to Succeeded;
- a running gang whose KWOK node is deleted, then (running elsewhere) whose node goes NotReady: each time
  it is restarted from its checkpoint on healthy GPUs within the grace period plus two rounds, never
  partially; the watcher sees no over-committed node, no two live gangs of one job, no doubled replica;
- one of the two A100 nodes plays a slow node (the emulator's ``perfsched.dev/emulated-speed`` label):
  the operator flags it with a ``SlowNode`` Event and leaves its peer alone, and moves a gang off it
  once the peer has room.

Uses the helpers and the component stack of ``e2e/test_operator.py`` (extender, emulator, operator).
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from kubernetes.client import CoordinationV1Api
from kubernetes.client.rest import ApiException

from e2e import test_operator as base
from e2e.harness import KubeCluster, wait_until
from e2e.test_operator import Cluster, Watcher, tj

# the fixtures of e2e/test_operator.py, under their names
cluster = base.cluster
stack = base.stack

PVC = 'persistentvolumeclaim "perfsched-checkpoints" not found'
ROUND_S = 1.0  # PERFSCHED_OPERATOR_ROUND_PERIOD_SECONDS in operator_env


def with_claim(body: dict[str, Any]) -> dict[str, Any]:
    """The shipped examples' checkpoint volume: a claim the test namespace does not have."""
    spec = body["spec"]["template"]["spec"]
    spec["volumes"] = [{"name": "ckpt", "persistentVolumeClaim": {"claimName": "perfsched-checkpoints"}}]
    spec["containers"][0]["volumeMounts"] = [{"name": "ckpt", "mountPath": "/ckpt"}]
    return body


def test_a_gang_that_cannot_start_releases_its_gpus_and_runs_once_fixed(cluster: Cluster, stack: Any) -> None:
    stack("fifo", PERFSCHED_OPERATOR_REQUEUE_BACKOFF_SECONDS="4")
    timeout = 8
    with Watcher(cluster.kube) as w:
        cluster.submit(
            with_claim(tj("stuck", replicas=2, gpus=4, startTimeoutSeconds=timeout, backoffLimit=5))
        )
        # while it waits, the condition quotes the pods' own reason
        wait_until(
            lambda: PVC in cluster.condition("stuck", "Running").get("message", ""), 30, "the pods' reason"
        )
        started = time.monotonic()
        wait_until(
            lambda: cluster.condition("stuck", "Running").get("reason") == "PodsNotStarting",
            15,
            "the Warning",
        )
        gen1 = {p.metadata.name for p in cluster.pods("stuck")}
        assert len(gen1) == 2
        # stopped after the timeout: its pods are gone (nothing holds the GPUs) and it is requeued
        wait_until(lambda: not gen1 & {p.metadata.name for p in cluster.pods("stuck")}, 30, "gen 1 gone")
        released_s = time.monotonic() - started
        print(f"stuck gang: pods gone {released_s:.1f} s after their reason was read (timeout {timeout} s)")
        assert cluster.status("stuck").get("requeueCount", 0) >= 1
        events = dict(cluster.wait_event("stuck", "StartTimeout"))
        assert PVC in events["StartTimeout"] and PVC in events["PodsNotStarting"], events
        # the user fixes the spec (no claim): the next attempt runs
        image = tj("x")["spec"]["template"]["spec"]["containers"][0]["image"]
        fixed = {
            "spec": {
                "template": {"spec": {"volumes": None, "containers": [{"name": "worker", "image": image}]}}
            }
        }
        cluster.custom.patch_namespaced_custom_object(
            "perfsched.dev", "v1alpha1", cluster.ns, "trainingjobs", "stuck", fixed
        )
        st = cluster.wait_phase("stuck", {"Succeeded", "Failed"}, 120)
    assert st["phase"] == "Succeeded", st
    # the pods' reason was read up to a round after the gang started: the pods went within the start
    # timeout plus two rounds of that
    assert released_s <= timeout + 2 * ROUND_S + 2, released_s
    assert w.violations == []


def _node_of(cluster: Cluster, job: str) -> set[str]:
    return {p.spec.node_name for p in cluster.pods(job) if p.metadata.deletion_timestamp is None}


def _running_on(cluster: Cluster, job: str, avoid: str) -> dict[str, Any] | None:
    st = cluster.status(job)
    alloc = st.get("allocation") or {}
    if st.get("phase") != "Running" or avoid in alloc.get("nodes", [avoid]):
        return None
    return st


def _recreate(kube: KubeCluster, name: str) -> None:
    import os

    from e2e.conftest import DEFAULT_SPEC, E2E_CLUSTER_ENV
    from perfsched_dev.k8s.bootstrap import create_nodes, wait_nodes_ready
    from scheduler.sim.cluster import load_cluster_spec, node_labels, spec_to_nodes

    spec = load_cluster_spec(os.environ.get(E2E_CLUSTER_ENV) or DEFAULT_SPEC)
    node = next(n for n in spec_to_nodes(spec) if n.name == name)
    create_nodes(kube.api, [node], {name: node_labels(spec)[name]})
    wait_nodes_ready(kube.api, [name])


def test_gangs_on_a_failed_node_restart_elsewhere_from_their_checkpoint(cluster: Cluster, stack: Any) -> None:
    grace = 5
    stack("fifo", PERFSCHED_OPERATOR_NODE_FAILURE_GRACE_SECONDS=str(grace))
    core = cluster.core
    with Watcher(cluster.kube) as w:
        # long enough to be running for the whole test; A100 only, so it moves between the two A100 nodes
        cluster.submit(tj("big", replicas=2, gpus=4, iterations=50_000_000, allowedGPUTypes=["A100"]))
        cluster.wait_phase("big", {"Running"}, 60)
        first = sorted(_node_of(cluster, "big"))[0]

        # 1. the node is deleted
        core.delete_node(first)
        t0 = time.monotonic()
        try:
            st = wait_until(
                lambda: _running_on(cluster, "big", first), 30, "big running off the deleted node"
            )
            moved_s = time.monotonic() - t0
            print(f"node deleted: running again elsewhere after {moved_s:.1f} s")
            assert st["restarts"] == 1 and st["lostWork"] >= 0, st
            assert dict(cluster.events("big")).get("NodeFailed"), cluster.events("big")
            assert moved_s <= 2 * ROUND_S + 10, moved_s  # a round to see it, a round to start, binding
        finally:
            _recreate(cluster.kube, first)

        # 2. the node it runs on now goes NotReady
        second = sorted(_node_of(cluster, "big"))[0]
        core.patch_node(second, {"metadata": {"annotations": {"perfsched.dev/kwok-not-ready": "true"}}})
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        core.patch_node_status(
            second,
            {"status": {"conditions": [
                {"type": "Ready", "status": "False", "reason": "KubeletNotReady", "message": "e2e",
                 "lastTransitionTime": now, "lastHeartbeatTime": now},
            ]}},
        )  # fmt: skip
        t0 = time.monotonic()
        try:
            time.sleep(grace - 2)  # within the grace period nothing moves
            assert second in _node_of(cluster, "big") and cluster.status("big")["restarts"] == 1
            st = wait_until(
                lambda: _running_on(cluster, "big", second), 40, "big running off the NotReady node"
            )
            moved_s = time.monotonic() - t0
            print(f"node NotReady: running again elsewhere after {moved_s:.1f} s (grace {grace} s)")
            assert st["restarts"] == 2, st
            assert moved_s <= grace + 2 * ROUND_S + 10, moved_s
        finally:
            core.patch_node(second, {"metadata": {"annotations": {"perfsched.dev/kwok-not-ready": None}}})
            core.patch_node_status(
                second, {"status": {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "e2e"}]}}
            )
            wait_until(
                lambda: any(
                    c.type == "Ready" and c.status == "True" for c in core.read_node(second).status.conditions
                ),
                30,
                f"{second} Ready again",
            )
        cluster.custom.delete_namespaced_custom_object(
            "perfsched.dev", "v1alpha1", cluster.ns, "trainingjobs", "big"
        )
    assert w.violations == [], w.violations


@pytest.mark.parametrize(
    ("field", "value"),
    [("startTimeoutSeconds", 0), ("startTimeoutSeconds", 86401), ("backoffLimit", -1)],
)
def test_bad_start_timeout_or_backoff_is_refused_naming_the_field(
    cluster: Cluster, field: str, value: int
) -> None:
    with pytest.raises(ApiException) as info:
        cluster.submit(tj("bad", **dict[str, Any]({field: value})))
    assert info.value.status == 422 and f"spec.{field}" in info.value.body, info.value.body


def test_leader_handover_time_with_the_default_lease(
    kube_cluster: KubeCluster, cluster: Cluster, stack: Any
) -> None:
    """SIGKILL the leader: how long until the standby acts (a job submitted at the kill is admitted)."""
    ops = stack(
        "fifo",
        replicas=2,
        PERFSCHED_OPERATOR_LEASE_DURATION_SECONDS="15",
        PERFSCHED_OPERATOR_RENEW_DEADLINE_SECONDS="10",
        PERFSCHED_OPERATOR_RETRY_PERIOD_SECONDS="2",
    )
    coord = CoordinationV1Api(kube_cluster.api)

    def holder() -> str:
        try:
            return str(
                coord.read_namespaced_lease("perfsched-operator", cluster.ns).spec.holder_identity or ""
            )
        except ApiException:
            return ""

    first = wait_until(holder, 40, "a leader")
    cluster.submit(tj("before", iterations=200))
    cluster.wait_phase("before", {"Running", "Succeeded"}, 60)
    next(op for op in ops if op.name == first).kill()
    t0 = time.monotonic()
    cluster.submit(tj("after", iterations=200))
    cluster.wait_phase("after", {"Admitted", "Running", "Succeeded"}, 60)
    handover_s = time.monotonic() - t0
    print(f"leader hand-over (lease 15 s, renew 10 s, retry 2 s): {handover_s:.1f} s to the first admission")
    assert holder() != first
    assert handover_s <= 15 + 2 + 2 * ROUND_S + 5, handover_s


def _slow_node_events(kube: KubeCluster) -> list[tuple[str, str]]:
    events = kube.core.list_namespaced_event("default", field_selector="reason=SlowNode").items
    return [(e.involved_object.name, e.message) for e in events]


def test_an_emulated_slow_node_is_flagged_and_its_peer_is_not(
    kube_cluster: KubeCluster, cluster: Cluster, stack: Any
) -> None:
    """One of the two A100 nodes plays a slow node (the emulator runs its gangs at 0.6x); both run a
    ResNet-50 (6 GPUs) and a BERT (2 GPUs) gang. The operator flags the slow node (default threshold,
    models and share; the window and the confirmation time shortened to the test's time scale) and
    not its peer. With moves on, once the peer's BERT gang is deleted, the slow node's BERT gang moves
    there (one Resized Event naming the node); its ResNet-50 gang, with no room elsewhere, stays."""
    from e2e.harness import gpu_products
    from scheduler.names import LABEL_EMULATED_SPEED

    a100 = sorted(n for n, p in gpu_products(kube_cluster.api).items() if "A100" in p)
    assert len(a100) == 2, a100
    slow, healthy = a100[1], a100[0]
    before = _slow_node_events(kube_cluster)
    stack(
        "fifo",
        PERFSCHED_OPERATOR_SLOW_NODE_WINDOW_SECONDS="120",
        PERFSCHED_OPERATOR_SLOW_NODE_CONFIRM_SECONDS="8",
        PERFSCHED_OPERATOR_MOVE_OFF_SLOW_NODES="true",
        PERFSCHED_OPERATOR_MIN_RESIZE_INTERVAL_SECONDS="2",
    )
    core = cluster.core
    core.patch_node(slow, {"metadata": {"labels": {LABEL_EMULATED_SPEED: "0.6"}}})
    try:
        r50: dict[str, Any] = {
            "model": "resnet50",
            "dataset": "imagenet",
            "batch": 256,
            "allowedGPUTypes": ["A100"],
        }
        bert: dict[str, Any] = {"model": "bert", "dataset": "squad", "batch": 32, "allowedGPUTypes": ["A100"]}
        # 6 + 6 GPUs cannot share a node: one ResNet-50 gang per node, a BERT gang beside each
        cluster.submit(tj("r50-a", iterations=10_000_000, gpus=6, **r50))
        cluster.submit(tj("r50-b", iterations=10_000_000, gpus=6, **r50))
        for name in ("r50-a", "r50-b"):
            cluster.wait_phase(name, {"Running"}, 60)
        cluster.submit(tj("bert-a", iterations=10_000_000, gpus=2, **bert))
        cluster.submit(tj("bert-b", iterations=10_000_000, gpus=2, **bert))
        for name in ("bert-a", "bert-b"):
            cluster.wait_phase(name, {"Running"}, 60)
        placed = {n: _node_of(cluster, n) for n in ("r50-a", "r50-b", "bert-a", "bert-b")}
        assert {frozenset(v) for v in placed.values()} == {frozenset({slow}), frozenset({healthy})}, placed
        t0 = time.monotonic()
        new = wait_until(
            lambda: [e for e in _slow_node_events(kube_cluster) if e not in before], 90, "a SlowNode Event"
        )
        flagged_s = time.monotonic() - t0
        print(f"slow node (0.6x) flagged {flagged_s:.1f} s after its gangs ran: {new}")
        assert [n for n, _ in new] == [slow], new
        ratio = re.search(
            r"at ([0-9.]+)x the throughput of the same models on peer A100 nodes \(2 model", new[0][1]
        )
        # 0.6 up to the online correction's drift between the reports of the two nodes
        assert ratio is not None and 0.5 <= float(ratio.group(1)) <= 0.7, new
        time.sleep(3)  # the healthy peer stays unflagged, and the slow node is flagged once
        assert [n for n, _ in _slow_node_events(kube_cluster) if (n, _) not in before] == [slow]
        # no room off the slow node so far (both A100 nodes are full): nothing moved
        assert all(cluster.status(n).get("resizes", 0) == 0 for n in placed), placed
        # room on the healthy peer: the slow node's BERT gang (millions of iterations left at 0.6x: the
        # gain dwarfs the restart) moves there; its ResNet-50 gang (6 GPUs) has no room and stays
        bert_slow = next(n for n in ("bert-a", "bert-b") if placed[n] == {slow})
        bert_healthy = next(n for n in ("bert-a", "bert-b") if n != bert_slow)
        r50_slow = next(n for n in ("r50-a", "r50-b") if placed[n] == {slow})
        cluster.custom.delete_namespaced_custom_object(
            "perfsched.dev", "v1alpha1", cluster.ns, "trainingjobs", bert_healthy
        )
        t1 = time.monotonic()
        wait_until(lambda: _running_on(cluster, bert_slow, slow), 90, f"{bert_slow} running off {slow}")
        moved_s = time.monotonic() - t1
        resized = [m for r, m in cluster.events(bert_slow) if r == "Resized"]
        print(f"{bert_slow} moved off the slow node, running on {healthy} {moved_s:.1f} s later: {resized}")
        assert len(resized) == 1 and f"slow node {slow} runs at 0." in resized[0], resized
        assert cluster.status(r50_slow).get("resizes", 0) == 0
    finally:
        core.patch_node(slow, {"metadata": {"labels": {LABEL_EMULATED_SPEED: None}}})
