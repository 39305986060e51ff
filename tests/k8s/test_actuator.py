"""The actuator's manifests (gang pods, headless Service, Events) and its writes; the KubeApi retry policy.

Manifests are checked field by field against what a distributed trainer, the extender and the emulator
read; writes are checked against the fake API server (idempotent creation, leader fencing).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes.client.exceptions import ApiException

from scheduler.core.errors import PermanentError
from scheduler.core.types import Allocation
from scheduler.k8s import crd
from scheduler.k8s.actuator import (
    Actuator,
    NotLeader,
    event_body,
    gang_pods,
    headless_service,
    master_addr,
    pod_hostname,
    replica_nodes,
    service_name,
)
from scheduler.k8s.fakeapi import FakeKubeApi, merge_patch, selector_matches
from scheduler.k8s.kubeapi import (
    AlreadyExists,
    ApiUnavailable,
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
    classify,
    retry,
)


def tj(name: str = "bert", template: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "bert",
        "batchSize": 64,
        "work": {"epochs": 2, "datasetSize": 500},
        "replicas": {"max": 3, "gpusPerReplica": 4},
        "checkpointGraceSeconds": 45,
        "template": template
        or {
            "metadata": {"labels": {"team": "nlp"}, "annotations": {"owner": "ana"}},
            "spec": {
                "containers": [
                    {
                        "name": "worker",
                        "image": "t:1",
                        "env": [{"name": "RANK", "value": "stale"}, {"name": "X", "value": "1"}],
                    },
                    {"name": "sidecar", "image": "s:1"},
                ],
                "nodeSelector": {"pool": "gpu"},
            },
        },
    }
    body.update(spec)
    return {"metadata": {"name": name, "namespace": "ml", "uid": "u-1"}, "spec": body}


def spec_of(obj: dict[str, Any]) -> crd.TrainingJobSpec:
    s = crd.parse_spec(obj)
    assert isinstance(s, crd.TrainingJobSpec)
    return s


ALLOC = Allocation.of("ml/bert", "A100", 4, {"n2": 1, "n1": 2})


def env(c: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}


def test_replica_zero_goes_to_the_node_with_most_replicas() -> None:
    # n1 holds 2 replicas, n2 one: ranks 0 and 1 on n1, rank 2 on n2
    assert replica_nodes(ALLOC) == ["n1", "n1", "n2"]


def test_gang_pods_carry_everything_the_workers_and_scheduler_read() -> None:
    obj = tj()
    pods = gang_pods(obj, spec_of(obj), ALLOC, generation=3, start_progress=250.0)
    assert [p["metadata"]["name"] for p in pods] == ["bert-g3-0", "bert-g3-1", "bert-g3-2"]
    p2 = pods[2]
    meta = p2["metadata"]
    assert meta["labels"] == {
        "team": "nlp",
        "perfsched.dev/job-name": "bert",
        "perfsched.dev/replica-index": "2",
        "perfsched.dev/generation": "3",
    }
    assert meta["annotations"]["owner"] == "ana"
    assert meta["annotations"]["perfsched.dev/gpu-type"] == "A100"
    assert meta["annotations"]["perfsched.dev/planned-node"] == "n2"
    assert meta["annotations"]["perfsched.dev/start-progress"] == "250"
    # 2 epochs x 500 samples = 1000 samples
    assert meta["annotations"]["perfsched.dev/total-work"] == "1000"
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "perfsched.dev/v1alpha1",
            "kind": "TrainingJob",
            "name": "bert",
            "uid": "u-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    spec = p2["spec"]
    assert spec["schedulerName"] == "perfsched" and spec["restartPolicy"] == "Never"
    assert spec["terminationGracePeriodSeconds"] == 45
    assert spec["nodeSelector"] == {"pool": "gpu"}  # the template's own fields survive
    assert (spec["hostname"], spec["subdomain"]) == ("bert-2", "bert")
    worker, sidecar = spec["containers"]
    assert worker["resources"] == {"limits": {"nvidia.com/gpu": "4"}, "requests": {"nvidia.com/gpu": "4"}}
    assert "resources" not in sidecar  # only the first container is the GPU worker
    e = env(worker)
    assert e["RANK"] == "2" and e["X"] == "1"  # the operator's RANK replaces the template's
    assert e["WORLD_SIZE"] == "3"
    assert e["MASTER_ADDR"] == "bert-0.bert.ml.svc" and e["MASTER_PORT"] == "29500"
    assert e["PERFSCHED_POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert e["PERFSCHED_POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert (e["PERFSCHED_JOB_NAME"], e["PERFSCHED_TOTAL_WORK"], e["PERFSCHED_WORK_UNIT"]) == (
        "bert",
        "1000",
        "samples",
    )
    assert e["PERFSCHED_START_PROGRESS"] == "250" and e["PERFSCHED_GENERATION"] == "3"
    assert env(sidecar)["RANK"] == "2"
    # the template itself is not modified
    assert obj["spec"]["template"]["spec"]["containers"][0]["env"][0] == {"name": "RANK", "value": "stale"}


def test_headless_service_selects_the_job_pods() -> None:
    svc = headless_service(tj())
    assert svc["metadata"]["name"] == "bert"
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["selector"] == {"perfsched.dev/job-name": "bert"}
    assert svc["spec"]["ports"] == [{"name": "dist", "port": 29500, "targetPort": 29500}]


@pytest.mark.parametrize(
    ("job", "svc"),
    [
        ("bert", "bert"),
        ("bert.v2", None),  # a dot is fine in a TrainingJob name, not in a Service name
        ("9lives", None),  # must start with a letter
        ("x" * 63, None),
    ],
)
def test_service_names_are_dns_labels(job: str, svc: str | None) -> None:
    name = service_name(job)
    if svc is not None:
        assert name == svc
    assert len(name) <= 63 and name[0].isalpha() and all(c.isalnum() or c == "-" for c in name)
    assert len(pod_hostname(job, 127)) <= 63
    assert master_addr(job, "ns").startswith(pod_hostname(job, 0) + "." + name + ".ns")


@settings(max_examples=80, deadline=None)
@given(st.from_regex(r"[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?", fullmatch=True))
def test_service_and_host_names_stay_valid_and_distinct(job: str) -> None:
    assert service_name(job) != service_name(job + "x") or len(job) >= 63
    name = service_name(job)
    assert 1 <= len(name) <= 63 and name[0].isalpha() and name[-1].isalnum()
    for r in (0, 9, 4095):
        h = pod_hostname(job, r)
        assert len(h) <= 63 and h.endswith(f"-{r}")


def test_event_body() -> None:
    ev = event_body(tj(), type_="Warning", reason="Preempted", message="m" * 2000, now=0.0, instance="op-1")
    assert ev["involvedObject"] == {
        "apiVersion": "perfsched.dev/v1alpha1",
        "kind": "TrainingJob",
        "name": "bert",
        "namespace": "ml",
        "uid": "u-1",
    }
    assert (ev["type"], ev["reason"], ev["reportingInstance"]) == ("Warning", "Preempted", "op-1")
    assert len(ev["message"]) == 1024 and ev["firstTimestamp"] == "1970-01-01T00:00:00Z"


# --- writes --------------------------------------------------------------------------------------------


def test_start_gang_twice_creates_each_pod_once() -> None:
    api = FakeKubeApi(lambda: 0.0)
    act = Actuator(api)
    obj = tj()
    names = act.start_gang(obj, spec_of(obj), ALLOC, generation=1, start_progress=0)
    again = act.start_gang(obj, spec_of(obj), ALLOC, generation=1, start_progress=0)
    assert names == again == ["bert-g1-0", "bert-g1-1", "bert-g1-2"]
    assert len(api.pods) == 3 and len(api.services) == 1


def test_a_replica_that_is_not_leader_writes_nothing() -> None:
    api = FakeKubeApi(lambda: 0.0)
    act = Actuator(api, may_act=lambda: False)
    obj = tj()
    with pytest.raises(NotLeader):
        act.start_gang(obj, spec_of(obj), ALLOC, generation=1, start_progress=0)
    with pytest.raises(NotLeader):
        act.event(obj, type_="Normal", reason="X", message="y", now=0)
    assert not api.pods and not api.services and not api.events


def test_event_failures_are_not_fatal() -> None:
    api = FakeKubeApi(lambda: 0.0)
    api.fail_next("create_event", PermanentError("events are forbidden"))
    Actuator(api).event(tj(), type_="Normal", reason="X", message="y", now=0)  # no exception
    assert api.events == []


# --- KubeApi error mapping and retries ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "reason", "kind"),
    [
        (404, "NotFound", NotFound),
        (409, "AlreadyExists", AlreadyExists),
        (409, "Conflict", Conflict),
        (422, "Invalid", Invalid),
        (403, "Forbidden", Forbidden),
        (429, "TooManyRequests", None),
        (503, "ServiceUnavailable", None),
        (0, "", None),
    ],
)
def test_classify(status: int, reason: str, kind: type | None) -> None:
    err = classify(status, reason, "msg")
    assert (type(err) if err is not None else None) is kind


def _api_exc(status: int, reason: str = "") -> ApiException:
    exc = ApiException(status=status, reason=reason)
    exc.body = json.dumps({"reason": reason, "message": f"boom {status}"})
    return exc


def test_retry_retries_temporary_errors_then_succeeds() -> None:
    calls, sleeps = [], []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise _api_exc(503)
        return "ok"

    assert retry("op", flaky, sleep=sleeps.append) == "ok"
    assert len(calls) == 3 and len(sleeps) == 2
    assert sleeps[0] <= 0.2 and sleeps[1] <= 0.4  # full jitter under the exponential cap


def test_retry_gives_up_and_does_not_retry_permanent_errors() -> None:
    sleeps: list[float] = []
    with pytest.raises(ApiUnavailable, match="gave up after 3 attempts"):
        retry("op", lambda: (_ for _ in ()).throw(_api_exc(500)), attempts=3, sleep=sleeps.append)
    assert len(sleeps) == 2  # between the attempts, none after the last
    with pytest.raises(Invalid, match="boom 422"):
        retry("op", lambda: (_ for _ in ()).throw(_api_exc(422, "Invalid")), sleep=sleeps.append)
    assert len(sleeps) == 2


# --- the fake's API-server semantics -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "patch", "out"),
    [
        ({"a": 1, "b": {"c": 2, "d": 3}}, {"b": {"c": None}}, {"a": 1, "b": {"d": 3}}),
        ({"a": [1, 2]}, {"a": [3]}, {"a": [3]}),  # lists are replaced
        ({"a": 1}, {"a": None, "z": {"y": 1}}, {"z": {"y": 1}}),
    ],
)
def test_merge_patch(target: dict[str, Any], patch: dict[str, Any], out: dict[str, Any]) -> None:
    assert merge_patch(target, patch) == out


@pytest.mark.parametrize(
    ("selector", "labels", "ok"),
    [
        ("a", {"a": "1"}, True),
        ("a=1,b", {"a": "1"}, False),
        ("a!=1", {"a": "2"}, True),
        ("!a", {"a": "1"}, False),
        ("", {}, True),
    ],
)
def test_label_selectors(selector: str, labels: dict[str, str], ok: bool) -> None:
    assert selector_matches(selector, labels) is ok
