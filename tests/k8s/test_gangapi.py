"""Gangs under the Workload API: the Workload / PodGroup manifests and the actuator's writes.

Checked against the ``scheduling.k8s.io/v1beta1`` fields kube-scheduler 1.37 reads (a gang policy's
``minCount``, the PodGroup's ``workloadRef``, the pod's ``spec.schedulingGroup.podGroupName``) and against
the fake API server: off by default, each object created once, the previous generation's pair deleted,
and a server without the API turns it off with the gang still started.
"""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.core.types import Allocation
from scheduler.k8s import gangapi
from scheduler.k8s.actuator import Actuator, NotLeader, owner_reference
from scheduler.k8s.fakeapi import FakeKubeApi
from tests.k8s.test_actuator import spec_of, tj

#: a gang of 8 x 1 GPU over two nodes of one NVLink domain
ALLOC8 = Allocation.of("ml/bert", "H100", 1, {"n1": 4, "n2": 4})


def job() -> dict[str, Any]:
    obj = tj(replicas={"max": 8, "gpusPerReplica": 1})
    obj["metadata"]["namespace"] = "ml"
    return obj


def test_workload_and_pod_group_bodies() -> None:
    obj = job()
    owner = owner_reference(obj)
    wl = gangapi.workload_body(obj, 3, 8, owner)
    pg = gangapi.pod_group_body(obj, 3, 8, owner)
    assert wl["apiVersion"] == pg["apiVersion"] == "scheduling.k8s.io/v1beta1"
    assert (wl["kind"], pg["kind"]) == ("Workload", "PodGroup")
    assert wl["metadata"]["name"] == pg["metadata"]["name"] == "bert-g3"
    assert wl["metadata"]["namespace"] == pg["metadata"]["namespace"] == "ml"
    assert wl["metadata"]["ownerReferences"] == [owner]
    assert wl["spec"]["controllerRef"] == {"apiGroup": "perfsched.dev", "kind": "TrainingJob", "name": "bert"}
    assert wl["spec"]["podGroupTemplates"] == [
        {"name": "workers", "schedulingPolicy": {"gang": {"minCount": 8}}}
    ]
    assert pg["spec"] == {
        "workloadRef": {"workloadName": "bert-g3", "templateName": "workers"},
        "schedulingPolicy": {"gang": {"minCount": 8}},
    }


def test_a_gang_of_no_pods_is_refused() -> None:
    obj = job()
    with pytest.raises(ValueError, match="minCount=0"):
        gangapi.pod_group_body(obj, 1, 0, owner_reference(obj))


def test_off_by_default_pods_name_no_group() -> None:
    api = FakeKubeApi(lambda: 0.0)
    obj = job()
    Actuator(api).start_gang(obj, spec_of(obj), ALLOC8, generation=1, start_progress=0)
    assert len(api.pods) == 8 and not api.gang_objects
    assert all("schedulingGroup" not in p["spec"] for p in api.pods.values())


def test_each_pod_of_the_generation_points_to_its_pod_group() -> None:
    api = FakeKubeApi(lambda: 0.0)
    obj = job()
    act = Actuator(api, workload_api=True)
    names = act.start_gang(obj, spec_of(obj), ALLOC8, generation=1, start_progress=0)
    assert set(api.gang_objects) == {("workloads", "ml", "bert-g1"), ("podgroups", "ml", "bert-g1")}
    pods = [api.pods[("ml", n)] for n in names]
    assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in pods} == {"bert-g1"}
    # the group exists before its first pod: no pod waits on a PodGroup that is not there yet
    verbs = [c[0] for c in api.calls]
    assert verbs.index("create_podgroups") < verbs.index("create_pod")
    assert api.gang_objects[("podgroups", "ml", "bert-g1")]["spec"]["schedulingPolicy"] == {
        "gang": {"minCount": 8}
    }
    # the placement stays the operator's: each pod still carries its planned node
    planned = sorted(p["metadata"]["annotations"]["perfsched.dev/planned-node"] for p in pods)
    assert planned == ["n1"] * 4 + ["n2"] * 4


def test_starting_twice_creates_each_object_once() -> None:
    api = FakeKubeApi(lambda: 0.0)
    obj = job()
    act = Actuator(api, workload_api=True)
    act.start_gang(obj, spec_of(obj), ALLOC8, generation=1, start_progress=0)
    act.start_gang(obj, spec_of(obj), ALLOC8, generation=1, start_progress=0)
    assert len(api.gang_objects) == 2 and len(api.pods) == 8
    assert act.workload_api


def test_a_resize_gets_a_new_group_and_drops_the_old_one() -> None:
    api = FakeKubeApi(lambda: 0.0)
    obj = job()
    act = Actuator(api, workload_api=True)
    act.start_gang(obj, spec_of(obj), ALLOC8, generation=1, start_progress=0)
    smaller = Allocation.of("ml/bert", "H100", 1, {"n1": 4})
    act.start_gang(obj, spec_of(obj), smaller, generation=2, start_progress=0.5)
    assert set(api.gang_objects) == {("workloads", "ml", "bert-g2"), ("podgroups", "ml", "bert-g2")}
    assert (
        api.gang_objects[("podgroups", "ml", "bert-g2")]["spec"]["schedulingPolicy"]["gang"]["minCount"] == 4
    )


def test_a_server_without_the_api_turns_it_off_and_still_starts_the_gang(
    caplog: pytest.LogCaptureFixture,
) -> None:
    api = FakeKubeApi(lambda: 0.0)
    api.serves_workload_api = False
    obj = job()
    act = Actuator(api, workload_api=True)
    names = act.start_gang(obj, spec_of(obj), ALLOC8, generation=1, start_progress=0)
    assert len(names) == 8 and not api.gang_objects
    assert all("schedulingGroup" not in p["spec"] for p in api.pods.values())
    assert not act.workload_api
    assert sum("does not serve scheduling.k8s.io/v1beta1" in r.getMessage() for r in caplog.records) == 1
    # later gangs do not ask again
    api.calls.clear()
    act.start_gang(obj, spec_of(obj), ALLOC8, generation=2, start_progress=0)
    assert not [c for c in api.calls if "podgroups" in c[0] or "workloads" in c[0]]


def test_a_replica_that_is_not_leader_creates_no_group() -> None:
    api = FakeKubeApi(lambda: 0.0)
    obj = job()
    with pytest.raises(NotLeader):
        Actuator(api, may_act=lambda: False, workload_api=True).start_gang(
            obj, spec_of(obj), ALLOC8, generation=1, start_progress=0
        )
    assert not api.gang_objects and not api.pods
