"""The dev cluster's JobSet/Trainer pieces that need no cluster: finding the tools, their configurations,
and webhook configurations rewritten for loopback."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml

from perfsched_dev.devcluster import configs
from perfsched_dev.devcluster.tools import DevClusterError, find_jobset_tools
from perfsched_dev.k8s.webhooks import perfsched_webhook, url_webhooks

MANIFEST = """
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: mutating-webhook-configuration}
webhooks:
- name: mjobset.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-jobset}}
  rules: [{apiGroups: [jobset.x-k8s.io], apiVersions: [v1alpha2], operations: [CREATE], resources: [jobsets]}]
---
apiVersion: v1
kind: Service
metadata: {name: webhook-service}
"""


def test_missing_controllers_are_all_named(tmp_path: Path) -> None:
    with pytest.raises(DevClusterError) as err:
        find_jobset_tools({"PERFSCHED_CACHE": str(tmp_path)})
    text = str(err.value)
    assert f"the JobSet controller not found at {tmp_path}/jobset-v0.12.0/jobset" in text
    assert "the Trainer controller not found" in text
    assert "PERFSCHED_WITH_JOBSETS=1 bash e2e/install-tools.sh" in text


def test_found_when_built(tmp_path: Path) -> None:
    for d, binary in (("jobset-v0.12.0", "jobset"), ("trainer-v2.3.0", "trainer-controller-manager")):
        (tmp_path / d / "crds").mkdir(parents=True)
        (tmp_path / d / "crds" / "x.yaml").write_text("{}")
        (tmp_path / d / "webhooks.yaml").write_text(MANIFEST)
        (tmp_path / d / binary).write_text("#!/bin/sh\n")
        (tmp_path / d / binary).chmod(0o755)
    jt = find_jobset_tools({"PERFSCHED_CACHE": str(tmp_path)})
    assert jt.jobset == tmp_path / "jobset-v0.12.0" / "jobset"
    assert jt.runtime.name == "trainer-runtime.yaml" and jt.runtime.is_file()


def test_webhooks_point_at_loopback_with_the_cluster_ca(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(MANIFEST)
    (body,) = url_webhooks(path, "jobset", 9443, b"CA")
    assert body["metadata"] == {"name": "jobset-mutating-webhook-configuration"}
    (hook,) = body["webhooks"]
    assert hook["clientConfig"] == {
        "url": "https://127.0.0.1:9443/mutate-jobset",
        "caBundle": base64.b64encode(b"CA").decode(),
    }
    ours = perfsched_webhook(8443, b"CA")["webhooks"][0]
    assert ours["clientConfig"]["url"] == "https://127.0.0.1:8443/mutate"
    assert ours["failurePolicy"] == "Ignore" and "jobs" in ours["rules"][0]["resources"]


def test_controller_configurations() -> None:
    js = yaml.safe_load(configs.jobset_config(9443, 8081, "/certs"))
    assert js["internalCertManagement"] == {"enable": False} and js["leaderElection"] == {
        "leaderElect": False
    }
    assert js["webhook"] == {"port": 9443, "host": "127.0.0.1", "certDir": "/certs"}
    tr = yaml.safe_load(configs.trainer_config(9444, 8082))
    assert (
        tr["certManagement"] == {"enable": False}
        and tr["health"]["healthProbeBindAddress"] == "127.0.0.1:8082"
    )
