"""spec.modelProfile in the operator: the profile in a ConfigMap reaches the policy's Job (and so the
predictor); a missing or invalid one is named in the ModelProfile condition, and the job falls back to
spec.model / spec.modelParams or, with neither, waits with the problem as its reason."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from perfmodel.profile import Phase
from perfmodel.profiling import profile_zoo
from scheduler.core.types import Job, PlacementShape
from scheduler.k8s.profiles import ModelProfiles
from scheduler.operator.reconcile import Operator
from tests.operator.conftest import Harness, RecordingOracle, gpu_node, make_harness, trainingjob

REF = {"configMapName": "profiles", "key": "resnet18.json"}


@dataclass
class JobRecordingOracle(RecordingOracle):
    jobs: dict[str, Job] = field(default_factory=dict)

    def throughput(self, queries: Any) -> list[float]:
        for job, _shape in queries:
            self.jobs[job.name] = job
        return super().throughput(queries)

    def observe(self, job: Job, shape: PlacementShape, throughput: float) -> None:
        return None


def operator(h: Harness) -> tuple[Operator, JobRecordingOracle]:
    oracle = JobRecordingOracle()
    op = Operator(h.api, h.policy, oracle, config=h.config, clock=h.clock, may_act=lambda: h.leader[0])
    return op, oracle


def condition(h: Harness, name: str, type_: str) -> dict[str, Any]:
    (c,) = [c for c in h.api.status_of("ml", name)["conditions"] if c["type"] == type_]
    return c


def profile_text() -> str:
    return json.dumps(profile_zoo("resnet18", batch_size=32).to_json())


def test_a_profile_reaches_the_predictor_and_says_so() -> None:
    h = make_harness()
    h.api.add_node(gpu_node("a1", 8, "A100"))
    h.api.add_configmap("ml", "profiles", {"resnet18.json": profile_text()})
    obj = trainingjob("p", modelProfile=REF)
    del obj["spec"]["model"]
    h.api.add_trainingjob(obj)
    op, oracle = operator(h)
    rep = op.run_round()
    assert rep.did("start", "ml/p")
    job = oracle.jobs["ml/p"]
    prof = job.model_profile
    assert prof is not None and prof.model.name == "resnet18"
    # The modelParams route from the profile: its parameters and training FLOPs per sample.
    assert (job.model, job.params, job.flops_per_sample) == ("", 11_689_512.0, prof.train_flops_per_sample)
    assert prof.step_flops(Phase.OPTIMIZER) > 0
    c = condition(h, "p", "ModelProfile")
    assert (c["status"], c["reason"]) == ("True", "Loaded")
    assert c["message"].startswith("resnet18 from ConfigMap ml/profiles key 'resnet18.json': ")
    # The next round keeps it as it is (same message, same transition time).
    h.clock.advance(30.0)
    op.run_round()
    assert condition(h, "p", "ModelProfile") == c


def test_missing_configmap_falls_back_to_the_zoo_model_and_says_so() -> None:
    h = make_harness()
    h.api.add_node(gpu_node("a1", 8, "A100"))
    h.api.add_trainingjob(trainingjob("z", modelProfile=REF))
    op, oracle = operator(h)
    assert op.run_round().did("start", "ml/z")
    job = oracle.jobs["ml/z"]
    assert job.model == "resnet50" and job.model_profile is None and job.params is None
    c = condition(h, "z", "ModelProfile")
    assert (c["status"], c["reason"]) == ("False", "InvalidModelProfile")
    assert c["message"] == (
        "spec.modelProfile: ConfigMap ml/profiles does not exist; "
        "predicting from spec.model 'resnet50' instead"
    )


def test_invalid_profile_alone_waits_naming_the_problem_then_runs_once_fixed() -> None:
    h = make_harness()
    h.api.add_node(gpu_node("a1", 8, "A100"))
    doc = json.loads(profile_text())
    doc["schema_version"] = 7
    h.api.add_configmap("ml", "profiles", {"resnet18.json": json.dumps(doc)})
    obj = trainingjob("bad", modelProfile=REF)
    del obj["spec"]["model"]
    h.api.add_trainingjob(obj)
    op, _ = operator(h)
    op.run_round()
    st = h.api.status_of("ml", "bad")
    assert st["phase"] == "Pending"
    problem = (
        "spec.modelProfile: ConfigMap ml/profiles key 'resnet18.json': profile: schema_version 7 is not "
        "supported (this perfsched reads 1)"
    )
    assert condition(h, "bad", "Admitted")["message"] == problem
    assert condition(h, "bad", "ModelProfile")["message"] == problem + "; the job waits until it is fixed"
    h.api.add_configmap("ml", "profiles", {"resnet18.json": profile_text()})
    assert op.run_round().did("start", "ml/bad")
    assert condition(h, "bad", "ModelProfile")["status"] == "True"


def test_model_profiles_name_every_problem() -> None:
    from scheduler.k8s.crd import ModelProfileRef
    from scheduler.k8s.fakeapi import FakeKubeApi

    api = FakeKubeApi(lambda: 0.0)
    profiles = ModelProfiles(api)
    ref = ModelProfileRef(config_map_name="cm", key="p.json")
    assert profiles.resolve("ns", ref) == "spec.modelProfile: ConfigMap ns/cm does not exist"
    api.add_configmap("ns", "cm", {"other": "{}"})
    assert (
        profiles.resolve("ns", ref)
        == "spec.modelProfile: ConfigMap ns/cm has no key 'p.json' (its keys: other)"
    )
    api.add_configmap("ns", "cm", {"p.json": "{nope"})
    assert str(profiles.resolve("ns", ref)).startswith(
        "spec.modelProfile: ConfigMap ns/cm key 'p.json' is not JSON"
    )
    api.add_configmap("ns", "cm", {"p.json": json.dumps({"schema_version": 1})})
    assert (
        profiles.resolve("ns", ref)
        == "spec.modelProfile: ConfigMap ns/cm key 'p.json': profile: missing field 'model'"
    )
    api.add_configmap("ns", "cm", {"p.json": profile_text()})
    first = profiles.resolve("ns", ref)
    assert not isinstance(first, str) and first.model.name == "resnet18"
    assert profiles.resolve("ns", ref) is first  # same resourceVersion: parsed once
