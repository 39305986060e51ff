"""Admission webhooks and workload controllers' objects in the local control plane.

Developer tooling (calls the API server). The dev cluster runs every webhook server on the loopback
address with the API server's own serving certificate (issued for 127.0.0.1 by the throw-away CA that
``perfsched_dev.devcluster`` makes), so a webhook configuration points at
``https://127.0.0.1:<port><path>`` with that CA as its ``caBundle`` instead of at an in-cluster
Service. ``url_webhooks`` rewrites the configurations a controller ships that way (pure);
``apply_webhooks`` creates or replaces them; ``perfsched_webhook`` is the configuration of perfsched's
own webhook, which suspends adopted Jobs, JobSets and TrainJobs at creation (the chart's template says the
same for an in-cluster operator); ``apply_objects`` creates custom objects such as a
ClusterTrainingRuntime.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

from scheduler.k8s.errors import AlreadyExists, Conflict, api_call

WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
#: The name of perfsched's MutatingWebhookConfiguration (also the chart's, without the release prefix).
PERFSCHED_WEBHOOK = "perfsched-adopt"


def url_webhooks(path: Path, prefix: str, port: int, ca_pem: bytes) -> list[dict[str, Any]]:
    """The webhook configurations in ``path`` (a controller's ``manifests.yaml``), named ``<prefix>-...``
    and pointing at ``https://127.0.0.1:<port><path>`` with ``ca_pem`` as the CA bundle (pure)."""
    out: list[dict[str, Any]] = []
    for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
        if not isinstance(doc, dict) or doc.get("kind") not in WEBHOOK_KINDS:
            continue
        body = copy.deepcopy(doc)
        body["metadata"] = {"name": f"{prefix}-{doc['metadata']['name']}"}
        for hook in body.get("webhooks") or []:
            svc_path = ((hook.get("clientConfig") or {}).get("service") or {}).get("path") or "/"
            hook["clientConfig"] = {
                "url": f"https://127.0.0.1:{port}{svc_path}",
                "caBundle": base64.b64encode(ca_pem).decode(),
            }
        out.append(body)
    return out


def perfsched_webhook(port: int, ca_pem: bytes) -> dict[str, Any]:
    """perfsched's MutatingWebhookConfiguration for the local control plane (pure)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": PERFSCHED_WEBHOOK},
        "webhooks": [
            {
                "name": "adopt.perfsched.dev",
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
                # down or slow: the Job is created unsuspended and the operator suspends it next round
                "failurePolicy": "Ignore",
                "timeoutSeconds": 5,
                "clientConfig": {
                    "url": f"https://127.0.0.1:{port}/mutate",
                    "caBundle": base64.b64encode(ca_pem).decode(),
                },
                "rules": [
                    {
                        "apiGroups": ["batch", "jobset.x-k8s.io", "trainer.kubeflow.org", "kubeflow.org"],
                        "apiVersions": ["*"],
                        "operations": ["CREATE"],
                        "resources": ["jobs", "jobsets", "trainjobs", "pytorchjobs", "mpijobs", "tfjobs"],
                        "scope": "Namespaced",
                    }
                ],
            }
        ],
    }


def apply_webhooks(api: k8s.ApiClient, configs: Iterable[Mapping[str, Any]]) -> list[str]:
    """Create or replace each webhook configuration; returns their names."""
    adm = k8s.AdmissionregistrationV1Api(api)
    names = []
    for body in configs:
        name = str(body["metadata"]["name"])
        mutating = body["kind"] == "MutatingWebhookConfiguration"
        create = (
            adm.create_mutating_webhook_configuration
            if mutating
            else adm.create_validating_webhook_configuration
        )
        read = (
            adm.read_mutating_webhook_configuration if mutating else adm.read_validating_webhook_configuration
        )
        replace = (
            adm.replace_mutating_webhook_configuration
            if mutating
            else adm.replace_validating_webhook_configuration
        )
        try:
            with api_call(f"creating {body['kind']} {name}"):
                create(dict(body))
        except (AlreadyExists, Conflict):
            with api_call(f"replacing {body['kind']} {name}"):
                current = read(name)
                replace(
                    name,
                    {
                        **body,
                        "metadata": {"name": name, "resourceVersion": current.metadata.resource_version},
                    },
                )
        names.append(name)
    return names


def apply_objects(api: k8s.ApiClient, path: Path) -> list[str]:
    """Create every cluster-scoped custom object in ``path`` (existing ones are kept); returns their names."""
    custom = k8s.CustomObjectsApi(api)
    names = []
    for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
        if not isinstance(doc, dict):
            continue
        group, version = str(doc["apiVersion"]).split("/", 1)
        plural = str(doc["kind"]).lower() + "s"
        try:
            with api_call(f"creating {doc['kind']} {doc['metadata']['name']}"):
                custom.create_cluster_custom_object(group, version, plural, doc)
        except AlreadyExists:
            pass
        names.append(str(doc["metadata"]["name"]))
    return names
