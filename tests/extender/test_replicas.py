"""Why two extender replicas cannot double-book a node: kube-scheduler counts the GPUs itself.

The Helm chart runs two extender replicas behind one Service, and each keeps its own bind reservations.
What keeps two pods off the same last GPUs is kube-scheduler: with ``nvidia.com/gpu`` a managed resource
that is *not* ignored by the scheduler, its NodeResourcesFit filter (which runs before the extender is
asked) counts the GPUs of every bound pod and of every pod it has assumed onto a node and is still
binding, in one scheduling cycle at a time. These tests pin the configuration that argument rests on,
in both places perfsched writes it (docs/extender.md, "Several replicas").
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from perfsched_dev.devcluster import configs

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "perfsched"


def test_the_chart_keeps_gpus_counted_by_kube_scheduler_whatever_the_values() -> None:
    template = (CHART / "templates" / "kube-scheduler.yaml").read_text()
    block = template[template.index("managedResources:") :]
    # literal values, not a knob in values.yaml: no template expression may switch the counting off
    assert re.match(
        r"managedResources:\s*\n\s*- name: nvidia\.com/gpu\s*\n\s*ignoredByScheduler: false\s*\n", block
    )
    # one active kube-scheduler at a time when it runs several replicas: leader election is on by default
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["kubeScheduler"]["leaderElection"]["enabled"] is True
    assert "leaderElect: {{ $ks.leaderElection.enabled }}" in template
    # ... and the extender runs more than one replica, which is what makes the argument necessary
    assert values["extender"]["replicas"] >= 2


def test_the_dev_cluster_scheduler_counts_gpus_too() -> None:
    cfg = configs.perfsched_scheduler_config("/k/kubeconfig", "http://127.0.0.1:1/")
    (ext,) = cfg["extenders"]
    assert ext["managedResources"] == [{"name": "nvidia.com/gpu", "ignoredByScheduler": False}]
    assert ext["nodeCacheCapable"] is True  # the extender filters what NodeResourcesFit let through
    assert cfg["leaderElection"] == {"leaderElect": False}  # a single scheduler process
