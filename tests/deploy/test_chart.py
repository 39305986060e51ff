"""The Helm chart lints, renders with default and non-default values, ships the repo's CRDs unchanged,
grants least-privilege RBAC, runs every container locked down, wires kube-scheduler to the extender, and
its schema rejects bad values naming the field."""

from __future__ import annotations

import base64
import filecmp
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.conftest import CHART, KUBE_VERSION, ROOT, Render, by_kind, run_helm

NS = "perfsched-system"


def containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


def scheduler_config(docs: list[dict[str, Any]]) -> dict[str, Any]:
    cm = by_kind(docs, "ConfigMap")["ps-perfsched-scheduler-config"]
    return yaml.safe_load(cm["data"]["scheduler-config.yaml"])


# --- lint and render ---------------------------------------------------------------------------------


def test_helm_lint_passes_strict(helm: Path) -> None:
    out = run_helm(helm, "lint", "--strict", str(CHART), *KUBE_VERSION)
    assert out.returncode == 0, out.stdout + out.stderr
    tls = run_helm(
        helm,
        "lint",
        "--strict",
        str(CHART),
        "--set",
        "tls.enabled=true",
        "--set",
        "metrics.serviceMonitor.enabled=true",
        "--set",
        "metrics.prometheusRule.enabled=true",
    )
    assert tls.returncode == 0, tls.stdout + tls.stderr


def test_default_render_has_every_component(render: Render) -> None:
    docs = render()
    kinds = sorted({d["kind"] for d in docs})
    assert kinds == sorted(
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "CustomResourceDefinition",
            "Deployment",
            "MutatingWebhookConfiguration",  # the operator's adoption webhook (docs/job-kinds.md)
            "PodDisruptionBudget",
            "Role",
            "RoleBinding",
            "Secret",  # its generated serving certificate
            "Service",
            "ServiceAccount",
            "TrainingQueue",
        ]
    )
    assert set(by_kind(docs, "Deployment")) == {
        "ps-perfsched-extender",
        "ps-perfsched-operator",
        "ps-perfsched-scheduler",
    }
    assert set(by_kind(docs, "ServiceAccount")) == {
        "ps-perfsched-extender",
        "ps-perfsched-operator",
        "ps-perfsched-scheduler",
    }
    assert set(by_kind(docs, "CustomResourceDefinition")) == {
        "trainingjobs.perfsched.dev",
        "trainingqueues.perfsched.dev",
    }
    # the optional Prometheus Operator objects are off by default (their CRDs may be absent)
    assert not [d for d in docs if d["apiVersion"].startswith("monitoring.coreos.com")]
    for d in docs:
        if d["kind"] not in {
            "CustomResourceDefinition",
            "ClusterRole",
            "ClusterRoleBinding",
            "TrainingQueue",
            "MutatingWebhookConfiguration",
        }:
            assert d["metadata"]["namespace"] in {NS, "kube-system"}, d["metadata"]


def test_extender_deployment_is_highly_available_and_probed(render: Render) -> None:
    docs = render()
    ext = by_kind(docs, "Deployment")["ps-perfsched-extender"]
    assert ext["spec"]["replicas"] == 2
    (c,) = containers(ext)
    assert c["args"] == ["extender"]
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["resources"]["requests"] and c["resources"]["limits"]
    pdb = by_kind(docs, "PodDisruptionBudget")["ps-perfsched-extender"]
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == ext["spec"]["selector"]["matchLabels"]
    svc = by_kind(docs, "Service")["ps-perfsched-extender"]
    assert svc["spec"]["selector"] == ext["spec"]["template"]["metadata"]["labels"]


def test_operator_uses_leader_election(render: Render) -> None:
    op = by_kind(render(), "Deployment")["ps-perfsched-operator"]
    (c,) = containers(op)
    assert c["args"] == ["operator"]
    env = {e["name"]: e for e in c["env"]}
    assert env["PERFSCHED_OPERATOR_LEADER_ELECT"]["value"] == "true"
    assert env["PERFSCHED_OPERATOR_LEASE_NAME"]["value"] == "ps-perfsched-operator"
    assert env["PERFSCHED_OPERATOR_IDENTITY"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    two = by_kind(render("operator.replicas=2"), "Deployment")["ps-perfsched-operator"]
    assert two["spec"]["replicas"] == 2


def test_kube_scheduler_profile_calls_the_extender_service(render: Render) -> None:
    docs = render()
    sched = by_kind(docs, "Deployment")["ps-perfsched-scheduler"]
    (c,) = containers(sched)
    assert c["image"] == "registry.k8s.io/kube-scheduler:v1.37.2"
    cfg = scheduler_config(docs)
    assert cfg["kind"] == "KubeSchedulerConfiguration"
    assert [p["schedulerName"] for p in cfg["profiles"]] == ["perfsched"]
    assert cfg["leaderElection"]["resourceName"] == "ps-perfsched-scheduler"
    (ext,) = cfg["extenders"]
    # Service name . namespace . svc : port of the extender Service rendered above
    svc = by_kind(docs, "Service")["ps-perfsched-extender"]
    assert ext["urlPrefix"] == f"http://ps-perfsched-extender.{NS}.svc:{svc['spec']['ports'][0]['port']}"
    assert (ext["filterVerb"], ext["prioritizeVerb"]) == ("filter", "prioritize")
    assert "bindVerb" not in ext  # kube-scheduler binds unless extender.bind is set
    (ext,) = scheduler_config(render("extender.bind=true"))["extenders"]
    assert ext["bindVerb"] == "bind"
    assert ext["nodeCacheCapable"] is True
    assert ext["weight"] > 0  # kube-scheduler refuses a prioritize extender without a positive weight
    assert ext["managedResources"] == [{"name": "nvidia.com/gpu", "ignoredByScheduler": False}]
    assert "enableHTTPS" not in ext


# --- security ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sets", [(), ("tls.enabled=true", "operator.replicas=2")])
def test_every_container_is_non_root_read_only_without_escalation(
    render: Render, sets: tuple[str, ...]
) -> None:
    for dep in by_kind(render(*sets), "Deployment").values():
        pod = dep["spec"]["template"]["spec"]
        for c in containers(dep):
            sc = {**pod.get("securityContext", {}), **c.get("securityContext", {})}
            name = f"{dep['metadata']['name']}/{c['name']}"
            assert sc.get("runAsNonRoot") is True, name
            assert sc.get("runAsUser", 0) != 0, name
            assert sc.get("readOnlyRootFilesystem") is True, name
            assert sc.get("allowPrivilegeEscalation") is False, name
            assert sc.get("capabilities", {}).get("drop") == ["ALL"], name
            assert not sc.get("privileged", False), name


ALLOWED_EXTERNAL_ROLES = {
    # upstream roles a second kube-scheduler needs; narrowly scoped by Kubernetes itself
    "system:kube-scheduler",
    "system:volume-scheduler",
    "extension-apiserver-authentication-reader",
}


def test_rbac_is_least_privilege(render: Render) -> None:
    docs = render()
    roles = {**by_kind(docs, "ClusterRole"), **by_kind(docs, "Role")}
    assert roles
    for name, role in roles.items():
        for rule in role["rules"]:
            for field in ("verbs", "resources", "apiGroups"):
                assert "*" not in rule.get(field, []), f"{name}: wildcard in {field}"
            assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"]), name
            assert "secrets" not in rule["resources"], f"{name} must not read secrets"
    for b in [*by_kind(docs, "ClusterRoleBinding").values(), *by_kind(docs, "RoleBinding").values()]:
        ref = b["roleRef"]["name"]
        assert ref not in {"cluster-admin", "admin", "edit"}, b["metadata"]["name"]
        assert ref in roles or ref in ALLOWED_EXTERNAL_ROLES, f"{b['metadata']['name']} -> {ref}"
        for s in b["subjects"]:
            assert s["kind"] == "ServiceAccount" and s["namespace"] == NS
    # the extender binds pods but never creates or deletes them; the operator does
    ext = by_kind(docs, "ClusterRole")["ps-perfsched-extender"]
    pod_verbs = {v for r in ext["rules"] if "pods" in r["resources"] for v in r["verbs"]}
    assert pod_verbs == {"get", "list", "watch"}
    op = by_kind(docs, "ClusterRole")["ps-perfsched-operator"]
    assert {"create", "delete"} <= {v for r in op["rules"] if "pods" in r["resources"] for v in r["verbs"]}
    # both count DRA-backed GPUs: they read (never write) DeviceClasses, ResourceSlices, ResourceClaims
    # and DeviceTaintRules
    for role in (ext, op):
        dra = [r for r in role["rules"] if "resource.k8s.io" in r["apiGroups"]]
        assert {k for r in dra for k in r["resources"]} == {
            "deviceclasses",
            "resourceslices",
            "resourceclaims",
            "devicetaintrules",
        }
        assert {v for r in dra for v in r["verbs"]} == {"get", "list", "watch"}


def test_default_queue_borrows_the_whole_cluster_and_extra_queues_render(render: Render) -> None:
    from scheduler.core.queues import QueueSpec
    from scheduler.k8s.crd import trainingqueue_to_spec

    (default,) = by_kind(render(), "TrainingQueue").values()
    spec = trainingqueue_to_spec(default)
    # nominal 0 of every type, unlimited borrowing in cohort "shared": a lone default queue gets every GPU
    assert isinstance(spec, QueueSpec) and spec.name == "default" and spec.cohort == "shared"
    assert spec.nominal("A100") == 0 and spec.borrowing_limit("A100") is None
    team_a = ("name=team-a", "spec.cohort=shared", "spec.quotas[0].gpuType=A100", "spec.quotas[0].nominal=16")
    queues = by_kind(render(*(f"queues.extra[0].{s}" for s in team_a)), "TrainingQueue")
    assert set(queues) == {"default", "team-a"}
    assert not by_kind(render("queues.createDefault=false"), "TrainingQueue")
    op = by_kind(render(), "ClusterRole")["ps-perfsched-operator"]
    queue_verbs = {v for r in op["rules"] if "trainingqueues" in r["resources"] for v in r["verbs"]}
    assert queue_verbs == {"get", "list", "watch"}


# --- non-default values -----------------------------------------------------------------------------


def test_tls_generates_a_certificate_for_the_extender_service(render: Render, tmp_path: Path) -> None:
    docs = render("tls.enabled=true")
    secret = by_kind(docs, "Secret")["ps-perfsched-extender-tls"]
    assert secret["type"] == "kubernetes.io/tls"
    cert = tmp_path / "tls.crt"
    cert.write_bytes(base64.b64decode(secret["data"]["tls.crt"]))
    text = subprocess.run(
        ["openssl", "x509", "-in", str(cert), "-noout", "-text"], capture_output=True, text=True, check=True
    ).stdout
    assert f"DNS:ps-perfsched-extender.{NS}.svc" in text
    ext = scheduler_config(docs)["extenders"][0]
    assert ext["urlPrefix"].startswith(f"https://ps-perfsched-extender.{NS}.svc:")
    assert ext["enableHTTPS"] is True
    assert ext["tlsConfig"] == {
        "caFile": "/etc/perfsched/tls/ca.crt",
        "serverName": f"ps-perfsched-extender.{NS}.svc",
    }
    (c,) = containers(by_kind(docs, "Deployment")["ps-perfsched-extender"])
    assert c["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["PERFSCHED_EXTENDER_TLS_CERT_FILE"] == "/etc/perfsched/tls/tls.crt"


def test_tls_with_an_existing_secret_generates_nothing(render: Render) -> None:
    docs = render("tls.enabled=true", "tls.secretName=my-cert")
    assert set(by_kind(docs, "Secret")) == {"ps-perfsched-operator-webhook-tls"}  # the webhook's only
    sched = by_kind(docs, "Deployment")["ps-perfsched-scheduler"]
    vols = {v["name"]: v for v in sched["spec"]["template"]["spec"]["volumes"]}
    assert vols["tls"]["secret"]["secretName"] == "my-cert"


def test_prometheus_operator_objects_match_the_shipped_rules(render: Render) -> None:
    docs = render("metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true")
    (rule,) = by_kind(docs, "PrometheusRule").values()
    shipped = yaml.safe_load((CHART / "files" / "perfsched-rules.yaml").read_text())
    assert rule["spec"]["groups"] == shipped["groups"]
    (sm,) = by_kind(docs, "ServiceMonitor").values()
    selected = [
        s
        for s in by_kind(docs, "Service").values()
        if all(s["metadata"]["labels"].get(k) == v for k, v in sm["spec"]["selector"]["matchLabels"].items())
    ]
    # the extender Service (port http) and the operator metrics Service (port metrics)
    ports = {p["name"] for s in selected for p in s["spec"]["ports"]}
    assert {e["port"] for e in sm["spec"]["endpoints"]} == ports == {"http", "metrics"}


def test_grafana_dashboard_configmap_is_picked_up_by_the_sidecar(render: Render) -> None:
    cm = by_kind(render(), "ConfigMap")["ps-perfsched-dashboard"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dash = json.loads(cm["data"]["perfsched.json"])
    assert dash["uid"] == "perfsched-overview"
    assert not by_kind(render("grafana.dashboard.enabled=false"), "ConfigMap").get("ps-perfsched-dashboard")


def test_non_default_values_change_what_is_rendered(render: Render) -> None:
    docs = render(
        "kubeScheduler.enabled=false",
        "extender.replicas=3",
        "extender.podDisruptionBudget.enabled=false",
        "image.tag=1.2.3",
        "extender.nodeSelector.perfsched\\.dev/role=system",
        namespace="ml",
    )
    deps = by_kind(docs, "Deployment")
    assert set(deps) == {"ps-perfsched-extender", "ps-perfsched-operator"}
    assert not [d for d in docs if d["metadata"]["name"].startswith("ps-perfsched-scheduler")]
    assert not by_kind(docs, "PodDisruptionBudget")
    ext = deps["ps-perfsched-extender"]
    assert ext["spec"]["replicas"] == 3
    assert ext["spec"]["template"]["spec"]["nodeSelector"] == {"perfsched.dev/role": "system"}
    assert containers(ext)[0]["image"] == "ghcr.io/perfsched/perfsched:1.2.3"
    assert ext["metadata"]["namespace"] == "ml"


# --- schema -------------------------------------------------------------------------------------------

BAD_VALUES = [
    # (--set, the field the error must name)
    ("extender.replicas=0", "/extender/replicas"),
    ("extender.port=70000", "/extender/port"),
    ("extender.weight=0", "/extender/weight"),
    ("extender.replica=3", "replica"),  # typo: unknown field
    ("operator.replicas=3", "/operator/replicas"),
    ("operator.leaderElection.enabled=false,operator.replicas=2", "/operator/replicas"),
    # two kube-schedulers without leader election would both bind, each blind to the other's assumed pods
    ("kubeScheduler.leaderElection.enabled=false,kubeScheduler.replicas=2", "/kubeScheduler/replicas"),
    ("logLevel=LOUD", "/logLevel"),
    ("extender.httpTimeout=5 seconds", "/extender/httpTimeout"),
    ("kubeScheduler.schedulerName=Perf Sched", "/kubeScheduler/schedulerName"),
    (
        "containerSecurityContext.readOnlyRootFilesystem=false",
        "/containerSecurityContext/readOnlyRootFilesystem",
    ),
    ("podSecurityContext.runAsNonRoot=false", "/podSecurityContext/runAsNonRoot"),
    ("tls.validityDays=0", "/tls/validityDays"),
    ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
    # a list of policies, or a spec that does not parse, is refused before the operator ever starts
    ("operator.policy=las\\,fifo", "/operator/policy"),
    ("operator.policy=las:preemptive", "/operator/policy"),
]


@pytest.mark.parametrize(("value", "field"), BAD_VALUES)
def test_schema_rejects_invalid_values_naming_the_field(helm: Path, value: str, field: str) -> None:
    out = run_helm(helm, "template", "ps", str(CHART), *KUBE_VERSION, "--set", value)
    assert out.returncode != 0, f"{value} was accepted"
    assert "schema" in out.stderr
    assert field in out.stderr, out.stderr


def test_default_policy_is_the_operators_default_from_one_constant(render: Render) -> None:
    """Helm's default `operator.policy` is empty, so the operator runs `DEFAULT_POLICY_SPEC` (one place to
    change it); a spec given to the chart reaches the operator as PERFSCHED_OPERATOR_POLICY unchanged."""
    from scheduler.policies import DEFAULT_POLICY_SPEC
    from scheduler.settings import Settings

    assert yaml.safe_load((CHART / "values.yaml").read_text())["operator"]["policy"] == ""
    op = by_kind(render(), "Deployment")["ps-perfsched-operator"]
    assert "PERFSCHED_OPERATOR_POLICY" not in {e["name"] for e in containers(op)[0]["env"]}
    assert Settings.model_fields["operator_policy"].default == DEFAULT_POLICY_SPEC
    op = by_kind(render("operator.policy=las:preemptive=false"), "Deployment")["ps-perfsched-operator"]
    env = {e["name"]: e.get("value") for e in containers(op)[0]["env"]}
    assert env["PERFSCHED_OPERATOR_POLICY"] == "las:preemptive=false"


def test_schema_accepts_the_default_values_file_as_documented(helm: Path) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert set(values) <= set(schema["properties"]), set(values) - set(schema["properties"])


# --- CRDs ---------------------------------------------------------------------------------------------


def test_chart_crds_are_identical_to_the_repo_crds() -> None:
    repo = sorted(p.name for p in (ROOT / "crds").glob("*.yaml"))
    chart = sorted(p.name for p in (CHART / "crds").glob("*.yaml"))
    assert repo, "crds/*.yaml is missing"
    assert chart == repo, "run helm/sync-crds.sh"
    _, mismatch, errors = filecmp.cmpfiles(ROOT / "crds", CHART / "crds", repo, shallow=False)
    assert not mismatch and not errors, f"{mismatch or errors} differ: run helm/sync-crds.sh"
    check = subprocess.run(
        ["bash", str(ROOT / "helm" / "sync-crds.sh"), "--check"], capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr


def test_sync_script_reports_drift(tmp_path: Path) -> None:
    # a copy of the layout with a changed chart CRD: --check must fail and name the fix
    (tmp_path / "crds").mkdir()
    (tmp_path / "helm" / "perfsched" / "crds").mkdir(parents=True)
    (tmp_path / "crds" / "a.yaml").write_text("kind: A\n")
    (tmp_path / "helm" / "perfsched" / "crds" / "a.yaml").write_text("kind: B\n")
    script = tmp_path / "helm" / "sync-crds.sh"
    script.write_text((ROOT / "helm" / "sync-crds.sh").read_text())
    bad = subprocess.run(["bash", str(script), "--check"], capture_output=True, text=True)
    assert bad.returncode == 1 and "run helm/sync-crds.sh" in bad.stderr
    subprocess.run(["bash", str(script)], check=True, capture_output=True)
    assert (tmp_path / "helm" / "perfsched" / "crds" / "a.yaml").read_text() == "kind: A\n"
    assert subprocess.run(["bash", str(script), "--check"], capture_output=True).returncode == 0


# --- the chart runs commands the image has ----------------------------------------------------------


CHART_SETTINGS_CASES = [
    (),
    ("operator.leaderElection.enabled=false", "operator.policy=fifo", "operator.policyConfig.backfill=true"),
    # a policy spec; helm's --set needs the comma inside a list value escaped
    ("operator.policy=las:thresholds_gpu_hours=[1\\,10];preemptive=false",),
    ("tls.enabled=true",),
]


@pytest.mark.parametrize("sets", CHART_SETTINGS_CASES)
def test_chart_runs_perfsched_commands_with_valid_settings(render: Render, sets: tuple[str, ...]) -> None:
    """Every perfsched container runs a real `perfsched` subcommand, and its PERFSCHED_* environment is
    accepted by the Settings object that command reads (so a typo or a missing setting fails here)."""
    from pydantic import ValidationError
    from typer.testing import CliRunner

    from scheduler.cli import build_app
    from scheduler.settings import Settings

    app = build_app()
    runner = CliRunner()
    for dep in by_kind(render(*sets), "Deployment").values():
        for c in containers(dep):
            if not c["image"].startswith("ghcr.io/perfsched/perfsched"):
                continue
            result = runner.invoke(app, [*c["args"], "--help"])
            assert result.exit_code == 0, f"perfsched {c['args']} --help: {result.output}"
            env = {e["name"]: e.get("value", "from-the-downward-api") for e in c["env"]}
            ours = {k: v for k, v in env.items() if k.startswith("PERFSCHED_")}
            unknown = [k for k in ours if k.removeprefix("PERFSCHED_").lower() not in Settings.model_fields]
            assert not unknown, f"{dep['metadata']['name']}: settings that do not exist: {unknown}"
            # read them the way the command does: from the environment
            with pytest.MonkeyPatch.context() as mp:
                for k, v in ours.items():
                    mp.setenv(k, v)
                try:
                    Settings()
                except ValidationError as exc:
                    pytest.fail(f"{dep['metadata']['name']}: invalid settings {exc}")


def test_adoption_webhook_certificate_rbac_and_off_switch(render: Render, tmp_path: Path) -> None:
    docs = render()
    secret = by_kind(docs, "Secret")["ps-perfsched-operator-webhook-tls"]
    cert = tmp_path / "tls.crt"
    cert.write_bytes(base64.b64decode(secret["data"]["tls.crt"]))
    text = subprocess.run(
        ["openssl", "x509", "-in", str(cert), "-noout", "-text"], capture_output=True, text=True, check=True
    ).stdout
    assert f"DNS:ps-perfsched-operator-webhook.{NS}.svc" in text
    (hook,) = by_kind(docs, "MutatingWebhookConfiguration")["ps-perfsched-adopt"]["webhooks"]
    assert hook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
    assert hook["clientConfig"]["service"]["name"] == "ps-perfsched-operator-webhook"
    assert hook["failurePolicy"] == "Ignore" and hook["rules"][0]["operations"] == ["CREATE"]
    (c,) = containers(by_kind(docs, "Deployment")["ps-perfsched-operator"])
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["PERFSCHED_OPERATOR_WEBHOOK_PORT"] == "9443"
    assert env["PERFSCHED_OPERATOR_WEBHOOK_CERT_FILE"] == "/etc/perfsched/webhook/tls.crt"
    rules = by_kind(docs, "ClusterRole")["ps-perfsched-operator"]["rules"]
    batch = next(r for r in rules if r["apiGroups"] == ["batch"])
    assert batch["resources"] == ["jobs"] and "patch" in batch["verbs"] and "delete" not in batch["verbs"]

    off = render("operator.adoptWorkloads=false")
    assert not by_kind(off, "MutatingWebhookConfiguration") and not by_kind(off, "Secret")
    rules = by_kind(off, "ClusterRole")["ps-perfsched-operator"]["rules"]
    assert not [r for r in rules if r["apiGroups"] == ["batch"]]
    (c,) = containers(by_kind(off, "Deployment")["ps-perfsched-operator"])
    assert {e["name"]: e.get("value") for e in c["env"]}["PERFSCHED_OPERATOR_ADOPT_WORKLOADS"] == "false"


def test_workload_api_is_off_by_default_and_its_rbac_comes_with_the_value(render: Render) -> None:
    def operator(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        (c,) = containers(by_kind(docs, "Deployment")["ps-perfsched-operator"])
        env = {e["name"]: e.get("value") for e in c["env"]}
        gang = [
            r
            for r in by_kind(docs, "ClusterRole")["ps-perfsched-operator"]["rules"]
            if {"workloads", "podgroups"} & set(r["resources"])
        ]
        return env, gang

    env, gang = operator(render())
    assert env["PERFSCHED_OPERATOR_WORKLOAD_API"] == "false" and gang == []
    env, gang = operator(render("operator.workloadApi=true"))
    assert env["PERFSCHED_OPERATOR_WORKLOAD_API"] == "true"
    assert {k for r in gang for k in r["resources"]} == {"workloads", "podgroups"}
    assert {"create", "delete"} <= {v for r in gang for v in r["verbs"]}


def test_the_operator_keeps_its_learning_state_in_one_configmap_of_its_namespace(render: Render) -> None:
    docs = render()
    role = by_kind(docs, "Role")["ps-perfsched-operator-learning-state"]
    assert role["metadata"]["namespace"] == NS
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert named == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["ps-perfsched-operator-learning-state"],
            "verbs": ["get", "update"],
        }
    ]
    assert [r["verbs"] for r in role["rules"] if not r.get("resourceNames")] == [["create"]]
    assert "ps-perfsched-operator-learning-state" in by_kind(docs, "RoleBinding")
    env = {
        e["name"]: e.get("value")
        for c in containers(by_kind(docs, "Deployment")["ps-perfsched-operator"])
        for e in c.get("env", [])
    }
    assert env["PERFSCHED_OPERATOR_LEARNING_STATE_CONFIGMAP"] == "ps-perfsched-operator-learning-state"
    assert env["PERFSCHED_OPERATOR_LEARNING_STATE_INTERVAL_SECONDS"] == "60"
    off = render("operator.learningState.enabled=false")
    assert "ps-perfsched-operator-learning-state" not in by_kind(off, "Role")
    env = {
        e["name"]: e.get("value")
        for c in containers(by_kind(off, "Deployment")["ps-perfsched-operator"])
        for e in c.get("env", [])
    }
    assert env["PERFSCHED_OPERATOR_LEARNING_STATE_CONFIGMAP"] == ""
