"""A running gang whose DRA GPU device gets a ``NoExecute`` taint (in its ResourceSlice or from a
DeviceTaintRule) that its claim does not tolerate restarts whole from its checkpoint on healthy GPUs, as
on a failed node; a ``NoSchedule`` taint only takes the device out of the capacity; a DeviceTaintRule
perfsched cannot read gets one Warning Event naming the field and taints nothing."""

from __future__ import annotations

from typing import Any

import pytest

from perfsched_dev.k8s import dra as fake
from perfsched_dev.k8s.bootstrap import node_manifest
from scheduler.core.types import Node
from tests.extender.kube import gpu_claim
from tests.operator.conftest import Harness, ScriptedPolicy, alloc, make_harness, trainingjob

NODES = [Node(f"d{i}", "A100", 8, gpu_product="NVIDIA-A100-SXM4-80GB") for i in (1, 2, 3)]


def taint_rule(name: str, selector: Any, effect: str = "NoExecute", value: str = "48") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "spec": {
            "deviceSelector": selector,
            "taint": {"key": "gpu.nvidia.com/xid", "value": value, "effect": effect},
        },
    }


def running_dra_gang(tolerations: list[dict[str, Any]] | None = None) -> tuple[Harness, ScriptedPolicy]:
    """Job ``bert`` (2 x 2 GPUs) runs on d1 (devices 0, 1) and d2 (devices 0, 1), each pod holding its
    claim; progress 300, checkpoint 200."""
    policy = ScriptedPolicy()
    h = make_harness(policy)
    for n in NODES:
        h.api.add_node(node_manifest(n, dra=True))
    h.api.dra["deviceclasses"] = [fake.device_class()]
    h.api.dra["resourceslices"] = [fake.resource_slice(n) for n in NODES]
    h.api.add_trainingjob(trainingjob("bert", replicas={"min": 2, "max": 2, "gpusPerReplica": 2}))
    policy.want["ml/bert"] = alloc("ml/bert", "A100", 2, d1=1, d2=1)
    op = h.operator()
    op.run_round()
    h.settle_pods()
    claims = []
    for pod in h.api.job_pods("ml", "bert"):
        claim = gpu_claim(
            pod["metadata"]["name"] + "-gpu",
            pod["spec"]["nodeName"],
            [0, 1],
            owner_uid=pod["metadata"]["uid"],
            namespace="ml",
        )
        if tolerations is not None:
            for r in claim["status"]["allocation"]["devices"]["results"]:
                r["tolerations"] = tolerations
        claims.append(claim)
    h.api.dra["resourceclaims"] = claims
    h.api.report_progress("ml", "bert-g1-0", progress=300, checkpoint=200, throughput=20, time=h.clock.now())
    op.run_round()
    assert h.api.status_of("ml", "bert")["phase"] == "Running"
    del policy.want["ml/bert"]  # keep what runs
    return h, policy


def _status_cond(h: Harness, type_: str) -> dict[str, Any]:
    conds = h.api.status_of("ml", "bert")["conditions"]
    return next(c for c in conds if c["type"] == type_)


def _live(h: Harness) -> list[str]:
    pods = h.api.job_pods("ml", "bert")
    return sorted(p["metadata"]["name"] for p in pods if "deletionTimestamp" not in p["metadata"])


def _taint_d2_device_1_in_slice(h: Harness) -> None:
    h.api.dra["resourceslices"][1] = fake.resource_slice(
        NODES[1], taints={1: {"key": "gpu.nvidia.com/xid", "value": "48", "effect": "NoExecute"}}
    )


def _taint_d2_device_1_by_rule(h: Harness) -> None:
    selector = {"driver": "gpu.nvidia.com", "pool": "d2", "device": "gpu-1"}
    h.api.dra["devicetaintrules"] = [taint_rule("xid-48", selector)]


@pytest.mark.parametrize("taint", [_taint_d2_device_1_in_slice, _taint_d2_device_1_by_rule])
def test_a_noexecute_device_taint_restarts_the_gang_from_its_checkpoint_on_healthy_gpus(taint: Any) -> None:
    h, policy = running_dra_gang()
    op = h.operator()
    taint(h)
    rep = op.run_round()
    assert rep.did("restart", "ml/bert")
    run = _status_cond(h, "Running")
    assert run["reason"] == "NodeFailed"
    assert "pod bert-g1-1: its GPU device gpu.nvidia.com/d2/gpu-1 on node d2 is tainted" in run["message"]
    assert "gpu.nvidia.com/xid=48:NoExecute" in run["message"]
    st = h.api.status_of("ml", "bert")
    assert st.get("failures", 0) == 0 and st.get("requeueCount", 0) == 0
    # never partial: the pod on the tainted device is removed at once, the other stopped with its grace
    pods = {p["metadata"]["name"]: p for p in h.api.job_pods("ml", "bert")}
    assert "bert-g1-1" not in pods and "deletionTimestamp" in pods["bert-g1-0"]["metadata"]
    h.api.finish_deletions()
    h.api.dra["resourceclaims"] = []  # the pods' claims go with them

    policy.want["ml/bert"] = alloc("ml/bert", "A100", 2, d1=1, d3=1)
    rep = op.run_round()
    assert rep.did("start", "ml/bert")
    # the tainted device left the capacity: 7 of d2's 8 GPUs
    d2 = next(n for n in policy.seen[-1][0].nodes if n.name == "d2")
    assert d2.gpus == 7
    st = h.api.status_of("ml", "bert")
    assert (st["lostWork"], st["checkpointProgress"], st["restarts"]) == (100, 200, 1)


def test_a_device_taint_on_a_gpu_no_pod_of_the_gang_holds_restarts_nothing() -> None:
    h, policy = running_dra_gang()
    selector = {"driver": "gpu.nvidia.com", "pool": "d2", "device": "gpu-5"}
    h.api.dra["devicetaintrules"] = [taint_rule("xid-48", selector)]
    rep = h.operator().run_round()
    assert not rep.did("restart", "ml/bert")
    assert _live(h) == ["bert-g1-0", "bert-g1-1"]
    assert next(n for n in policy.seen[-1][0].nodes if n.name == "d2").gpus == 7


def test_a_noschedule_rule_on_every_device_of_a_node_leaves_its_gang_running_and_takes_no_new_one() -> None:
    h, policy = running_dra_gang()
    h.api.dra["devicetaintrules"] = [taint_rule("drain-d2", {"pool": "d2"}, effect="NoSchedule")]
    rep = h.operator().run_round()
    assert not rep.did("restart", "ml/bert")
    assert _live(h) == ["bert-g1-0", "bert-g1-1"]
    d2 = next(n for n in policy.seen[-1][0].nodes if n.name == "d2")
    assert d2.capacity_for_jobs == 2  # what its pod holds


def test_a_noschedule_rule_takes_the_devices_out_of_capacity_and_leaves_the_gang_running() -> None:
    h, policy = running_dra_gang()
    # a device the gang holds and one it does not
    h.api.dra["devicetaintrules"] = [
        taint_rule(f"drain-{d}", {"pool": "d2", "device": d}, effect="NoSchedule") for d in ("gpu-1", "gpu-6")
    ]
    rep = h.operator().run_round()
    assert not rep.did("restart", "ml/bert")
    assert _live(h) == ["bert-g1-0", "bert-g1-1"]
    assert next(n for n in policy.seen[-1][0].nodes if n.name == "d2").gpus == 6


@pytest.mark.parametrize(
    ("tolerations", "restarts"),
    [
        ([{"key": "gpu.nvidia.com/xid", "operator": "Exists", "effect": "NoExecute"}], False),
        ([{"key": "gpu.nvidia.com/xid", "operator": "Equal", "value": "48"}], False),
        ([{"operator": "Exists"}], False),
        ([{"key": "gpu.nvidia.com/xid", "operator": "Equal", "value": "79"}], True),
        ([{"key": "gpu.nvidia.com/xid", "operator": "Exists", "effect": "NoSchedule"}], True),
        ([{"key": "gpu.nvidia.com/xid", "operator": "Exists", "tolerationSeconds": 60}], True),
    ],
)
def test_a_noexecute_device_taint_the_claim_tolerates_leaves_the_gang_running(
    tolerations: list[dict[str, Any]], restarts: bool
) -> None:
    h, _ = running_dra_gang(tolerations)
    _taint_d2_device_1_by_rule(h)
    rep = h.operator().run_round()
    assert rep.did("restart", "ml/bert") is restarts
    if not restarts:
        assert _live(h) == ["bert-g1-0", "bert-g1-1"]


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"deviceSelector": "d2", "taint": {"key": "k", "effect": "NoExecute"}}, "spec.deviceSelector"),
        (
            {"deviceSelector": {"pool": 2}, "taint": {"key": "k", "effect": "NoExecute"}},
            "spec.deviceSelector.pool",
        ),
        ({"deviceSelector": {"pool": "d2"}}, "spec.taint"),
        ({"deviceSelector": {"pool": "d2"}, "taint": {"effect": "NoExecute"}}, "spec.taint.key"),
        ({"deviceSelector": {"pool": "d2"}, "taint": {"key": "k"}}, "spec.taint.effect"),
    ],
)
def test_a_malformed_rule_gets_one_warning_event_naming_the_field_and_taints_nothing(
    spec: dict[str, Any], field: str
) -> None:
    h, policy = running_dra_gang()
    rule = taint_rule("bad", {})
    rule["spec"] = spec
    h.api.dra["devicetaintrules"] = [rule]
    op = h.operator()
    rep = op.run_round()
    op.run_round()
    assert not rep.did("restart", "ml/bert") and not rep.errors
    assert next(n for n in policy.seen[-1][0].nodes if n.name == "d2").gpus == 8
    warnings = [e for e in h.api.events if e["reason"] == "DeviceTaintRuleInvalid"]
    assert len(warnings) == 1
    assert warnings[0]["type"] == "Warning"
    assert warnings[0]["involvedObject"]["kind"] == "DeviceTaintRule"
    assert warnings[0]["involvedObject"]["name"] == "bad"
    assert warnings[0]["message"].startswith(f"DeviceTaintRule bad.{field}: ")
