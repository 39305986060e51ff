"""The operator plans with DRA GPUs: a node whose GPUs are ResourceSlice devices is typed and counted from
them, tainted devices and not-ready nodes leave the capacity it plans with, and devices without the
attributes perfsched needs are counted as ``unknown`` with a Warning Event on the Node."""

from __future__ import annotations

from perfsched_dev.k8s import dra as fake
from perfsched_dev.k8s.bootstrap import node_manifest
from scheduler.core.types import Node
from scheduler.policies import make_policy
from tests.operator.conftest import Harness, make_harness, trainingjob

V100 = Node("dra-v", "V100", 8, gpu_product="Tesla-V100-SXM2-16GB")


def dra_harness(*nodes: Node, policy: str = "fifo", **slice_args: object) -> Harness:
    h = make_harness(make_policy(policy))
    for n in nodes:
        h.api.add_node(node_manifest(n, dra=True))
    h.api.dra["deviceclasses"] = [fake.device_class()]
    h.api.dra["resourceslices"] = [fake.resource_slice(n, **slice_args) for n in nodes]  # type: ignore[arg-type]
    return h


def test_a_job_starts_on_dra_gpus() -> None:
    h = dra_harness(V100)
    h.api.add_trainingjob(trainingjob("bert", replicas={"min": 1, "max": 4, "gpusPerReplica": 2}))
    rep = h.operator().run_round()
    assert rep.did("start", "ml/bert")
    pods = h.api.job_pods("ml", "bert")
    # 4 x 2 GPUs fit the node's 8 DRA GPUs; the pods still ask for nvidia.com/gpu (KEP-5004)
    assert len(pods) == 4
    assert pods[0]["metadata"]["annotations"]["perfsched.dev/gpu-type"] == "V100"
    assert pods[0]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"


def test_tainted_devices_are_not_planned_with() -> None:
    taint = {"key": "gpu.nvidia.com/xid", "value": "48", "effect": "NoExecute"}
    # 3 of 8 GPUs tainted: 5 healthy, so a rigid 3 x 2-GPU job (6) cannot start, a 2 x 2 one can
    h = dra_harness(V100, taints={0: taint, 1: taint, 2: taint})
    h.api.add_trainingjob(trainingjob("big", replicas={"min": 3, "max": 3, "gpusPerReplica": 2}))
    h.api.add_trainingjob(trainingjob("small", replicas={"min": 2, "max": 2, "gpusPerReplica": 2}))
    rep = h.operator().run_round()
    assert rep.did("start", "ml/small") and not rep.did("start", "ml/big")


def test_a_not_ready_node_gets_no_new_gang() -> None:
    h = dra_harness(V100)
    node = h.api.nodes["dra-v"]
    node["status"]["conditions"] = [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}]
    h.api.add_trainingjob(trainingjob("bert"))
    rep = h.operator().run_round()
    assert not rep.did("start", "ml/bert")


def test_missing_product_counts_unknown_gpus_and_warns_once() -> None:
    h = dra_harness(V100, omit=("productName",))
    h.api.add_trainingjob(trainingjob("bert"))
    op = h.operator()
    rep = op.run_round()
    # never a silent zero: the 8 GPUs are there, typed "unknown", and a job may run on them
    assert rep.did("start", "ml/bert")
    assert h.api.job_pods("ml", "bert")[0]["metadata"]["annotations"]["perfsched.dev/gpu-type"] == "unknown"
    warnings = [e for e in h.api.events if e["reason"] == "DRAAttributeMissing"]
    assert len(warnings) == 1
    assert warnings[0]["type"] == "Warning" and warnings[0]["involvedObject"]["kind"] == "Node"
    assert warnings[0]["message"] == (
        "DRA GPUs of node dra-v have no productName attribute: their 8 GPUs are counted and typed unknown"
    )
    op.run_round()
    assert len([e for e in h.api.events if e["reason"] == "DRAAttributeMissing"]) == 1


def test_a_device_class_perfsched_cannot_read_still_counts_the_gpus_and_warns_once() -> None:
    # a class whose selector is no `device.driver == "..."` test: NVIDIA's driver is assumed, the node's
    # 8 GPUs are counted and typed from their productName, and a Warning Event names the class's problem
    h = dra_harness(V100)
    opaque = fake.device_class()
    opaque["spec"]["selectors"] = [{"cel": {"expression": "device.capacity['gpu.nvidia.com'].memory > 0"}}]
    h.api.dra["deviceclasses"] = [opaque]
    h.api.add_trainingjob(trainingjob("bert", replicas={"min": 4, "max": 4, "gpusPerReplica": 2}))
    op = h.operator()
    rep = op.run_round()
    assert rep.did("start", "ml/bert")
    assert h.api.job_pods("ml", "bert")[0]["metadata"]["annotations"]["perfsched.dev/gpu-type"] == "V100"
    warnings = [e for e in h.api.events if e["reason"] == "DRAAttributeMissing"]
    assert [(w["type"], w["involvedObject"]["kind"]) for w in warnings] == [("Warning", "Node")]
    assert warnings[0]["message"] == (
        'DeviceClass gpu.nvidia.com: no single `device.driver == "..."` test in spec.selectors; '
        "counting the devices of driver gpu.nvidia.com"
    )
    op.run_round()
    assert len([e for e in h.api.events if e["reason"] == "DRAAttributeMissing"]) == 1


def test_gpus_held_by_claims_of_no_running_pod_are_taken() -> None:
    from tests.extender.kube import gpu_claim

    h = dra_harness(V100)
    # a user's own claim holds 4 devices; a finished pod's claim, not yet released, holds 2 more: 2 left
    h.api.dra["resourceclaims"] = [
        gpu_claim("mine", "dra-v", [0, 1, 2, 3]),
        gpu_claim("done-gpu", "dra-v", [4, 5], owner_uid="uid-of-a-finished-pod"),
    ]
    h.api.add_trainingjob(trainingjob("big", replicas={"min": 2, "max": 2, "gpusPerReplica": 2}))
    rep = h.operator().run_round()
    # 8 - 4 (user claim) - 2 (finished pod's claim) = 2 free
    assert not rep.did("start", "ml/big")
    assert rep.waiting["ml/big"].startswith("waiting for 4 GPUs of type V100: 2 free")


def _finished_pod_and_claim(h: Harness, devices: list[int]) -> None:
    """A pod that ran on ``dra-v`` and Succeeded, its claim on ``devices`` not yet deallocated."""
    from tests.extender.kube import gpu_claim

    pod = h.api.create_pod(
        "team-a",
        {
            "metadata": {"name": "done"},
            "spec": {
                "nodeName": "dra-v",
                "containers": [
                    {"name": "main", "resources": {"limits": {"nvidia.com/gpu": str(len(devices))}}}
                ],
            },
        },
    )
    h.api.set_pod_phase("team-a", "done", "Succeeded")
    h.api.dra["resourceclaims"] = [gpu_claim("done-gpu", "dra-v", devices, owner_uid=pod["metadata"]["uid"])]


def test_a_start_on_gpus_a_finished_pods_claim_still_holds_waits_for_the_claim_to_go() -> None:
    h = dra_harness(V100)
    _finished_pod_and_claim(h, [0, 1])
    # 4 x 2 GPUs: the whole node, which kube-controller-manager is about to release
    h.api.add_trainingjob(trainingjob("big", replicas={"min": 4, "max": 4, "gpusPerReplica": 2}))
    op = h.operator()
    rep = op.run_round()
    assert rep.did("start", "ml/big")
    # planned on the whole node, but no pod is created while the claim holds 2 of its GPUs
    assert h.api.job_pods("ml", "big") == []
    cond = {c["type"]: c for c in h.api.trainingjobs[("ml", "big")]["status"]["conditions"]}["Running"]
    assert (
        "waiting for GPUs that finished pods' ResourceClaims hold until they are released (2 on dra-v) "
        "before creating the gang's pods"
    ) in cond["message"]
    op.run_round()
    assert h.api.job_pods("ml", "big") == []
    # the claim is deallocated: the next round creates the 4 pods on the node
    h.api.dra["resourceclaims"] = []
    op.run_round()
    pods = h.api.job_pods("ml", "big")
    assert len(pods) == 4
    assert {p["metadata"]["annotations"]["perfsched.dev/planned-node"] for p in pods} == {"dra-v"}


def test_a_finished_pods_claim_that_stays_allocated_is_taken_after_the_grace() -> None:
    from scheduler.operator.reconcile import CLAIM_RELEASE_GRACE_S

    h = dra_harness(V100)
    _finished_pod_and_claim(h, [0, 1])
    op = h.operator()
    op.run_round()
    h.clock.advance(CLAIM_RELEASE_GRACE_S + 1)
    # kube-controller-manager never released it: its 2 GPUs are taken, a job for the whole node waits
    h.api.add_trainingjob(trainingjob("big", replicas={"min": 4, "max": 4, "gpusPerReplica": 2}))
    rep = op.run_round()
    assert not rep.did("start", "ml/big")
    assert rep.waiting["ml/big"].startswith("waiting for 8 GPUs of type V100: 6 free")
